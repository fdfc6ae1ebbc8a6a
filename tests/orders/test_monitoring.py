"""Every host is watched (issue 35): a sample a minute per running host (apps/orders/monitoring.py),
charted over 1 h / 24 h / 7 d from one query that averages buckets in the database, pruned
after a week and a day; the simulator's hosts sampled from the same model as its nodes'
telemetry and the park's measured-utilization line; the page's monitoring section and its JSON
endpoint (ranges, a bad range a 400, another organization's host a 404)."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.orchestration.backends.base import BackendError, HostMetrics
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.capacity import sample_capacity
from apps.orchestration.models import Backend, Node
from apps.orchestration.services import probe_backend
from apps.orders import monitoring
from apps.orders.models import HostSample, InstanceState
from tests.factories import InstanceFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

NOW = datetime(2026, 12, 5, 10, 30, 20, tzinfo=UTC)
ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture(autouse=True)
def _at_now():
    """The portal's clock (and the simulator's) stands at NOW, so what is sampled and what is
    read fall in the same minute."""
    with time_machine.travel(NOW, tick=False):
        yield


def samples(instance, start: datetime, minutes: int, **figures) -> None:
    """A sample a minute from `start`; a figure may be a function of the minute's number."""
    HostSample.objects.bulk_create(
        HostSample(
            instance=instance,
            at=start + timedelta(minutes=n),
            **{name: value(n) if callable(value) else value for name, value in figures.items()},
        )
        for n in range(minutes)
    )


def sample_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "orders_hostsample" in q["sql"]]


# --- the series ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "points", "step"), [("1h", 60, 60), ("24h", 360, 240), ("7d", 360, 1680)]
)
def test_each_range_is_at_most_360_points_averaged_in_one_query(key, points, step):
    instance = InstanceFactory(running=True)
    chart = monitoring.chart_range(key)
    span = int(chart.span.total_seconds() // 60)
    # A sample a minute over the whole range, and the week before: 0 % and 100 % in turn.
    samples(instance, NOW - timedelta(minutes=span + 60), span + 61, cpu_pct=lambda n: n % 2 * 100)

    with CaptureQueriesContext(connection) as captured:
        series = monitoring.host_series(instance, chart=chart, now=NOW)

    assert len(sample_queries(captured)) == len(captured.captured_queries) == 1
    assert "GROUP BY" in captured.captured_queries[0]["sql"]
    assert chart.step_s == step and len(series["at"]) == points <= monitoring.MAX_POINTS
    # Buckets are whole steps since the epoch, the last one holding now.
    first = datetime.fromisoformat(series["at"][0])
    last = datetime.fromisoformat(series["at"][-1])
    assert first.timestamp() % step == 0 and last <= NOW < last + timedelta(seconds=step)
    assert NOW - first <= chart.span
    if step > 60:  # a bucket of several minutes is their mean
        assert {value for value in series["cpu_pct"][1:-1]} == {50.0}
    else:
        assert set(series["cpu_pct"]) == {0.0, 100.0}


def test_a_bucket_without_a_sample_is_a_gap():
    instance = InstanceFactory(running=True)
    samples(instance, NOW.replace(second=0) - timedelta(minutes=9), 10, gpu_utilization_pct=40.0)

    series = monitoring.host_series(instance, chart=monitoring.RANGES["1h"], now=NOW)

    assert series["gpu_utilization_pct"][:50] == [None] * 50
    assert series["gpu_utilization_pct"][50:] == [40.0] * 10
    assert series["samples"] == 10


def test_a_figure_not_reported_is_left_out_of_the_mean_and_capacities_are_the_largest():
    instance = InstanceFactory(running=True)
    start = NOW.replace(minute=24, second=0)  # a 4-minute bucket of the day's chart
    HostSample.objects.bulk_create(
        [
            HostSample(instance=instance, at=start, cpu_pct=None, memory_limit_mib=1024),
            HostSample(instance=instance, at=start + timedelta(minutes=1), cpu_pct=30.0),
            HostSample(instance=instance, at=start + timedelta(minutes=2), cpu_pct=50.0),
            HostSample(instance=instance, at=start + timedelta(minutes=3), memory_limit_mib=2048),
        ]
    )
    series = monitoring.host_series(instance, chart=monitoring.RANGES["24h"], now=NOW)
    bucket = series["at"].index(start.isoformat())
    assert series["cpu_pct"][bucket] == 40.0  # not 20: a null is not a zero
    assert series["memory_limit_mib"][bucket] == 2048


def test_another_hosts_samples_are_not_read():
    mine, theirs = InstanceFactory(running=True), InstanceFactory(running=True)
    samples(theirs, NOW - timedelta(minutes=30), 30, cpu_pct=90.0)
    series = monitoring.host_series(mine, chart=monitoring.RANGES["1h"], now=NOW)
    assert series["samples"] == 0 and set(series["cpu_pct"]) == {None}


def test_an_unknown_range_is_refused():
    assert monitoring.chart_range(None).key == monitoring.chart_range("").key == "1h"
    with pytest.raises(monitoring.UnknownRange) as refused:
        monitoring.chart_range("30d")
    assert "1h, 24h, 7d" in refused.value.message and refused.value.status == 400


# --- writing and pruning -------------------------------------------------------------------------


def test_one_sample_a_minute_at_the_minute():
    instance = InstanceFactory(running=True)
    figures = HostMetrics(handle="h", gpu_count=1, gpu_utilization_pct=130.0, cpu_pct=-3.0)
    monitoring.record_host_metrics([(instance.pk, figures)], at=NOW)
    monitoring.record_host_metrics([(instance.pk, figures)], at=NOW + timedelta(seconds=30))

    (sample,) = HostSample.objects.filter(instance=instance)
    assert sample.at == NOW.replace(second=0)
    # A reading out of range is brought within it, never stored as it came.
    assert sample.gpu_utilization_pct == 100.0 and sample.cpu_pct == 0.0


def test_samples_are_kept_a_week_and_a_day(settings):
    assert settings.LOAM_HOST_SAMPLES_KEPT_S >= 7 * 24 * 3600
    settings.LOAM_HOST_SAMPLES_KEPT_S = 8 * 24 * 3600
    instance = InstanceFactory(running=True)
    kept = NOW - timedelta(days=7, hours=23)
    HostSample.objects.bulk_create(
        [
            HostSample(instance=instance, at=NOW - timedelta(days=8, minutes=1)),
            HostSample(instance=instance, at=NOW - timedelta(days=9)),
            HostSample(instance=instance, at=kept),
        ]
    )
    assert monitoring.prune_samples(now=NOW) == 2
    assert list(HostSample.objects.values_list("at", flat=True)) == [kept]


# --- the simulator: sampled from the model its nodes' telemetry reads ----------------------------


def simulate(world, **config) -> None:
    Backend.objects.filter(pk=world.backend.pk).update(config=config)


def test_a_node_with_no_card_held_reads_idle_and_so_does_the_parks_line(world):
    simulate(world, idle_share=0.0)  # any card held would read busy
    probe_backend(backend=world.backend)
    (sample,) = sample_capacity()

    for node in Node.objects.filter(pool=world.pool):
        readings = [card["util"] for card in node.telemetry["accelerators"].values()]
        assert readings == [0.0] * 8, node  # 0 of 8 held: nothing runs there
    assert sample.accelerators_allocated == 0 and sample.utilization_pct is None


def test_a_hosts_figures_are_its_cards_readings_and_the_parks_line_agrees(world, running_host):
    simulate(world, idle_share=0.0, seed=4)
    instance = running_host(2)
    probe_backend(backend=world.backend)
    (capacity,) = sample_capacity()
    outcome = monitoring.sample_hosts()

    assert outcome["recorded"] == 1
    node = Node.objects.get(pk=instance.node_id)
    held = set(
        instance.workload.allocations.get(released_at__isnull=True).accelerators.values_list(
            "index", flat=True
        )
    )
    readings = {int(i): card["util"] for i, card in node.telemetry["accelerators"].items()}
    assert all(readings[i] >= 20 for i in held)
    assert all(readings[i] == 0.0 for i in set(readings) - held)
    mean = sum(readings[i] for i in held) / 2
    sample = HostSample.objects.get(instance=instance)
    assert sample.simulated and sample.gpu_count == 2 and sample.at == NOW.replace(second=0)
    assert abs(sample.gpu_utilization_pct - mean) <= 0.1
    assert abs(float(capacity.utilization_pct) - mean) <= 0.1
    assert sample.memory_limit_mib == instance.flavor.ram_gb * 1024
    assert sample.cpu_pct is not None and sample.net_rx_bytes_per_s is not None


def test_only_running_hosts_are_sampled_once_a_minute(world, running_host, operate):
    running = running_host(1, name="running")
    stopped = running_host(1, name="stopped")
    operate(stopped, "stop")
    assert monitoring.sample_hosts()["recorded"] == 1
    assert monitoring.sample_hosts()["recorded"] == 1  # asked again: the same minute
    with time_machine.travel(NOW + timedelta(minutes=1), tick=False):
        monitoring.sample_hosts()

    assert HostSample.objects.filter(instance=running).count() == 2
    assert not HostSample.objects.filter(instance=stopped).exists()


def test_sampling_prunes_old_samples(world, running_host, settings):
    settings.LOAM_HOST_SAMPLES_KEPT_S = 8 * 24 * 3600
    instance = running_host(1)
    HostSample.objects.create(instance=instance, at=NOW - timedelta(days=9))
    assert monitoring.sample_hosts() == {"recorded": 1, "pruned": 1}


def test_a_backend_that_cannot_answer_leaves_a_gap(world, running_host):
    running_host(1)
    SimulatorDriver.fail_next(BackendError("simulator: unreachable", transient=True))
    assert monitoring.sample_hosts()["recorded"] == 0
    assert not HostSample.objects.exists()


def test_the_past_is_sampled_from_when_each_host_took_its_cards(world, running_host):
    """sample_past (the demo's first charts): every 5 minutes, each host only since it took
    the cards it holds; a second call adds nothing."""
    with time_machine.travel(NOW - timedelta(hours=2), tick=False):
        older = running_host(1, name="older")
    newer = running_host(1, name="newer")

    written = monitoring.sample_past(
        since=NOW - timedelta(hours=3), every=timedelta(minutes=5), now=NOW
    )

    older_at = list(HostSample.objects.filter(instance=older).values_list("at", flat=True))
    # Its cards were taken at 08:30:20: from 08:35 to 10:30, every 5 minutes.
    assert len(older_at) == 24
    assert min(older_at) == NOW.replace(second=0) - timedelta(hours=2) + timedelta(minutes=5)
    assert not HostSample.objects.filter(instance=newer).exists()  # taken after 10:30:00
    assert written == 24
    monitoring.sample_past(since=NOW - timedelta(hours=3), every=timedelta(minutes=5), now=NOW)
    assert HostSample.objects.count() == 24


# --- the page and its endpoint -------------------------------------------------------------------


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


def monitoring_url(instance, **query) -> str:
    url = reverse("orders:instance_monitoring", args=[instance.pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_every_hosts_page_has_the_monitoring_section(browser, world, running_host):
    instance = running_host(1)
    response = browser.get(reverse("orders:instance_detail", args=[instance.pk]), **ENGLISH)
    html = response.content.decode()

    section = html.split('id="host-monitoring"')[1].split("</section>")[0]
    assert f'data-url="{monitoring_url(instance)}"' in section
    assert re.findall(r'data-range="(\w+)"', section) == ["1h", "1h", "24h", "7d"]
    for chart in ("gpu-utilization", "gpu-memory", "power", "cpu", "memory", "disk", "network"):
        assert f'id="host-chart-{chart}"' in section
    assert "Simulated figures" in section  # a demo park's host says so
    # The project's CSP: scripts from files only, ECharts once.
    scripts = re.findall(r"<script([^>]*)>", html)
    assert all("src=" in attributes for attributes in scripts)
    assert html.count("vendor/echarts/echarts.min.js") == 1 and "{#" not in html
    assert "js/host-monitoring.js" in html


@pytest.mark.parametrize(("key", "points"), [("1h", 60), ("24h", 360), ("7d", 360)])
def test_the_endpoint_answers_each_range(browser, world, running_host, key, points):
    instance = running_host(1)
    monitoring.sample_hosts()

    response = browser.get(monitoring_url(instance, range=key), **ENGLISH)

    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    data = response.json()
    assert data["range"] == key and data["state"] == "running" and data["simulated"]
    assert data["has_data"] and data["notice"] == ""
    assert len(data["series"]["at"]) == points
    assert set(data["series"]) >= {
        "gpu_utilization_pct",
        "gpu_memory_used_mib",
        "power_w",
        "cpu_pct",
        "memory_used_mib",
        "disk_used_mib",
        "net_rx_bytes_per_s",
        "net_tx_bytes_per_s",
    }
    assert data["series"]["gpu_count"][-1] == 1


def test_a_bad_range_is_a_400_that_names_the_ranges(browser, world, running_host):
    instance = running_host(1)
    response = browser.get(monitoring_url(instance, range="2h"), **ENGLISH)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_range" and body["ranges"] == ["1h", "24h", "7d"]
    assert "2h" in body["detail"] and "1h, 24h, 7d" in body["detail"]


def test_another_organizations_host_is_a_404(client, other_owner, world, running_host):
    instance = running_host(1)
    client.force_login(other_owner)
    assert client.get(monitoring_url(instance, range="1h")).status_code == 404
    assert client.get(monitoring_url(instance, range="nonsense")).status_code == 404


@pytest.mark.parametrize(
    ("state", "says"),
    [
        (InstanceState.PENDING, "not running yet"),
        (InstanceState.PROVISIONING, "not running yet"),
        (InstanceState.STOPPED, "stopped"),
        (InstanceState.ERROR, "in error"),
        (InstanceState.RELEASED, "released"),
        (InstanceState.RUNNING, "No figures in this range yet"),
    ],
)
def test_a_host_with_nothing_to_show_says_why(browser, organization, state, says):
    released_at = NOW if state == InstanceState.RELEASED else None
    instance = InstanceFactory(organization=organization, state=state, released_at=released_at)
    data = browser.get(monitoring_url(instance), **ENGLISH).json()
    assert not data["has_data"] and says in data["notice"]


def test_a_stopped_host_shows_when_it_last_ran_and_says_it_is_stopped(
    browser, world, running_host, operate
):
    instance = running_host(1)
    monitoring.sample_hosts()
    operate(instance, "stop")

    data = browser.get(monitoring_url(instance, range="24h"), **ENGLISH).json()

    assert data["state"] == "stopped" and data["has_data"]
    assert "stopped" in data["notice"]


def test_a_range_is_one_read_of_the_samples_whatever_its_length(browser, world, running_host):
    instance = running_host(1)
    samples(instance, NOW - timedelta(days=7), 7 * 24 * 60, cpu_pct=20.0)
    counts = {}
    for key in ("1h", "24h", "7d"):
        with CaptureQueriesContext(connection) as captured:
            assert browser.get(monitoring_url(instance, range=key)).status_code == 200
        assert len(sample_queries(captured)) == 1, key
        counts[key] = len(captured.captured_queries)
    assert counts["1h"] == counts["24h"] == counts["7d"]
