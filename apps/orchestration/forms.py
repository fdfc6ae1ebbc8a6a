from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel, Image, Region
from apps.core.numbers import IdsField
from apps.core.widgets import LongSelect
from apps.orchestration import selectors
from apps.orchestration.models import SchedulingPolicy, TaskPreference
from apps.orchestration.scheduling import (
    MAX_FAIR_SHARE,
    MAX_NODES,
    MAX_PRIORITY,
    MAX_RAM_GB,
    MAX_VCPU,
    MIN_PRIORITY,
)
from apps.tenants.models import Organization


class TaskForm(forms.Form):
    """A training task. Prices are asked in the currency's major unit, accelerators in cards
    (0.25 is a quarter share of one card); `task_data()` gives the service its units."""

    name = forms.CharField(label=_("Name"), max_length=80, initial="train")
    image = forms.ModelChoiceField(
        label=_("Image"), queryset=Image.objects.none(), to_field_name="code", empty_label=None
    )
    command = forms.CharField(
        label=_("Command"),
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "python train.py --epochs 10"}),
    )
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"),
        queryset=AcceleratorModel.objects.none(),
        to_field_name="slug",
        required=False,
        empty_label=_("Any model the image runs on"),
    )
    accelerators = forms.DecimalField(
        label=_("Accelerators"),
        min_value=Decimal("0.001"),
        max_value=8,
        decimal_places=3,
        initial=1,
        help_text=_("On each node: whole cards (1, 2, 4, 8), or a share of one card: 0.25, 0.5 …"),
    )
    node_count = forms.IntegerField(
        label=_("Nodes"),
        min_value=1,
        max_value=MAX_NODES,
        initial=1,
        required=False,
        help_text=_(
            "Above 1: that many nodes of one pool, each with the accelerators, vCPU and RAM "
            "below, started together (Slurm or simulator pools)."
        ),
    )
    vcpu = forms.IntegerField(label=_("vCPU"), min_value=1, max_value=MAX_VCPU, initial=8)
    ram_gb = forms.IntegerField(label=_("RAM (GB)"), min_value=1, max_value=MAX_RAM_GB, initial=32)
    max_hourly_price = forms.DecimalField(
        label=_("Maximum price per hour"),
        required=False,
        min_value=0,
        decimal_places=2,
        help_text=_("Empty: any price. It is never placed where it would cost more."),
    )
    deadline = forms.DateTimeField(
        label=_("Deadline"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text=_("Empty: no deadline. Still queued at the deadline, it fails without running."),
    )
    allowed_regions = IdsField(
        label=_("Allowed regions"),
        queryset=Region.objects.none(),
        to_field_name="code",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None ticked: any region of the park."),
    )
    preference = forms.ChoiceField(
        label=_("Preference"), choices=TaskPreference.choices, initial=TaskPreference.BALANCED
    )
    priority = forms.IntegerField(
        label=_("Priority"),
        min_value=MIN_PRIORITY,
        max_value=MAX_PRIORITY,
        initial=0,
        help_text=_("0 is normal; below 0 lets other tasks go first."),
    )
    preemptible = forms.BooleanField(label=_("Preemptible"), required=False)

    def __init__(self, *args, park, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["preemptible"].help_text = _(
            "%(discount)d %% cheaper; the park may stop it to make room for a task that is not "
            "preemptible and queue it again (billed up to the stop)."
        ) % {"discount": selectors.preemptible_discount_pct(park)}
        self.fields["image"].queryset = Image.objects.filter(
            park=park, is_active=True, organization=None
        ).order_by("software_stack", "name")
        self.fields["accelerator_model"].queryset = (
            AcceleratorModel.objects.filter(pools__backend__park=park).distinct().order_by("name")
        )
        self.fields["allowed_regions"].queryset = Region.objects.filter(park=park)

    def task_data(self) -> dict:
        data = dict(self.cleaned_data)
        data["accelerator_milli"] = int(data.pop("accelerators") * 1000)
        data["node_count"] = data["node_count"] or 1
        price = data.pop("max_hourly_price")
        data["max_hourly_minor"] = int(price * 100) if price is not None else None
        data["allowed_regions"] = list(data["allowed_regions"])
        return data


class SchedulingPolicyForm(forms.Form):
    region = forms.DecimalField(label=_("Region and latency"), min_value=0, max_value=100)
    performance = forms.DecimalField(label=_("Performance"), min_value=0, max_value=100)
    energy = forms.DecimalField(label=_("Energy and carbon"), min_value=0, max_value=100)
    price = forms.DecimalField(label=_("Price"), min_value=0, max_value=100)
    fragmentation = forms.DecimalField(label=_("Fragmentation"), min_value=0, max_value=100)
    operator_share = forms.DecimalField(
        label=_("Park's share of the say"),
        min_value=0,
        max_value=1,
        decimal_places=2,
        help_text=_(
            "0: the tenant's preference (fast, cheap, green) alone; 1: these weights alone."
        ),
    )
    preemptible_discount_pct = forms.IntegerField(
        label=_("Preemptible discount (%)"),
        min_value=0,
        max_value=90,
        required=False,
        help_text=_("How much less a task pays per hour when it lets the park preempt it."),
    )

    @classmethod
    def initial_for(cls, policy: SchedulingPolicy) -> dict:
        return {
            **{part: getattr(policy, name) for part, name in policy.WEIGHT_FIELDS.items()},
            "operator_share": policy.operator_share,
            "preemptible_discount_pct": policy.preemptible_discount_pct,
        }

    def weights(self) -> dict:
        return {part: float(self.cleaned_data[part]) for part in SchedulingPolicy.WEIGHT_FIELDS}


class FairShareForm(forms.Form):
    # A park's every organization (1,000 at issue 15's scale): options written out in Python.
    organization = forms.ModelChoiceField(label=_("Organization"), queryset=None, widget=LongSelect)
    shares = forms.IntegerField(
        label=_("Shares"),
        min_value=1,
        max_value=MAX_FAIR_SHARE,
        help_text=_(
            "Its share of the park's accelerators when they are contended (1 unless set): the "
            "queue serves organizations by recent usage over shares, and a Slurm cluster gets "
            "it as the account's fairshare."
        ),
    )

    def __init__(self, *args, park, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["organization"].queryset = Organization.objects.filter(park=park).order_by(
            "name"
        )
