"""What `loam-agent run` logs from the hosts poll, set up as `main()` sets it up: a poll every
second that changes nothing says nothing at INFO; a change, a failure and a recovery do."""

import contextlib
import logging
import threading

import pytest
from loam_agent.cli import configure_logging
from loam_agent.client import HOSTS_PATH, HOSTS_REPORT_PATH, PortalClient
from loam_agent.credential import Credential
from loam_agent.hosts.poller import HostsPoller
from loam_agent.hosts.sequence import REPORT_SEQUENCE_FILE, ReportSequence

from tests.agent.test_reconcile import FakeRuntime, wait_for


@pytest.fixture
def agent_logging(caplog):
    """Every record reaches caplog, as far as the agent's own logging setup lets it."""
    httpx_logger = logging.getLogger("httpx")
    level_before = httpx_logger.level
    # The agent's process has no Django settings quieting httpx, as this test process has.
    httpx_logger.setLevel(logging.NOTSET)
    caplog.set_level(logging.DEBUG)
    configure_logging(verbose=False)
    yield caplog
    httpx_logger.setLevel(level_before)


@contextlib.contextmanager
def polling(portal, tmp_path):
    """The hosts thread of `loam-agent run`, polling fast, with one attempt per request."""
    stop = threading.Event()
    credential = Credential(portal_url=portal.url, server_id="srv-1", secret="s3cret")
    with PortalClient(portal.url, credential=credential, attempts=1, stop=stop) as client:
        poller = HostsPoller(
            client,
            FakeRuntime(),
            poll_interval_s=0.02,
            full_report_s=0.05,
            sequence=ReportSequence(tmp_path / REPORT_SEQUENCE_FILE),
            stop=stop,
        )
        thread = threading.Thread(target=poller.run)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)
            assert poller.reconciler.wait_idle(5)


def logged(caplog, level: int) -> list[str]:
    return [record.getMessage().strip() for record in caplog.records if record.levelno == level]


def test_quiet_polls_log_nothing_at_info_and_changes_do(portal, agent_logging, tmp_path):
    portal.hosts = []
    with polling(portal, tmp_path):
        wait_for(
            lambda: (
                len(portal.requests(HOSTS_PATH)) >= 5
                and len(portal.requests(HOSTS_REPORT_PATH)) >= 2
            )
        )
        assert [r for r in agent_logging.records if r.levelno >= logging.INFO] == []

        portal.hosts = [
            {"id": "h-1", "generation": 1, "state": "stopped"},
            {"id": "h-2", "generation": 1, "state": "stopped", "image": "not-built"},
        ]
        wait_for(lambda: "host h-1: stopped" in logged(agent_logging, logging.INFO))
        wait_for(lambda: logged(agent_logging, logging.WARNING))

    assert sorted(logged(agent_logging, logging.INFO)) == [
        "host h-1: creating",
        "host h-1: stopped",
        "host h-2: creating",
    ]
    assert logged(agent_logging, logging.WARNING) == [
        "host h-2: failed image 'not-built' isn't built on this server"
    ]


def test_a_failed_poll_warns_and_the_next_good_one_says_it_recovered(
    portal, agent_logging, tmp_path
):
    portal.hosts = []
    portal.answer(HOSTS_PATH, (503, {"detail": "portal restarting"}))
    with polling(portal, tmp_path):
        wait_for(lambda: "hosts poll works again" in logged(agent_logging, logging.INFO))

    [warning] = logged(agent_logging, logging.WARNING)
    assert warning.startswith("hosts poll failed:") and "portal restarting" in warning
    assert logged(agent_logging, logging.INFO) == ["hosts poll works again"]
