from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import AcceleratorModel
from apps.quotas.models import QuotaResource


class QuotaChangeForm(forms.Form):
    limit_id = forms.IntegerField(widget=forms.HiddenInput)
    value = forms.IntegerField(label=_("Limit"), min_value=0, max_value=10**12)


class QuotaAddForm(forms.Form):
    resource = forms.ChoiceField(label=_("Resource"), choices=QuotaResource.choices)
    accelerator_model = forms.ModelChoiceField(
        label=_("Accelerator model"),
        queryset=AcceleratorModel.objects.order_by("vendor", "name"),
        required=False,
        help_text=_("Only for a limit on one accelerator model."),
    )
    value = forms.IntegerField(label=_("Limit"), min_value=0, max_value=10**12)
