"""Id ranges of hosts: a tree written by an older agent (ids from 0) moved into a host's range."""

import os
import stat

import pytest
from loam_agent.hosts.idmap import shift_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")

BASE = 0x70010000


def test_an_older_hosts_files_move_into_its_range_keeping_their_modes(tmp_path):
    upper = tmp_path / "upper"
    (upper / "usr/bin").mkdir(parents=True)
    tool = upper / "usr/bin/sudo"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 0, 0)
    tool.chmod(0o4755)
    home = upper / "home/ada"
    home.mkdir(parents=True)
    os.chown(home, 1000, 1000)
    (upper / "link").symlink_to("/etc/passwd")
    already = upper / "already"
    already.write_text("")
    os.chown(already, BASE + 5, BASE + 5)

    shift_tree(upper, BASE)

    assert (upper.stat().st_uid, tool.stat().st_uid) == (BASE, BASE)
    assert stat.S_IMODE(tool.stat().st_mode) == 0o4755  # chown alone would drop setuid
    assert (home.stat().st_uid, home.stat().st_gid) == (BASE + 1000, BASE + 1000)
    assert os.lstat(upper / "link").st_uid == BASE
    assert os.stat("/etc/passwd").st_uid == 0  # the link was not followed
    assert already.stat().st_uid == BASE + 5  # in a range already: left as it is
