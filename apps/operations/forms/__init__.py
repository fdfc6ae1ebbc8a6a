from django import forms
from django.utils.translation import gettext_lazy as _

from apps.tenants.models import Organization


class AuditFilterForm(forms.Form):
    actor = forms.CharField(label=_("Actor"), required=False)
    # An id from an organization's page; the form searches by name (see filters.py).
    organization = forms.ModelChoiceField(
        label=_("Organization"),
        queryset=Organization.objects.none(),
        required=False,
        widget=forms.HiddenInput,
    )
    organization_name = forms.CharField(label=_("Organization"), required=False, max_length=100)
    action = forms.CharField(label=_("Action"), required=False, help_text=_("e.g. api_key."))
    object_type = forms.CharField(label=_("Object type"), required=False)
    target = forms.CharField(
        label=_("Object"), required=False, max_length=200, help_text=_("Its name or id.")
    )
    since = forms.DateTimeField(
        label=_("From"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    until = forms.DateTimeField(
        label=_("Until"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args, organizations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["organization"].queryset = organizations
