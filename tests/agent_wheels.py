"""The wheels an offline mirror holds for the agent, for tests that pip-install it as a partner's
server does (tests/agents/test_distribution.py, tests/e2e/test_partner_joins.py): filled once per
run from this machine's package index; where none answers the tests skip (in CI they fail)."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

AGENT_DIR = Path(__file__).resolve().parents[1] / "agent"


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """The wheels an offline mirror holds for the agent: its dependencies and build backend,
    as deploy/setup.sh keeps them in var/agent-wheels (else downloaded here)."""
    kept = AGENT_DIR.parent / "var" / "agent-wheels"
    project = tomllib.loads((AGENT_DIR / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    complete = kept / ".complete"
    if complete.is_file() and complete.read_text().split() == requirements:
        return kept
    folder = tmp_path_factory.mktemp("wheelhouse")
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    download += ["--retries", "4", "--timeout", "30", "--only-binary", ":all:", "--dest"]
    result = subprocess.run(
        [*download, str(folder), *requirements], capture_output=True, text=True, timeout=300
    )
    if result.returncode:
        reason = f"no package index answers for the agent's wheels: {result.stderr[-400:]}"
        if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return folder


def offline_pip(wheelhouse: Path) -> dict:
    """The environment of a server whose pip reads only the mirror's wheels."""
    return {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
