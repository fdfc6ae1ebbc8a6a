from django import forms
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from apps.tenants.credit_code import validate_credit_code
from apps.tenants.licence import validate_licence
from apps.tenants.models import ApiKeyScope, Park, Role
from apps.tenants.roles import roles_assignable_by


class OrganizationForm(forms.Form):
    name = forms.CharField(label=_("Organization name"), max_length=120)
    park = forms.ModelChoiceField(label=_("Park"), queryset=Park.objects.all(), empty_label=None)
    accept_terms = forms.BooleanField(
        error_messages={"required": _("Accept the terms of service to create your enterprise.")}
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["accept_terms"].label = format_html(
            _('I accept the <a href="{}" target="_blank">terms of service</a>.'),
            reverse("portal:terms"),
        )


class VerificationForm(forms.Form):
    legal_name = forms.CharField(
        label=_("Legal name"), max_length=200, help_text=_("Exactly as on the business licence.")
    )
    credit_code = forms.CharField(
        label=_("Unified social credit code"),
        min_length=1,
        max_length=24,
        validators=[validate_credit_code],
        help_text=_("18 characters, on the business licence."),
    )
    licence = forms.FileField(
        label=_("Business licence"),
        validators=[validate_licence],
        help_text=_("A scan or photo: PDF, PNG or JPEG, at most 10 MB."),
    )


class InvitationForm(forms.Form):
    email = forms.EmailField(label=_("Email"))
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices)

    def __init__(self, *args, inviter_role=None, **kwargs):
        super().__init__(*args, **kwargs)
        assignable = roles_assignable_by(inviter_role)
        self.fields["role"].choices = [(v, label) for v, label in Role.choices if v in assignable]
        self.fields["role"].initial = Role.MEMBER


class RoleForm(forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices)


class ApiKeyForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=80)
    scope = forms.ChoiceField(label=_("Scope"), choices=ApiKeyScope.choices)
    expires_at = forms.DateTimeField(
        label=_("Expires at"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text=_("Leave empty for a key that does not expire."),
    )


class RejectForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=1000,
        help_text=_("The organization reads this; say what to correct."),
    )


class MfaPolicyForm(forms.Form):
    require_mfa_for_operators = forms.BooleanField(
        label=_("Operators must use two-factor authentication"), required=False
    )
    require_mfa_for_owners = forms.BooleanField(
        label=_("Organization owners must use two-factor authentication"), required=False
    )
