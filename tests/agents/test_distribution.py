"""What a partner's server downloads (apps/agents/distribution.py) and the installer that uses it
(agent/install.sh), as a server would: the archive pip-installs into a fresh venv, and the
installer, run against a live portal with a real join token, installs, configures and enrols.

pip runs with PIP_NO_INDEX=1 and a folder of wheels, as behind an offline mirror; the folder is
filled once per run from this machine's package index (the agent's pinned dependencies and its
build backend), and the tests skip where no index answers (LOAM_REQUIRE_SERVICES=1: they fail).
No Debian package is installed (LOAM_AGENT_SKIP_APT=1), and the installer writes under a folder
of the test's (--root), so it needs neither root nor systemd.
"""

import io
import os
import subprocess
import sys
import tarfile
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apps.agents import services
from apps.agents.models import AgentServer
from tests.agent_wheels import offline_pip

REPOSITORY = Path(__file__).resolve().parents[2]
AGENT_DIR = REPOSITORY / "agent"
INSTALLER = AGENT_DIR / "install.sh"
ARCHIVE_URL = "/agent/loam-agent.tar.gz"


def test_the_archive_is_an_sdist_of_the_agent_with_the_installers_files(client):
    response = client.get(ARCHIVE_URL)  # nobody logged in

    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    version = tomllib.loads((AGENT_DIR / "pyproject.toml").read_text())["project"]["version"]
    assert f'filename="loam_agent-{version}.tar.gz"' in response["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
        names = tar.getnames()
        top = f"loam_agent-{version}"
        assert all(name.startswith(f"{top}/") for name in names)
        assert {
            f"{top}/pyproject.toml",
            f"{top}/README.md",
            f"{top}/loam_agent/cli.py",
            f"{top}/loam_agent/hosts/runtime.py",
            f"{top}/deploy/agent/install.sh",
            f"{top}/deploy/agent/loam-agent.service",
        } <= set(names)
        assert not [name for name in names if "__pycache__" in name or ".egg-info" in name]
        unit = tar.extractfile(f"{top}/deploy/agent/loam-agent.service").read()
    assert unit == (REPOSITORY / "deploy/agent/loam-agent.service").read_bytes()

    # The same sources give the same bytes; a client that has them gets a 304.
    again = client.get(ARCHIVE_URL)
    assert again.content == response.content and again["ETag"] == response["ETag"]
    assert client.get(ARCHIVE_URL, HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304


def test_the_installer_is_served_as_a_shell_script(client):
    response = client.get("/agent/install.sh")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/x-shellscript; charset=utf-8"
    assert response.content == INSTALLER.read_bytes()


@pytest.mark.parametrize("path", ["/agent/install.sh", ARCHIVE_URL])
def test_the_downloads_are_read_only(client, path):
    assert client.post(path).status_code == 405
    assert client.put(path).status_code == 405


def test_the_served_archive_pip_installs_into_a_fresh_venv(client, wheelhouse, tmp_path):
    archive = tmp_path / "loam-agent.tar.gz"
    archive.write_bytes(client.get(ARCHIVE_URL).content)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)

    subprocess.run(
        [venv / "bin/python", "-m", "pip", "install", "--quiet", archive],
        env=offline_pip(wheelhouse),
        check=True,
        timeout=300,
    )

    helped = subprocess.run(
        [venv / "bin/loam-agent", "--help"], capture_output=True, text=True, check=True
    )
    assert "enrol" in helped.stdout and "run" in helped.stdout
    where = subprocess.run(
        [venv / "bin/python", "-c", "import loam_agent, httpx; print(loam_agent.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(venv))  # the venv's own copy, not the checkout's


def certificate_authority() -> bytes:
    """A park's private CA certificate (PEM), self-signed."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Park CA")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def run_installer(*arguments, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", INSTALLER, *map(str, arguments)],
        env={**env, "LOAM_AGENT_SKIP_APT": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.django_db(transaction=True)
def test_the_installer_installs_and_enrols_the_server_with_the_portal(
    live_server, agent_world, wheelhouse, tmp_path
):
    _token, secret = services.issue_join_token(pool=agent_world.pool, operator=agent_world.operator)
    root = tmp_path / "server"
    ca_file = tmp_path / "portal-ca.pem"
    ca_file.write_bytes(certificate_authority())
    options = ["--portal", live_server.url, "--root", root, "--no-start", "--no-image"]

    done = run_installer(
        *options, "--token", secret, "--ca-file", ca_file, env=offline_pip(wheelhouse)
    )

    assert done.returncode == 0, done.stderr
    venv = root / "opt/loam-agent/venv"
    link = root / "usr/local/bin/loam-agent"
    assert link.resolve() == (venv / "bin/loam-agent").resolve()
    config = (root / "etc/loam-agent/agent.toml").read_text()
    assert f'portal_url = "{live_server.url}"' in config
    assert f'ca_bundle = "{root}/etc/loam-agent/portal-ca.pem"' in config
    assert (root / "etc/loam-agent/portal-ca.pem").read_text() == ca_file.read_text()
    unit = (root / "etc/systemd/system/loam-agent.service").read_text()
    assert f"ExecStart={link} --config {root}/etc/loam-agent/agent.toml run" in unit
    assert "not touching systemd" in done.stderr
    # The server enrolled: a node of the pool, with the credential the agent keeps.
    server = AgentServer.objects.get()
    assert server.node.pool == agent_world.pool
    assert (root / "var/lib/loam-agent/credential.json").is_file()

    # Again, with a key the operator added: the agent is reinstalled in place, the server is
    # not enrolled a second time (the token is spent), and the added key stays.
    with (root / "etc/loam-agent/agent.toml").open("a") as file:
        file.write("sample_interval_s = 2\n")
    again = run_installer(*options, env=offline_pip(wheelhouse))

    assert again.returncode == 0, again.stderr
    assert "already enrolled" in again.stderr
    assert AgentServer.objects.count() == 1
    config = (root / "etc/loam-agent/agent.toml").read_text()
    assert config.count("portal_url =") == 1 and "sample_interval_s = 2" in config
    assert "ca_bundle =" in config


@pytest.mark.django_db(transaction=True)
def test_the_installer_says_why_it_stops(live_server, agent_world, tmp_path):
    root = tmp_path / "server"
    env = dict(os.environ)

    no_token = run_installer("--portal", live_server.url, "--root", root, env=env)
    assert no_token.returncode == 2 and "--token TOKEN is required" in no_token.stderr

    bad_url = run_installer("--portal", "portal.example.cn", "--token", "x", env=env)
    assert bad_url.returncode == 2 and "must be an http(s) URL" in bad_url.stderr

    unknown = run_installer("--portal", live_server.url, "--tokn", "x", env=env)
    assert unknown.returncode == 2 and "unknown option --tokn" in unknown.stderr

    no_ca = run_installer(
        "--portal", live_server.url, "--token", "x", "--ca-file", tmp_path / "none.pem", env=env
    )
    assert no_ca.returncode == 1 and "is not a readable file" in no_ca.stderr
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    not_ca = run_installer(
        "--portal", live_server.url, "--token", "x", "--ca-file", tmp_path / "key.pem", env=env
    )
    assert not_ca.returncode == 1 and "is not a PEM certificate" in not_ca.stderr

    # A portal that serves no agent there (a wrong address): said before anything is installed.
    wrong = run_installer(
        "--portal", f"{live_server.url}/nothing", "--token", "x", "--root", root, env=env
    )
    assert wrong.returncode == 1 and "couldn't download" in wrong.stderr
    assert not (root / "opt").exists()


@pytest.mark.django_db(transaction=True)
def test_a_revoked_join_token_is_named_as_the_reason(
    live_server, agent_world, wheelhouse, tmp_path
):
    token, secret = services.issue_join_token(pool=agent_world.pool, operator=agent_world.operator)
    services.revoke_join_token(token=token, operator=agent_world.operator)
    options = ["--portal", live_server.url, "--root", tmp_path / "server", "--no-image"]

    refused = run_installer(*options, "--token", secret, env=offline_pip(wheelhouse))

    assert refused.returncode == 1, refused.stderr
    assert "refused the join token" in refused.stderr
    assert not AgentServer.objects.exists()
