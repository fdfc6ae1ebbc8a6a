"""Ids and counts read from text (a query value, a posted field), by one rule for the whole
site: ASCII digits only. `str.isdigit()` is no such test: "²" and "٣" are digits to it but not
to `int()`, and a 30-digit id overflows a bigint column inside the database driver. And
measures written for a reader (`figure`)."""

import re
from decimal import ROUND_HALF_UP, Decimal

from django import forms
from django.core.exceptions import ValidationError

# At most 18 digits: every such number fits a bigint (the largest holds 19).
_ASCII_NUMBER = re.compile(r"[0-9]{1,18}")


def parse_id(text) -> int | None:
    """The non-negative number `text` spells in ASCII digits, or None for anything else."""
    if isinstance(text, str) and _ASCII_NUMBER.fullmatch(text):
        return int(text)
    return None


INTEGER_FIELDS = {"AutoField", "BigAutoField", "IntegerField", "BigIntegerField"}


class IdsField(forms.ModelMultipleChoiceField):
    """A ModelMultipleChoiceField whose ids follow `parse_id`: a 30-digit id is refused as an
    unknown choice, where Django's field passes it to the database, whose driver overflows."""

    def _check_values(self, value):
        meta = self.queryset.model._meta
        key = meta.get_field(self.to_field_name) if self.to_field_name else meta.pk
        if key.get_internal_type() not in INTEGER_FIELDS:  # chosen by a code: nothing overflows
            return super()._check_values(value)
        for each in value:
            if parse_id(str(each)) is None:
                raise ValidationError(
                    self.error_messages["invalid_pk_value"],
                    code="invalid_pk_value",
                    params={"pk": each},
                )
        return super()._check_values(value)


def figure(value, places: int = 2) -> str:
    """A measure as a reader reads it: at most `places` decimals, no trailing zeros, thousands
    grouped as money is (`core.money.format_money`): 39.560 compute units reads "39.56",
    158.240 "158.24", 12000 "12,000"."""
    rounded = Decimal(str(value)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    decimals = max(0, -rounded.normalize().as_tuple().exponent)
    return f"{rounded:,.{decimals}f}"
