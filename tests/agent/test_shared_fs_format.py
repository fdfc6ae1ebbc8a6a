"""loam_agent.hosts.shared_fs: a new file system is formatted by the first server that mounts
it; another server's format at the same moment failing this one's is no error."""

import subprocess

import pytest
from loam_agent.hosts.model import HostError, SharedFs
from loam_agent.hosts.shared_fs import SharedFileSystems

SHARED = SharedFs("loam-o1-r1", "postgres://x@db/loam_o1_r1", "postgres", "postgres://x", 1)


def juicefs_answering(formatted_by_another: bool):
    """A fake `juicefs`: unformatted at first; its format fails, as when another server's
    format of the same file system went first (or not, with `formatted_by_another` False)."""
    calls = []

    def run(*arguments, check=True):
        calls.append(arguments[0])
        if arguments[0] == "status":
            done = calls.count("format") > 0 and formatted_by_another
            return subprocess.CompletedProcess(arguments, 0 if done else 1)
        if arguments[0] == "format":
            raise HostError("juicefs format failed: duplicate key value")
        return subprocess.CompletedProcess(arguments, 0)

    return run, calls


def test_a_format_that_lost_to_another_servers_mounts_it(tmp_path, monkeypatch):
    run, calls = juicefs_answering(formatted_by_another=True)
    monkeypatch.setattr(SharedFileSystems, "_juicefs", staticmethod(run))

    SharedFileSystems(tmp_path).mount(SHARED)

    assert calls == ["status", "format", "status", "config", "quota", "mount"]


def test_a_format_that_failed_alone_is_an_error(tmp_path, monkeypatch):
    run, calls = juicefs_answering(formatted_by_another=False)
    monkeypatch.setattr(SharedFileSystems, "_juicefs", staticmethod(run))

    with pytest.raises(HostError, match="format failed"):
        SharedFileSystems(tmp_path).mount(SHARED)

    assert "mount" not in calls
