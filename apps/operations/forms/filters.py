"""The lists' filters, read from the query string (so a filtered list is a link). An invalid
filter is reported on its field and the valid ones still apply."""

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import PriceKind
from apps.core.widgets import LongSelect
from apps.operations.selectors.lists import ACTIVE
from apps.orchestration.models import NodeHealth
from apps.orders.models import InstanceState, OrderKind, OrderState
from apps.tenants.models import VerificationState


def _all(label=None):
    return [("", label or _("All"))]


# The regions' and pools' selects grow with the park (tens of each at issue 15's scale): their
# options are written out in Python (LongSelect).


class FilterForm(forms.Form):
    def values(self) -> dict:
        """The valid, non-empty filters as the list selectors' keywords (`q` is `query`)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        values = {k: v for k, v in data.items() if v not in ("", None)}
        if "q" in values:
            values["query"] = values.pop("q")
        return values


class OrganizationFilterForm(FilterForm):
    q = forms.CharField(label=_("Search"), required=False, max_length=100)
    state = forms.ChoiceField(
        label=_("Verification"), required=False, choices=_all() + VerificationState.choices
    )


class OrderFilterForm(FilterForm):
    # Absent from the query string: the approval queue. "All states" is an explicit empty value.
    DEFAULT_STATE = OrderState.AWAITING_APPROVAL

    state = forms.ChoiceField(
        label=_("State"), required=False, choices=_all(_("All states")) + OrderState.choices
    )
    kind = forms.ChoiceField(label=_("Kind"), required=False, choices=_all() + OrderKind.choices)
    # An organization's pages link here with its id; the form searches by name, since a list
    # of every organization to choose from grows with the park (1,000 at issue 15's scale).
    organization = forms.ModelChoiceField(
        label=_("Organization"), queryset=None, required=False, widget=forms.HiddenInput
    )
    organization_name = forms.CharField(label=_("Organization"), required=False, max_length=100)
    q = forms.CharField(label=_("Order # or instance"), required=False, max_length=100)

    def __init__(self, data=None, *, organizations, **kwargs):
        if data is not None and "state" not in data:
            data = data.copy()
            data["state"] = self.DEFAULT_STATE
        super().__init__(data, **kwargs)
        self.fields["organization"].queryset = organizations


class InstanceFilterForm(FilterForm):
    ACTIVE = ACTIVE

    state = forms.ChoiceField(
        label=_("State"),
        required=False,
        choices=[(ACTIVE, _("Holding resources")), ("", _("All states"))] + InstanceState.choices,
    )
    # An organization's pages link here with its id; the form searches by name, since a list
    # of every organization to choose from grows with the park (1,000 at issue 15's scale).
    organization = forms.ModelChoiceField(
        label=_("Organization"), queryset=None, required=False, widget=forms.HiddenInput
    )
    organization_name = forms.CharField(label=_("Organization"), required=False, max_length=100)
    region = forms.ModelChoiceField(
        label=_("Region"), queryset=None, required=False, empty_label=_("All"), widget=LongSelect
    )
    q = forms.CharField(label=_("Name or host"), required=False, max_length=100)

    def __init__(self, data=None, *, organizations, regions, **kwargs):
        if data is not None and "state" not in data:
            data = data.copy()
            data["state"] = self.ACTIVE
        super().__init__(data, **kwargs)
        self.fields["organization"].queryset = organizations
        self.fields["region"].queryset = regions


class NodeFilterForm(FilterForm):
    pool = forms.ModelChoiceField(
        label=_("Pool"), queryset=None, required=False, empty_label=_("All"), widget=LongSelect
    )
    health = forms.ChoiceField(
        label=_("Health"), required=False, choices=_all() + NodeHealth.choices
    )
    drained = forms.NullBooleanField(
        label=_("Drained"),
        required=False,
        widget=forms.Select(
            choices=[("", _("All")), ("true", _("Drained")), ("false", _("In service"))]
        ),
    )
    q = forms.CharField(label=_("Host"), required=False, max_length=100)

    def __init__(self, *args, pools, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = pools


class PriceFilterForm(FilterForm):
    region = forms.ModelChoiceField(
        label=_("Region"), queryset=None, required=False, empty_label=_("All"), widget=LongSelect
    )
    kind = forms.ChoiceField(label=_("Kind"), required=False, choices=_all() + PriceKind.choices)
    when = forms.ChoiceField(
        label=_("Show"),
        required=False,
        choices=[
            ("current", _("In force now")),
            ("scheduled", _("Scheduled")),
            ("", _("All, with history")),
        ],
    )

    def __init__(self, data=None, *, regions, **kwargs):
        if data is not None and "when" not in data:
            data = data.copy()
            data["when"] = "current"
        super().__init__(data, **kwargs)
        self.fields["region"].queryset = regions


class IdleFilterForm(FilterForm):
    min_minutes = forms.IntegerField(
        label=_("Idle for at least (minutes)"),
        required=False,
        min_value=0,
        max_value=100000,
        help_text=_("Empty: the park's threshold."),
    )
