"""The numbers of the agent's host reports (`sequence`, docs/agent-protocol.md): they only grow,
across agent restarts, a clock set back and a lost state folder, and a retry keeps its number
(tests/agent/test_client.py)."""

import logging
import threading

from loam_agent.client import HOSTS_REPORT_PATH, PortalClient
from loam_agent.credential import Credential
from loam_agent.hosts.poller import HostsPoller
from loam_agent.hosts.sequence import REPORT_SEQUENCE_FILE, ReportSequence

from tests.agent.test_reconcile import FakeRuntime, wait_for

SECOND = 1_000_000  # the clock's part of a number is in microseconds


def frozen_at(seconds: float):
    return lambda: seconds


def test_numbers_go_on_from_the_kept_one_after_a_restart_with_the_clock_set_back(tmp_path):
    path = tmp_path / REPORT_SEQUENCE_FILE
    before = ReportSequence(path, clock=frozen_at(1000))
    assert [before.next() - 1000 * SECOND for _ in range(3)] == [0, 1, 2]

    restarted = ReportSequence(path, clock=frozen_at(900))

    assert restarted.next() == 1000 * SECOND + 3


def test_a_lost_state_folder_numbers_from_the_clock_above_the_old_numbers(tmp_path):
    path = tmp_path / REPORT_SEQUENCE_FILE
    before = ReportSequence(path, clock=frozen_at(1000))
    last = [before.next() for _ in range(1000)][-1]  # a thousand reports within a second
    path.unlink()  # reinstalled, the credential kept

    assert ReportSequence(path, clock=frozen_at(1001)).next() > last


def test_numbers_still_grow_where_they_cannot_be_kept(tmp_path, caplog):
    (tmp_path / "state").write_text("a file where the state folder should be")
    sequence = ReportSequence(tmp_path / "state" / REPORT_SEQUENCE_FILE, clock=frozen_at(1000))

    with caplog.at_level(logging.ERROR, logger="loam_agent.hosts.sequence"):
        numbers = [sequence.next() for _ in range(3)]

    assert [number - 1000 * SECOND for number in numbers] == [0, 1, 2]
    assert caplog.text.count("report number not kept") == 1  # said once, not every report


def run_agent(portal, runtime: FakeRuntime, sequence: ReportSequence, reports_wanted: int) -> None:
    """The hosts thread of `loam-agent run` until the portal has `reports_wanted` reports."""
    stop = threading.Event()
    credential = Credential(portal_url=portal.url, server_id="srv-1", secret="s3cret")
    with PortalClient(portal.url, credential=credential, backoff_s=0.01, stop=stop) as client:
        poller = HostsPoller(
            client,
            runtime,
            poll_interval_s=0.02,
            full_report_s=0.05,
            sequence=sequence,
            stop=stop,
        )
        thread = threading.Thread(target=poller.run)
        thread.start()
        try:
            wait_for(lambda: len(portal.requests(HOSTS_REPORT_PATH)) >= reports_wanted)
        finally:
            stop.set()
            thread.join(5)
            assert poller.reconciler.wait_idle(5)


def test_the_reports_sent_are_numbered_in_order_across_an_agent_restart(portal, tmp_path):
    """A clock that stands still: only the kept number orders the second run's reports after
    the first run's."""
    portal.hosts = [{"id": "h-1", "generation": 1, "state": "stopped"}]
    runtime = FakeRuntime()
    path = tmp_path / "state" / REPORT_SEQUENCE_FILE

    run_agent(portal, runtime, ReportSequence(path, clock=frozen_at(1000)), reports_wanted=4)
    first = portal.requests(HOSTS_REPORT_PATH)
    run_agent(portal, runtime, ReportSequence(path, clock=frozen_at(1000)), reports_wanted=8)
    second = portal.requests(HOSTS_REPORT_PATH)[len(first) :]

    # Every report that says h-1 is creating was numbered before every one that says stopped.
    numbered = {"creating": [], "stopped": []}
    for request in first:
        for host in request.body["hosts"]:
            numbered[host["state"]].append(request.body["sequence"])
    assert numbered["creating"] and numbered["stopped"]
    assert max(numbered["creating"]) < min(numbered["stopped"])
    numbers = [request.body["sequence"] for request in first + second]
    assert len(set(numbers)) == len(numbers)
    assert min(request.body["sequence"] for request in second) > max(numbered["stopped"])
