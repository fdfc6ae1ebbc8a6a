"""GPU cloud hosts on a real host agent: seconds from order to a host SSH-able from outside.

    python bench/agent_hosts.py [--hosts 20] [--parallel 1] [--cards 4]

Needs root, systemd-nspawn and the host image (`bash deploy/agent/install.sh`, then
`loam-agent image build`; LOAM_AGENT_IMAGE_DIR as for the tests). Recreates a scratch
PostgreSQL database (--database, default loam_agent_bench), migrates it and builds a park with
one agent backend and a one-card flavor. Starts the portal (gunicorn, 2 workers), a Celery
worker (prefork, 2) on a real broker (--broker, default Redis database 12), and a real
`loam-agent` whose cards are a fake libnvidia-ml.so.1 (tests/agent/fake_nvml, built with gcc)
bound in as character devices 195:N, its uplink facing an outside world of network namespaces
(tests/outside_world.py: a router and an "internet" namespace, all on this machine). The agent
enrols with a join token, then --hosts hosts are ordered through the service layer, --parallel
at a time; each is timed from its order to the first `ssh -p <port> root@<public address> true`
from the outside namespace that succeeds with the tenant's key (the SSH line the instance page
shows), and released. At the
end nothing may remain: no host folder, no network namespace, every card free. Each host takes
one vCPU of the server the agent reports (this machine: 2), which bounds --parallel.
Logs: var/log/bench-agent-{portal,worker}.log; the agent's is printed if it fails.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.agent_server import (  # noqa: E402
    AgentPark,
    build_agent_park,
    missing_for_hosts,
    ssh_answers,
    start_agent_server,
)
from tests.outside_world import OutsideWorld, missing_tools  # noqa: E402

LOGS = REPO / "var" / "log"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=1, help="hosts ordered at a time")
    parser.add_argument("--cards", type=int, default=4, help="fake cards on the server")
    parser.add_argument("--database", default="loam_agent_bench")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--timeout", type=float, default=60, help="per host (seconds)")
    args = parser.parse_args()
    if args.parallel > args.cards:
        sys.exit("--parallel cannot exceed --cards: each host takes one card")
    if missing := missing_for_hosts() or missing_tools():
        sys.exit(missing)

    recreate_database(args.postgres, args.database)
    os.environ.update(
        DATABASE_URL=f"{args.postgres}/{args.database}",
        CELERY_BROKER_URL=args.broker,
        CELERY_TASK_ALWAYS_EAGER="false",
        DJANGO_SETTINGS_MODULE="portal.settings",
        ALLOWED_HOSTS="127.0.0.1,localhost",
    )
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    django.setup()
    from django.core.management import call_command

    from portal.celery import app

    call_command("migrate", verbosity=0)
    world = build_agent_park(quota=args.hosts)
    app.control.purge()
    LOGS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="loam-agent-bench-"))
    processes, server = [], None
    outside = OutsideWorld(work / "outside")
    try:
        outside.start()
        processes.append(start_portal(args.port))
        processes.append(start_worker())
        wait_for_port(args.port)
        server = start_agent_server(
            pool=world.pool,
            operator=world.operator,
            portal_url=f"http://127.0.0.1:{args.port}",
            work=work,
            cards=args.cards,
        )
        processes.append(server.process)
        wait_for_cards(world.pool, args.cards, server)
        key = work / "tenant_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        public_key = key.with_suffix(".pub").read_text().strip()

        started = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(
                pool.map(
                    lambda n: order_ssh_release(world, n, public_key, key, args.timeout),
                    range(args.hosts),
                )
            )
        took = time.perf_counter() - started
        leftovers = wait_for_nothing_left(world.pool, server)
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if server is not None:
            server.stop()  # the hosts it left and their rules
        outside.stop()
        shutil.rmtree(work, ignore_errors=True)

    report(args, results, took, leftovers)


def recreate_database(postgres: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def start_portal(port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "gunicorn", "portal.wsgi", "-b", f"127.0.0.1:{port}"]
    command += ["-w", "2", "--threads", "4"]
    return spawn(command, "portal")


def start_worker() -> subprocess.Popen:
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker"]
    command += ["--concurrency=2", "--loglevel=INFO", "--without-gossip"]
    return spawn(command, "worker")


def spawn(command: list, name: str, env: dict | None = None) -> subprocess.Popen:
    log = (LOGS / f"bench-agent-{name}.log").open("w")
    return subprocess.Popen(
        command, cwd=REPO, env=env or os.environ, stdout=log, stderr=subprocess.STDOUT
    )


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    sys.exit("the portal did not start: see var/log/bench-agent-portal.log")


def wait_for_cards(pool, cards: int, server) -> None:
    from apps.orchestration.models import Accelerator

    deadline = time.monotonic() + 30
    while Accelerator.objects.filter(node__pool=pool).count() < cards:
        if server.process.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"the agent's cards did not appear:\n{server.log.read_text()[-2000:]}")
        time.sleep(0.2)


def order_ssh_release(world: AgentPark, n: int, public_key: str, key: Path, timeout: float) -> dict:
    """Order one host, time it to SSH, release it; {'ssh_s', 'running_s'} or {'error'}."""
    from django.db import close_old_connections

    from apps.orders.models import Instance, InstanceState, Order, OrderKind
    from apps.orders.operations import request_operation
    from apps.orders.services import HostRequest, submit_create

    close_old_connections()
    request = HostRequest(
        flavor=world.flavor,
        image=world.image,
        region=world.region,
        system_disk_gb=world.flavor.system_disk_gb,
        data_disk_gb=1,
        ssh_public_key=public_key,
        name=f"agent-bench-{n}",
    )
    started = time.perf_counter()
    [order] = submit_create(organization=world.organization, actor=world.owner, request=request)
    instance_id = Order.objects.get(pk=order.pk).instance_id
    result: dict = {}
    deadline = started + timeout
    while time.perf_counter() < deadline:
        instance = Instance.objects.get(pk=instance_id)
        if instance.state == InstanceState.ERROR:
            return {"error": instance.error_message or "failed"}
        if instance.state == InstanceState.RUNNING:
            result.setdefault("running_s", time.perf_counter() - started)
            if ssh_answers(instance.access, key).returncode == 0:
                result["ssh_s"] = time.perf_counter() - started
                break
        time.sleep(0.1)
    else:
        result["error"] = f"not SSH-able within {timeout:g} s"
    request_operation(
        instance=Instance.objects.get(pk=instance_id), actor=world.owner, kind=OrderKind.RELEASE
    )
    while Instance.objects.get(pk=instance_id).state != InstanceState.RELEASED:
        if time.perf_counter() > deadline + timeout:
            result["error"] = "not released in time"
            break
        time.sleep(0.2)
    return result


def wait_for_nothing_left(pool, server) -> list[str]:
    from apps.orchestration.models import Accelerator

    deadline = time.monotonic() + 30
    while True:
        hosts = server.host_folders()
        namespaces = sorted(p.name for p in Path("/run/netns").glob("loam-*"))
        held = Accelerator.objects.filter(node__pool=pool, allocation__isnull=False).count()
        leftovers = [f"host folder {h}" for h in hosts] + [f"netns {n}" for n in namespaces]
        leftovers += [f"{held} cards held"] if held else []
        if not leftovers or time.monotonic() > deadline:
            return leftovers
        time.sleep(0.5)


def report(args, results: list[dict], took: float, leftovers: list[str]) -> None:
    errors = [r["error"] for r in results if "error" in r]
    print(
        f"{args.hosts} hosts ordered {args.parallel} at a time on one agent server "
        f"({args.cards} fake cards, systemd-nspawn, user namespaces), SSH from the outside "
        f"namespace through the server's public port; portal gunicorn 2x4, worker prefork 2, "
        f"broker {args.broker}; {took:.1f} s in all"
    )
    for name, label in (("running_s", "order -> running"), ("ssh_s", "order -> SSH-able")):
        figures = sorted(r[name] for r in results if name in r)
        if figures:
            p95 = figures[max(0, round(0.95 * len(figures)) - 1)]
            print(
                f"{label} ({len(figures)} hosts): p50 {statistics.median(figures):.2f} s, "
                f"p95 {p95:.2f} s, max {figures[-1]:.2f} s"
            )
    if errors:
        print(f"failed: {len(errors)} (first: {errors[0]})")
    print("left behind: " + (", ".join(leftovers) if leftovers else "nothing"))


if __name__ == "__main__":
    main()
