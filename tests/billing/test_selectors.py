from datetime import timedelta

import pytest

from apps.billing.selectors import metering_lag_seconds
from tests.factories import EPOCH, MeterFactory

pytestmark = pytest.mark.django_db

NOW = EPOCH + timedelta(days=1)


def test_metering_lag_is_nothing_when_no_meter_is_owed():
    MeterFactory(  # closed and measured to its end
        ended_at=NOW - timedelta(hours=3), metered_until=NOW - timedelta(hours=3)
    )
    assert metering_lag_seconds(now=NOW) == 0


def test_metering_lag_is_the_oldest_measured_moment_of_the_meters_still_owed():
    MeterFactory(metered_until=NOW - timedelta(seconds=30))  # open
    MeterFactory(metered_until=NOW - timedelta(seconds=75))  # open, the oldest owed
    MeterFactory(  # closed, measured to its end long ago: owed nothing
        ended_at=NOW - timedelta(hours=2), metered_until=NOW - timedelta(hours=2)
    )
    assert metering_lag_seconds(now=NOW) == 75


def test_a_closed_meter_not_measured_to_its_end_is_still_owed():
    MeterFactory(metered_until=NOW - timedelta(seconds=30))
    MeterFactory(ended_at=NOW - timedelta(seconds=100), metered_until=NOW - timedelta(seconds=400))
    assert metering_lag_seconds(now=NOW) == 400
