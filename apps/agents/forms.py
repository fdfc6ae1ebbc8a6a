from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from apps.agents.services import MAX_TOKEN_HOURS, MIN_TOKEN_HOURS
from apps.catalog.models import AcceleratorModel


class JoinTokenForm(forms.Form):
    pool = forms.ModelChoiceField(
        label=_("Pool"),
        queryset=None,
        help_text=_("The server becomes a node of this pool (of a backend whose driver is agent)."),
    )
    valid_hours = forms.IntegerField(
        label=_("Valid for (hours)"),
        min_value=MIN_TOKEN_HOURS,
        max_value=MAX_TOKEN_HOURS,
        help_text=_("Unused after this, the token expires. It works once."),
    )
    note = forms.CharField(
        label=_("Note"),
        max_length=200,
        required=False,
        help_text=_("Which server it is for, to recognize it in the list."),
    )

    def __init__(self, *args, pools, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = pools
        self.fields["pool"].label_from_instance = lambda pool: (
            f"{pool.name} · {pool.region} · {pool.accelerator_model}"
        )
        self.fields["valid_hours"].initial = settings.LOAM_AGENT_TOKEN_HOURS
        only = list(pools[:2])
        if len(only) == 1:  # nothing to choose: the park's one pool for agent servers
            self.fields["pool"].initial = only[0]


class AgentPoolForm(forms.Form):
    name = forms.CharField(
        label=_("Pool name"),
        max_length=80,
        help_text=_("E.g. the partner's site and card: “wuxi-l40s”."),
    )
    region = forms.ModelChoiceField(label=_("Region"), queryset=None)
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"),
        queryset=None,
        help_text=_("The cards of the servers that join it."),
    )

    def __init__(self, *args, park, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["region"].queryset = park.regions.order_by("name")
        self.fields["accelerator_model"].queryset = AcceleratorModel.objects.order_by(
            "vendor", "name"
        )


class SaveImageForm(forms.Form):
    """A stopped host of the organization saved as its image: which, and what to call it."""

    instance = forms.ModelChoiceField(
        label=_("Stopped host"),
        queryset=None,
        help_text=_("Only a stopped host on the host agent's servers can be saved."),
    )
    name = forms.CharField(label=_("Image name"), max_length=120)
    description = forms.CharField(
        label=_("Description"), required=False, max_length=2000, widget=forms.Textarea({"rows": 3})
    )

    def __init__(self, *args, hosts, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["instance"].queryset = hosts
