"""统一社会信用代码 validation (GB 32100-2015): each kind of mistake gets its own error code and
a message that says what is wrong."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from apps.tenants.credit_code import (
    ALPHABET,
    check_character,
    normalize,
    validate_credit_code,
)
from tests.factories import credit_code

VALID = "91310115MA1K4ABC05"


def refusal(value):
    with translation.override("en"), pytest.raises(ValidationError) as excinfo:
        validate_credit_code(value)
    error = excinfo.value
    return error.code, error.messages[0]


@pytest.mark.parametrize(
    "value",
    [
        "91350100M000100Y43",
        VALID,
        "91310115ma1k4abc05",  # lowercase is normalized
        f"  {VALID}\n",  # surrounding whitespace too
        credit_code(0),
        credit_code(1234567),
    ],
)
def test_valid_codes_pass(value):
    assert validate_credit_code(value) is None


def test_normalize_uppercases_and_strips():
    assert normalize(" 91310115ma1k4abc05 ") == VALID


def test_check_character_of_known_codes():
    assert check_character("91350100M000100Y4") == "3"
    assert check_character("91310115MA1K4ABC0") == "5"


def test_check_character_is_always_in_the_alphabet():
    for n in range(200):
        assert credit_code(n)[-1] in ALPHABET


@pytest.mark.parametrize(("value", "actual"), [(VALID[:17], 17), (VALID + "1", 19), ("", 0)])
def test_wrong_length(value, actual):
    code, message = refusal(value)
    assert code == "length"
    assert "18 characters" in message
    assert f"has {actual}" in message


def test_space_inside_changes_the_length():
    code, message = refusal(VALID[:8] + " " + VALID[8:])
    assert code == "length"
    assert "has 19" in message


@pytest.mark.parametrize(
    ("position", "char"),
    [
        (9, "I"),
        (10, "O"),
        (11, "S"),
        (12, "V"),
        (13, "Z"),
        (14, "i"),  # normalized to "I", still forbidden
        (15, "z"),
        (16, "京"),
        (12, " "),
        (18, "-"),
    ],
)
def test_forbidden_character(position, char):
    value = VALID[: position - 1] + char + VALID[position:]
    assert len(value) == 18
    code, message = refusal(value)
    assert code == "character"
    assert f"Character {position} (“{char.upper()}”)" in message
    assert "I, O, S, V and Z" in message


def test_first_forbidden_character_is_reported():
    code, message = refusal("9131011SMA1K4ABC0O")
    assert code == "character"
    assert "Character 8 (“S”)" in message


@pytest.mark.parametrize("position", range(3, 9))
def test_letter_in_division_code(position):
    value = VALID[: position - 1] + "A" + VALID[position:]
    code, message = refusal(value)
    assert code == "division"
    assert "Characters 3 to 8" in message
    assert "administrative division" in message


@pytest.mark.parametrize("wrong", sorted(set(ALPHABET) - {VALID[-1]})[:5])
def test_wrong_check_character(wrong):
    code, message = refusal(VALID[:17] + wrong)
    assert code == "checksum"
    assert f"is “{wrong}” but should be “5”" in message


def test_single_typo_is_caught_by_the_checksum():
    typo = VALID[:12] + "B" + VALID[13:]  # 4 -> B in the organization code
    code, message = refusal(typo)
    assert code == "checksum"
    assert "typing error" in message
