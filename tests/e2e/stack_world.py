"""An agent park in the production stack's own database, for journeys against the stack.

The stack (deploy/stack/) runs on its own database, which the test process doesn't hold: this
module, run with the stack's environment (`python -m tests.e2e.stack_world IMAGE`), builds
tests/agent_server.build_agent_park there through the factories as the in-process journeys do,
gives its owner and a member of another organization of the park passwords, issues a join token
for the pool and prints what a journey needs as one JSON line. `build_in_stack` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "stack-workbench-password-1"


def stack_environment(stack_root: Path) -> dict[str, str]:
    """The stack's processes' environment (its etc/loam.env, systemd's EnvironmentFile format)."""
    env = dict(os.environ)
    for line in (stack_root / "etc" / "loam.env").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            env[name.strip()] = value.strip().strip('"')
    # The test process's own database and settings must not leak into the stack's.
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def build_in_stack(stack_root: Path, image: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "tests.e2e.stack_world", image],
        cwd=REPO,
        env=stack_environment(stack_root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"building the park in the stack failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _fresh_sequences() -> None:
    """The stack's database outlives a run: factories' names and e-mails numbered from 0 in
    each process would meet the last run's, so number from the clock."""
    import factory

    from tests import factories

    start = time.time_ns() // 10**8 % 9_000_000  # tenths of a second; credit codes hold 7 digits
    for value in vars(factories).values():
        # A price's sequence is its start (minutes after factories.EPOCH): it must stay past.
        is_factory = isinstance(value, type) and issubclass(value, factory.Factory)
        if is_factory and value is not factories.PriceFactory:
            value.reset_sequence(start, force=True)


def _build(image: str) -> dict:
    from apps.agents.services import issue_join_token
    from tests.agent_server import build_agent_park
    from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

    _fresh_sequences()
    park = build_agent_park(quota=2, image=image)
    outsider = UserFactory()
    MembershipFactory(
        organization=OrganizationFactory(
            park=park.organization.park, verification_state="verified"
        ),
        user=outsider,
        role="owner",
    )
    for user in (park.owner, outsider):
        user.set_password(PASSWORD)
        user.save()
    _token, secret = issue_join_token(pool=park.pool, operator=park.operator)
    return {
        "owner": park.owner.email,
        "outsider": outsider.email,
        "password": PASSWORD,
        "flavor": park.flavor.code,
        "join_token": secret,
    }


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    print(json.dumps(_build(sys.argv[1])))
