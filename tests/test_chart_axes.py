"""The charts' time axes read as dates, not as bare days of the month (issue 35): the labeller
of static/js/chart-axes.js, run in Node (skipped where Node is not installed)."""

import json
import shutil
import subprocess

import pytest
from django.conf import settings

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js to run the chart script")

DAY_MS = 24 * 3600 * 1000


def labels(language: str, calls: list[tuple[str, list]]) -> list[str]:
    script = settings.BASE_DIR / "static" / "js" / "chart-axes.js"
    program = (
        f"process.env.TZ = 'Asia/Shanghai';"
        f"const axes = require({json.dumps(str(script))})({json.dumps(language)});"
        f"const calls = {json.dumps(calls)};"
        "console.log(JSON.stringify(calls.map(([name, args]) => axes[name](...args))));"
    )
    result = subprocess.run(
        [NODE, "-e", program],
        capture_output=True,
        text=True,
        check=True,
        env={"TZ": "Asia/Shanghai"},
    )
    return json.loads(result.stdout)


def test_a_span_of_days_is_labelled_by_dates():
    midnight_4_dec = "2026-12-04T00:00:00+08:00"
    noon_5_dec = "2026-12-05T12:00:00+08:00"
    calls = [("time", [midnight_4_dec, 7 * DAY_MS]), ("time", [noon_5_dec, 7 * DAY_MS])]
    assert labels("zh-hans", calls) == ["12月4日", "12月5日"]
    assert labels("en", calls) == ["12-04", "12-05"]


def test_a_span_within_a_day_is_labelled_by_times_and_midnight_by_its_date():
    calls = [
        ("time", ["2026-12-04T14:30:00+08:00", 6 * 3600 * 1000]),
        ("time", ["2026-12-05T00:00:00+08:00", DAY_MS]),
    ]
    assert labels("zh-hans", calls) == ["14:30", "12月5日"]


def test_daily_and_monthly_categories_are_dates():
    calls = [("isoDate", ["2026-12-04"]), ("isoDate", ["2026-12"])]
    assert labels("zh-hans", calls) == ["12月4日", "2026年12月"]
    assert labels("en", calls) == ["12-04", "2026-12"]
