"""gunicorn server hooks for the request metrics (portal/metrics.py) in multiprocess mode.

prometheus_client names each process's files in PROMETHEUS_MULTIPROC_DIR after its pid, and a
scrape reads every file there. gunicorn replaces a worker every `max_requests` requests, so each
replacement would leave two more files to read for good. Measured here with 40 views' series per
file, a scrape takes 0.27 s over 10 workers' files, 3.4 s over 200 and 37 s over 2,000: soon
past Prometheus's 10 s timeout. Instead, each worker takes a slot, the lowest number no live
worker holds, and writes its slot's files, carrying on the counts of the worker it replaces; the
files stay as many as the workers (twice as many for the moment of a reload).

Django-free on purpose: the gunicorn master imports it before any worker loads the portal.
deploy/gunicorn.conf.py takes the hooks by name:

    from portal.metrics_workers import on_starting, post_fork, pre_fork  # noqa: F401
"""

import itertools
import os
import shutil

from prometheus_client import values


def on_starting(server) -> None:
    """The master, once: the directory starts empty, so no count of a former run is added."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)


def pre_fork(server, worker) -> None:
    """The master, before forking `worker`: give it the lowest slot no live worker holds."""
    held = {getattr(live, "metrics_slot", None) for live in server.WORKERS.values()}
    worker.metrics_slot = next(slot for slot in itertools.count() if slot not in held)


def post_fork(server, worker) -> None:
    """The new worker, before it loads the portal: its metrics go to its slot's files."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # single-process mode: counts stay in memory, no file is written
    slot = f"slot{worker.metrics_slot}"  # no "_": prometheus_client splits file names on it
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: slot)
