"""The gunicorn hooks of portal/metrics_workers.py, under a real gunicorn that recycles its
workers: request counts survive each replacement, in as many files as there are workers."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from portal.metrics_workers import pre_fork

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "workers-test-token"


def test_a_new_worker_takes_the_lowest_slot_no_live_worker_holds():
    live = {101: SimpleNamespace(metrics_slot=0), 103: SimpleNamespace(metrics_slot=2)}
    server = SimpleNamespace(WORKERS=live)
    worker = SimpleNamespace()
    pre_fork(server, worker)
    assert worker.metrics_slot == 1
    live[102] = worker
    pre_fork(server, newest := SimpleNamespace())
    assert newest.metrics_slot == 3


@pytest.fixture
def gunicorn(tmp_path):
    """gunicorn with 2 workers, each replaced after 3 requests, on a unix socket."""
    socket = tmp_path / "web.sock"
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    (metrics_dir / "counter_4242.db").write_bytes(b"a former run's file")
    config = tmp_path / "gunicorn.conf.py"
    config.write_text(
        "from portal.metrics_workers import on_starting, post_fork, pre_fork  # noqa: F401\n"
        f"bind = ['unix:{socket}']\n"
        "workers = 2\n"
        "max_requests = 3\n"
        "wsgi_app = 'portal.wsgi:application'\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "METRICS_TOKEN": TOKEN,
    }
    log = (tmp_path / "gunicorn.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(config)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://localhost", timeout=30
    )
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
        yield SimpleNamespace(client=client, metrics_dir=metrics_dir)
    finally:
        client.close()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def test_request_counts_survive_recycled_workers_in_one_file_per_worker(gunicorn):
    for _ in range(13):
        assert gunicorn.client.get("/healthz").status_code in (200, 503)
    response = gunicorn.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    assert response.status_code == 200
    counted = sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "loam_http_requests_total" and sample.labels["view"] == "healthz"
    )
    assert counted == 13  # 13 requests, at least 4 workers replaced on the way
    files = sorted(path.name for path in gunicorn.metrics_dir.iterdir())
    assert files, "no metrics were written"
    assert all(re.fullmatch(r"(counter|histogram)_slot[01]\.db", name) for name in files), files
