from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from apps.agents.services import MAX_TOKEN_HOURS, MIN_TOKEN_HOURS


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
