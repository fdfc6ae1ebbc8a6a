"""How the console renders option lists (templates/partials/_form.html: a fieldset with a legend,
one inline check box per option) and moments (the `when` and `day` filters: one format, in the
reader's time zone)."""

import re
from datetime import UTC, date, datetime

import pytest
from django import forms
from django.template import Context, Template
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from apps.core.templatetags.when import day, when
from apps.orchestration.forms import TaskForm
from tests.factories import RegionFactory

SHANGHAI = "Asia/Shanghai"


def render_form(form) -> str:
    with translation.override("en"):
        return render_to_string("partials/_form.html", {"form": form})


def fieldset(html: str, field_id: str) -> str:
    found = re.search(rf'<fieldset id="{field_id}">(.*?)</fieldset>', html, re.S)
    assert found, html
    return found.group(1)


def inputs(markup: str) -> list[str]:
    return re.findall(r"<input[^>]*>", markup)


# --- Check box lists --------------------------------------------------------------------------


@pytest.fixture
def regions(park):
    return [RegionFactory(park=park, name=name) for name in ("East", "West", "North")]


@pytest.mark.django_db
def test_the_allowed_regions_are_a_fieldset_with_a_legend_and_one_inline_box_each(park, regions):
    html = render_form(TaskForm(park=park))

    body = fieldset(html, "id_allowed_regions")
    assert re.search(r'<legend class="form-label[^"]*">Allowed regions</legend>', body)
    assert body.count('<div class="form-check form-check-inline">') == len(regions)
    boxes = inputs(body)
    assert len(boxes) == len(regions)
    for box in boxes:
        assert 'type="checkbox"' in box and 'name="allowed_regions"' in box
        assert 'class="form-check-input"' in box
    assert {re.search(r'value="([^"]+)"', box).group(1) for box in boxes} == {
        region.code for region in regions
    }


@pytest.mark.django_db
def test_each_region_is_the_label_of_its_own_box(park, regions):
    body = fieldset(render_form(TaskForm(park=park)), "id_allowed_regions")

    for box in inputs(body):
        id_ = re.search(r'id="([^"]+)"', box).group(1)
        code = re.search(r'value="([^"]+)"', box).group(1)
        name = next(region.name for region in regions if region.code == code)
        assert f'<label class="form-check-label" for="{id_}">{name}</label>' in body
    ids = [re.search(r'id="([^"]+)"', box).group(1) for box in inputs(body)]
    assert len(set(ids)) == len(ids)  # no two boxes answer to one label


@pytest.mark.django_db
def test_the_list_is_not_a_select_nor_a_text_field(park, regions):
    html = render_form(TaskForm(park=park))

    assert '<select name="allowed_regions"' not in html
    assert not re.search(r'<input[^>]*name="allowed_regions"[^>]*form-control', html)
    assert "None ticked: any region of the park." in html  # the help text stays below


@pytest.mark.django_db
def test_ticked_regions_stay_ticked_when_the_form_comes_back(park, regions):
    east, west, north = regions
    form = TaskForm({"allowed_regions": [east.code, north.code]}, park=park)
    form.is_valid()

    boxes = inputs(fieldset(render_form(form), "id_allowed_regions"))

    ticked = {re.search(r'value="([^"]+)"', box).group(1) for box in boxes if " checked" in box}
    assert ticked == {east.code, north.code}


@pytest.mark.django_db
def test_a_refused_choice_marks_every_box_and_says_why(park, regions):
    form = TaskForm({"allowed_regions": ["atlantis"]}, park=park)
    form.is_valid()

    html = render_form(form)

    boxes = inputs(fieldset(html, "id_allowed_regions"))
    assert all('class="form-check-input is-invalid"' in box for box in boxes)
    assert re.search(r'<div class="invalid-feedback d-block">Select a valid choice.', html)


@pytest.mark.django_db
def test_the_task_page_renders_the_list_as_a_fieldset(client, park, regions, member):
    client.force_login(member)

    response = client.get(reverse("tasks:task_create"))

    assert response.status_code == 200
    body = fieldset(response.content.decode(), "id_allowed_regions")
    assert body.count("form-check-inline") == len(regions)


class Choices(forms.Form):
    size = forms.ChoiceField(
        label="Size", choices=[("s", "Small"), ("l", "Large")], widget=forms.RadioSelect
    )
    agree = forms.BooleanField(label="I agree", required=False)


def test_radio_buttons_are_an_option_list_too():
    body = fieldset(render_form(Choices()), "id_size")

    assert '<legend class="form-label fs-6 mb-1">Size</legend>' in body
    assert body.count('<div class="form-check form-check-inline">') == 2
    assert all('type="radio"' in box for box in inputs(body))


def test_a_single_check_box_keeps_its_label_beside_it():
    html = render_form(Choices())

    assert '<fieldset id="id_agree">' not in html
    assert re.search(
        r'<div class="form-check"><input type="checkbox"[^>]*id="id_agree"[^>]*> '
        r'<label class="form-check-label" for="id_agree">I agree</label></div>',
        html,
    )


# --- Moments ----------------------------------------------------------------------------------

MOMENT = datetime(2026, 12, 3, 6, 5, tzinfo=UTC)  # 14:05 in Shanghai
LATE_EVENING_UTC = datetime(2026, 12, 2, 17, 0, tzinfo=UTC)  # already the 3rd in Shanghai


def rendered(source: str, value, zone: str) -> str:
    with timezone.override(zone):
        return Template("{% load when %}" + source).render(Context({"value": value}))


def test_a_moment_reads_in_the_readers_time_zone():
    assert rendered("{{ value|when }}", MOMENT, SHANGHAI) == "2026-12-03 14:05"
    assert rendered("{{ value|when }}", MOMENT, "UTC") == "2026-12-03 06:05"


def test_a_day_is_the_readers_day():
    assert rendered("{{ value|day }}", MOMENT, SHANGHAI) == "2026-12-03"
    assert rendered("{{ value|day }}", LATE_EVENING_UTC, SHANGHAI) == "2026-12-03"
    assert rendered("{{ value|day }}", LATE_EVENING_UTC, "UTC") == "2026-12-02"


def test_a_plain_date_is_shown_as_it_is():
    assert rendered("{{ value|day }}", date(2026, 12, 3), SHANGHAI) == "2026-12-03"
    assert day(date(2026, 12, 3)) == "2026-12-03"


def test_no_moment_is_nothing():
    assert when(None) == "" and day(None) == ""
    assert rendered("[{{ value|when }}][{{ value|day }}]", None, SHANGHAI) == "[][]"


def test_the_filters_format_a_local_time_given_directly():
    with timezone.override(SHANGHAI):
        local = timezone.localtime(MOMENT)
        assert (when(local), day(local)) == ("2026-12-03 14:05", "2026-12-03")
