"""The operator's form of a server's proposed catalog (`catalog_views.server_catalog`): the
family, one row per flavor to create or price and one per image, each with an "include" box,
prefilled from `proposals.propose`. Rows of flavors that already exist keep their shape: only
their price is asked for."""

from decimal import Decimal

from django import forms
from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _

from apps.agents import proposals
from apps.core.money import MINOR_PER_MAJOR

MAX_HOURLY_PRICE = Decimal(10_000_000)
FLAVOR_CODE = RegexValidator(
    r"^[a-z0-9][a-z0-9.-]*$", _("Lowercase letters, digits, dots, hyphens.")
)


class FamilyForm(forms.Form):
    family_code = forms.SlugField(label=_("Family code"), max_length=40)
    family_name = forms.CharField(label=_("Family name"), max_length=120)

    def __init__(self, *args, exists: bool, **kwargs):
        super().__init__(*args, **kwargs)
        if exists:  # the flavors join a family of the park: its code and name stay
            for name in self.fields:
                self.fields[name].disabled = True


class FlavorRowForm(forms.Form):
    include = forms.BooleanField(label=_("Include"), required=False)
    code = forms.CharField(label=_("Code"), max_length=60, validators=[FLAVOR_CODE])
    accelerator_count = forms.IntegerField(label=_("Accelerators"), min_value=1, max_value=64)
    vcpu = forms.IntegerField(label=_("vCPU"), min_value=1, max_value=1024)
    ram_gb = forms.IntegerField(label=_("RAM (GB)"), min_value=1, max_value=16384)
    system_disk_gb = forms.IntegerField(
        label=_("System disk (GB)"),
        min_value=proposals.MIN_SYSTEM_DISK_GB,
        max_value=2048,
    )
    price = forms.DecimalField(
        label=_("Hourly price"),
        required=False,
        min_value=Decimal(0),
        max_value=MAX_HOURLY_PRICE,
        decimal_places=2,
    )

    def __init__(self, *args, existing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.existing = existing
        if existing:  # a flavor of the family: sold as it is, priced here
            for name in ("code", "accelerator_count", "vcpu", "ram_gb", "system_disk_gb"):
                self.fields[name].disabled = True

    def clean(self):
        data = super().clean()
        if data.get("include") and "price" not in self.errors:
            price = data.get("price")
            if price is None or price <= 0:
                self.add_error("price", _("Give an hourly price above zero."))
        return data

    def price_minor(self, currency: str) -> int | None:
        price = self.cleaned_data.get("price")
        return None if price is None else int(price * MINOR_PER_MAJOR[currency])


class ImageRowForm(forms.Form):
    include = forms.BooleanField(label=_("Include"), required=False)
    code = forms.SlugField(label=_("Code"), max_length=60)
    name = forms.CharField(label=_("Name"), max_length=120)

    def __init__(self, *args, existing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.existing = existing
        if existing:  # an image of the park, made to run on these cards too
            self.fields["code"].disabled = True
            self.fields["name"].disabled = True


class RowsFormSet(forms.BaseFormSet):
    """A fixed list of rows (what the proposal has to accept), each told whether it is an
    existing object's."""

    def __init__(self, *args, existing: list[bool], **kwargs):
        self.existing = existing
        super().__init__(*args, **kwargs)

    def get_form_kwargs(self, index):
        kwargs = super().get_form_kwargs(index)
        kwargs["existing"] = (
            index is not None and index < len(self.existing) and self.existing[index]
        )
        return kwargs

    def clean(self):
        if self.total_form_count() != len(self.existing):
            raise forms.ValidationError(
                _("The proposal changed meanwhile; look at it again."), code="stale"
            )


def _formset(form):
    return forms.formset_factory(
        form, formset=RowsFormSet, extra=0, max_num=64, absolute_max=64, validate_max=True
    )


FlavorFormSet = _formset(FlavorRowForm)
ImageFormSet = _formset(ImageRowForm)
