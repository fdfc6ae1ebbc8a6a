"""统一社会信用代码 (unified social credit code), GB 32100-2015.

18 characters from a 31-character alphabet (digits and capitals without I, O, S, V, Z):
registration authority (1), organization type (1), administrative division (6 digits),
organization code (9), and a check character computed from the other 17.
"""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

ALPHABET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
LENGTH = 18


def check_character(first17: str) -> str:
    pairs = zip(first17, WEIGHTS, strict=True)
    total = sum(ALPHABET.index(char) * weight for char, weight in pairs)
    return ALPHABET[(31 - total % 31) % 31]


def normalize(value: str) -> str:
    return value.strip().upper()


def validate_credit_code(value: str) -> None:
    """Raise a ValidationError that says exactly what is wrong with the code."""
    code = normalize(value)
    if len(code) != LENGTH:
        raise ValidationError(
            _("The code must be %(expected)d characters long; this one has %(actual)d.")
            % {"expected": LENGTH, "actual": len(code)},
            code="length",
        )
    for position, char in enumerate(code, start=1):
        if char not in ALPHABET:
            raise ValidationError(
                _(
                    "Character %(position)d (“%(char)s”) is not allowed: use digits and capital "
                    "letters other than I, O, S, V and Z."
                )
                % {"position": position, "char": char},
                code="character",
            )
    if not code[2:8].isdigit():
        raise ValidationError(
            _("Characters 3 to 8 are the administrative division code and must be digits."),
            code="division",
        )
    expected = check_character(code[:17])
    if code[17] != expected:
        raise ValidationError(
            _(
                "The check character is “%(actual)s” but should be “%(expected)s”: please check "
                "the code for a typing error."
            )
            % {"actual": code[17], "expected": expected},
            code="checksum",
        )
