"""A throwaway OpenSSH server on 127.0.0.1 that trusts the portal's host CA for root, as an
agent host's sshd does once its spec's `ssh_user_ca_keys` are applied (docs/agent-protocol.md):
the web terminal's tests and bench/terminal_latency.py log in to it for real. Needs root and
Debian's openssh-server (deploy/test.sh installs it)."""

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def missing_for_sshd() -> str:
    """Why a throwaway sshd cannot run here ("" when it can; CI must have one, see
    `require_sshd`)."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "a throwaway sshd that logs in as root needs root"
    return ""


def require_sshd() -> None:
    """Skip the calling test where no throwaway sshd can run, but fail it in CI
    (LOAM_REQUIRE_SERVICES=1): CI must not pass by skipping the real thing."""
    import pytest

    if missing := missing_for_sshd():
        if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"CI must run the web terminal against a real sshd: {missing}")
        pytest.skip(missing)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Sshd:
    port: int
    host_key: str  # its public key, "type base64", as an agent reports a host's

    def access(self) -> dict:
        """An instance's `access` that reaches it, as the agent driver writes one."""
        return {
            "address": "127.0.0.1",
            "ssh_port": self.port,
            "ssh_user": "root",
            "ssh_host_keys": [self.host_key],
        }


@contextmanager
def throwaway_sshd(folder: Path, *, trusted_ca_keys: list[str]):
    """Yields an Sshd trusting `trusted_ca_keys` (OpenSSH lines) for root and nothing else (no
    passwords, no authorized_keys); stopped (by its PID) on leaving."""
    folder.mkdir(parents=True, exist_ok=True)
    host_key = folder / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
    ca_file = folder / "user_ca.pub"
    ca_file.write_text("".join(f"{line}\n" for line in trusted_ca_keys))
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\n"
        "ListenAddress 127.0.0.1\n"
        f"HostKey {host_key}\n"
        f"PidFile {folder / 'sshd.pid'}\n"
        f"TrustedUserCAKeys {ca_file}\n"
        "AuthorizedKeysFile none\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "PrintMotd no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation folder
    log = (folder / "sshd.log").open("w")
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", config], stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert server.poll() is None, (folder / "sshd.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "sshd did not listen"
                time.sleep(0.05)
        public = host_key.with_suffix(".pub").read_text().split()
        yield Sshd(port=port, host_key=" ".join(public[:2]))
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
