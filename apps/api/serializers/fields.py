"""Input fields bounded by what the database holds. Every integer column here is at most a
bigint, so an input integer without its own bounds takes the bigint's: a larger one is a 400
naming the field, never an overflow in the database driver (tests/api/test_bad_input.py checks
that every input serializer's integers are bounded)."""

from rest_framework import serializers

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class IntegerField(serializers.IntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", BIGINT_MIN)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(**kwargs)
