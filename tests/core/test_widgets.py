"""The widgets written out in Python write what Django's own templates write."""

import re
from decimal import Decimal

import pytest
from django import forms

from apps.core.widgets import LongSelect, RowCheckboxInput, RowHiddenInput, RowNumberInput

CHOICES = [("", "All"), (1, "Shanghai <east>"), (2, "Chengdu & west")]
ATTRS = {"class": "form-select", "form": "row-1", "id": "row1_x", "required": True, "x": False}


def html(widget, value):
    return re.sub(r">\s+<", "><", str(widget.render("x", value, attrs=dict(ATTRS))).strip())


NUMBER = {"attrs": {"step": "0.01", "min": 0}}


@pytest.mark.parametrize(
    ("ours", "djangos", "options", "value"),
    [
        (LongSelect, forms.Select, {"choices": CHOICES}, 2),
        (LongSelect, forms.Select, {"choices": CHOICES}, None),
        (RowNumberInput, forms.NumberInput, NUMBER, Decimal("0.65")),
        (RowNumberInput, forms.NumberInput, NUMBER, None),
        (RowHiddenInput, forms.HiddenInput, {}, 'a "quoted" <value>'),
        (RowCheckboxInput, forms.CheckboxInput, {}, True),
        (RowCheckboxInput, forms.CheckboxInput, {}, False),
    ],
)
def test_a_widget_written_in_python_is_djangos_html(ours, djangos, options, value):
    assert html(ours(**options), value) == html(djangos(**options), value)
