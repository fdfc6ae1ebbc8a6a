"""How forms and moments render across the console (templates/partials/_form.html, the
`forms` and `when` template filters)."""

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from django.template.loader import render_to_string
from django.utils import timezone, translation

from apps.core.templatetags.when import day, duration, when
from apps.orchestration.forms import TaskForm
from tests.factories import RegionFactory

pytestmark = pytest.mark.django_db


def test_check_boxes_of_a_list_render_as_a_fieldset_one_inline_option_each(park):
    """The task form's allowed regions: a legend above and each region beside its box (it once
    rendered one character per line over the other fields)."""
    east = RegionFactory(park=park, name="East")
    west = RegionFactory(park=park, name="West")
    form = TaskForm(park=park)

    html = render_to_string("partials/_form.html", {"form": form})

    fieldset = re.search(r'<fieldset id="id_allowed_regions">(.*?)</fieldset>', html, re.S)
    assert fieldset, html
    body = fieldset.group(1)
    assert '<legend class="form-label fs-6 mb-1">' in body
    assert body.count('class="form-check form-check-inline"') == 2
    for region in (east, west):
        box = re.search(rf'<input type="checkbox"[^>]* value="{region.code}"[^>]*>', body)
        assert box and "form-check-input" in box.group(0), body
        assert f">{region.name}</label>" in body


def test_a_bound_form_with_errors_marks_each_option_invalid(park):
    RegionFactory(park=park)
    form = TaskForm({"allowed_regions": ["not-a-region"]}, park=park)
    form.is_valid()

    html = render_to_string("partials/_form.html", {"form": form})

    assert 'class="form-check-input is-invalid"' in html


def test_one_date_format_in_the_readers_time_zone(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    moment = datetime(2026, 12, 3, 6, 5, tzinfo=UTC)
    with timezone.override("Asia/Shanghai"):
        assert when(timezone.localtime(moment)) == "2026-12-03 14:05"
        assert day(timezone.localtime(moment)) == "2026-12-03"
    assert day(date(2026, 12, 3)) == "2026-12-03"
    assert when(None) == "" and day(None) == ""


@translation.override("en")
def test_one_way_to_say_how_long():
    assert duration(timedelta(seconds=40)) == "40 s"
    assert duration(timedelta(seconds=95)) == "1 min"
    assert duration(timedelta(hours=2, minutes=5)) == "2 h 5 min"
    assert duration(timedelta(days=3, hours=4, minutes=59)) == "3 d 4 h"
    assert duration(12) == "12 min"  # minutes, as the idle page counts
    assert duration(None) == "—"
