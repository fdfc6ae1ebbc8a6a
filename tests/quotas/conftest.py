"""Quota fixtures: the orders world, a frozen clock and metering (tests/billing/conftest.py),
for the monthly spend limit."""

from tests.billing.conftest import (  # noqa: F401  (fixtures used by the quota tests)
    _no_injected_failures,
    clock,
    english_messages,
    host_request,
    meter,
    operate,
    order_hosts,
    running_host,
    travel,
    world,
)
