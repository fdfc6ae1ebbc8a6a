"""What deploy/ gives an operator says the same thing everywhere: the compose file, the Kubernetes
manifests and the systemd units run the same processes with the same commands and settings, and
the nginx template's variables are the ones every caller sets. (deploy/stack/start.sh runs the
real thing; tests/e2e/test_production_stack.py checks it from the outside.)"""

import gc
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PROCESSES = ("web", "asgi", "worker", "beat")


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s_objects() -> list[dict]:
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    objects = []
    for name in kustomization["resources"]:
        objects += [doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if doc]
    return objects


def k8s_containers() -> dict[str, dict]:
    """Each workload's one container, by compose's service name (component label)."""
    containers = {}
    for obj in k8s_objects():
        if obj["kind"] in ("Deployment", "Job"):
            template = obj["spec"]["template"]
            [container] = template["spec"]["containers"]
            containers[template["metadata"]["labels"]["app.kubernetes.io/component"]] = container
    return containers


def systemd_command(unit: str) -> list[str]:
    text = (DEPLOY / "systemd" / f"loam-{unit}.service").read_text()
    [line] = re.findall(r"^ExecStart=(.+)$", text, flags=re.MULTILINE)
    program, *args = shlex.split(line.replace("%%", "%"))
    return [Path(program).name, *args]


def any_address(command: list[str]) -> list[str]:
    """The command with the address it binds left out: gunicorn reads its own from the
    environment (GUNICORN_BIND), Daphne only from its arguments, so systemd's binds loopback
    (behind nginx on the machine) where a container binds its own network's every address."""
    return [
        "<address>" if index and command[index - 1] == "--bind" else part
        for index, part in enumerate(command)
    ]


def test_every_process_runs_the_same_command_in_compose_kubernetes_and_systemd():
    services = compose()["services"]
    containers = k8s_containers()
    for process in PROCESSES:
        command = services[process]["command"]
        assert containers[process]["command"] == command, process
        assert any_address(systemd_command(process)) == any_address(command), process
    assert systemd_command("asgi")[systemd_command("asgi").index("--bind") + 1] == "127.0.0.1"
    assert containers["migrate"]["command"] == services["migrate"]["command"]


def test_kubernetes_sets_what_compose_sets_and_reads_the_shared_config():
    services = compose()["services"]
    for process, container in k8s_containers().items():
        names = {variable["name"] for variable in container.get("env", [])}
        assert set(services[process].get("environment", {})) <= names, process
        sources = {next(iter(source.values()))["name"] for source in container["envFrom"]}
        assert sources == {"loam-config", "loam-secrets"}, process


def test_there_is_one_beat_and_a_rollout_never_runs_two():
    [beat] = [o for o in k8s_objects() if o["metadata"]["name"] == "loam-beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    assert "deploy" not in compose()["services"]["beat"]  # no replicas setting


def test_web_is_probed_on_the_health_endpoint_with_an_allowed_host():
    web = k8s_containers()["web"]
    [config] = [o for o in k8s_objects() if o["kind"] == "ConfigMap"]
    allowed = config["data"]["ALLOWED_HOSTS"].split(",")
    for probe in ("readinessProbe", "livenessProbe"):
        check = web[probe]["httpGet"]
        assert check["path"] == reverse("healthz"), probe
        assert {h["name"]: h["value"] for h in check["httpHeaders"]}["Host"] in allowed, probe


def test_metrics_are_closed_to_the_public_in_front_of_every_deployment():
    nginx = (DEPLOY / "nginx" / "loam.conf").read_text()
    block = re.search(r"location = /metrics \{(.*?)\}", nginx, flags=re.DOTALL).group(1)
    assert re.findall(r"^\s*(allow|deny) (\S+);", block, flags=re.MULTILINE) == [
        ("allow", "127.0.0.1"),
        ("allow", "::1"),
        ("deny", "all"),
    ]
    [metrics] = [o for o in k8s_objects() if o["metadata"]["name"] == "loam-metrics"]
    [path] = metrics["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/metrics", "Exact")
    annotation = "nginx.ingress.kubernetes.io/whitelist-source-range"
    assert metrics["metadata"]["annotations"][annotation] == "127.0.0.1/32"


def test_the_nginx_template_s_variables_are_set_by_every_caller():
    template = (DEPLOY / "nginx" / "loam.conf").read_text()
    body = "\n".join(line for line in template.splitlines() if not line.startswith("#"))
    used = set(re.findall(r"\$\{(LOAM_[A-Z_]+)\}", body))
    assert used  # the template has placeholders to fill
    assert set(compose()["services"]["nginx"]["environment"]) == used
    start = (DEPLOY / "stack" / "start.sh").read_text()
    [envsubst_list] = re.findall(r"envsubst_vars='([^']+)'", start)
    assert set(re.findall(r"\$\{(\w+)\}", envsubst_list)) == used


def test_nginx_passes_a_canonical_host_not_the_clients_port():
    """The client's Host header, port and all, never reaches Django: each new port would be a
    new value (issue 31: login rate-limit keys), so nginx names its own port instead."""
    nginx = (DEPLOY / "nginx" / "loam.conf").read_text()
    sent = re.findall(r"^\s*proxy_set_header (Host|X-Forwarded-Host) (\S+);", nginx, re.M)
    # The portal's origin, and the hosts' web services' own (its second server).
    assert {value for _header, value in sent} == {
        "$host${LOAM_HTTPS_PORT_SUFFIX}",
        "$host${LOAM_SERVICES_PORT_SUFFIX}",
    }
    assert {header for header, _value in sent} == {"Host", "X-Forwarded-Host"}
    assert "$http_host" not in nginx


@pytest.mark.parametrize(
    ("environment", "workers", "control_socket_disabled"),
    [
        ({"GUNICORN_WORKERS": "3"}, 3, True),
        ({"GUNICORN_CONTROL_SOCKET": "/run/loam/gunicorn.ctl"}, None, False),
    ],
)
def test_gunicorn_takes_its_settings_from_the_environment(
    environment, workers, control_socket_disabled, tmp_path
):
    printed = subprocess.run(
        [
            Path(sys.executable).with_name("gunicorn"),
            "-c",
            DEPLOY / "gunicorn.conf.py",
            "--print-config",
        ],
        env={"PATH": "/usr/bin:/bin", "GUNICORN_BIND": f"unix:{tmp_path}/g.sock", **environment},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    config = dict(re.findall(r"^(\w+)\s+= (.*)$", printed, flags=re.MULTILINE))
    assert config["bind"] == f"['unix:{tmp_path}/g.sock']"
    assert config["control_socket_disable"] == str(control_socket_disabled)
    if workers:
        assert config["workers"] == str(workers)
    else:  # 2 × CPUs + 1, at most 12
        assert 3 <= int(config["workers"]) <= 12


def test_gunicorn_starts_with_an_empty_metrics_directory(tmp_path, monkeypatch):
    """Counters a previous run left would be added to this run's."""
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_4242.db").write_bytes(b"stale")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    hooks = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    hooks["on_starting"](server=None)
    assert list(directory.iterdir()) == []


def test_a_gunicorn_worker_freezes_what_it_loaded_and_collects_less_often():
    hooks = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    threshold = gc.get_threshold()
    try:
        hooks["post_worker_init"](worker=None)
        assert gc.get_freeze_count() > 10_000  # the application's objects, this test's too
        assert gc.get_threshold() == (hooks["GC_YOUNG_THRESHOLD"], *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


# --- The image: what the build context holds and what gets installed ---------------------------


def dockerignore_excludes(path: str) -> bool:
    """Whether deploy/Dockerfile.dockerignore keeps `path` out of the build context, as
    BuildKit reads it: the last matching pattern wins, `!` re-includes, `**` spans folders, and
    an excluded folder takes everything under it."""
    excluded = False
    for line in (ROOT / "deploy/Dockerfile.dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        regex = "".join(
            ".*" if part == "**" else re.escape(part).replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
            for part in re.split(r"(\*\*)", pattern)
        )
        if re.fullmatch(rf"{regex}(/.*)?", path):
            excluded = not negated
    return excluded


@pytest.mark.parametrize(
    "path",
    [
        "deploy/loam.env",  # where compose.yaml tells operators to put the secrets
        "deploy/staging.env",
        "deploy/tls/privkey.pem",
        "deploy/tls/fullchain.pem",
        "somewhere/else/server.key",
        ".env",
        ".env.production",
        ".git/config",
        "tests/conftest.py",
    ],
)
def test_secrets_and_tests_stay_out_of_the_image(path):
    assert dockerignore_excludes(path)


@pytest.mark.parametrize(
    "path",
    [
        "manage.py",
        "apps/orders/services.py",
        "portal/settings.py",
        "templates/base.html",
        "deploy/gunicorn.conf.py",
        "deploy/production.env.example",
        "requirements.lock",
        "locale/zh_Hans/LC_MESSAGES/django.po",
    ],
)
def test_what_the_portal_runs_on_goes_into_the_image(path):
    assert not dockerignore_excludes(path)


def locked(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_image_installs_the_runtime_lock_without_test_tools():
    runtime, with_tests = locked("requirements.lock"), locked("requirements-test.lock")
    assert {"Django", "celery", "gunicorn", "psycopg"} <= set(runtime)
    for tool in ("pytest", "pytest-django", "playwright", "schemathesis", "ruff", "factory_boy"):
        assert tool not in runtime and tool in with_tests
    assert all(with_tests[name] == version for name, version in runtime.items())
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert "pip install -r requirements.lock" in dockerfile
    assert "requirements-test.lock" not in dockerfile
    assert "-r requirements-test.lock" in (ROOT / "deploy/setup.sh").read_text()


# --- Kubernetes: migrations before the portal, and a migration Job that applies again -----------


def k8s_pod_specs() -> dict[str, dict]:
    """Each workload's pod spec, by compose's service name (component label)."""
    return {
        obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: obj["spec"][
            "template"
        ]["spec"]
        for obj in k8s_objects()
        if obj["kind"] in ("Deployment", "Job")
    }


def calls_until_it_returns(command: list[str], tmp_path: Path, failures: int) -> list[str]:
    """Runs `command` with `python` stubbed to fail its first `failures` calls (and `sleep` to
    return at once); the arguments of each call to python, in order."""
    stubs, calls = tmp_path / "bin", tmp_path / "calls"
    stubs.mkdir(parents=True)
    (stubs / "python").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ntest "$(wc -l < {calls})" -gt {failures}\n'
    )
    (stubs / "sleep").write_text("#!/bin/sh\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    subprocess.run(
        command, env={"PATH": f"{stubs}:/usr/bin:/bin"}, check=True, capture_output=True, timeout=10
    )
    return calls.read_text().splitlines()


def test_every_pod_of_the_portal_but_the_migration_waits_for_migrations(tmp_path):
    portal = {
        component: spec
        for component, spec in k8s_pod_specs().items()
        if any(container["image"] == "loam" for container in spec["containers"])
    }
    assert set(portal) == {*PROCESSES, "migrate"}
    assert "initContainers" not in portal.pop("migrate")
    for component, spec in portal.items():
        [wait] = spec["initContainers"]
        # This image's migrations, checked in the database the pod's own container uses.
        assert wait["image"] == "loam", component
        assert wait["envFrom"] == spec["containers"][0]["envFrom"], component
        # Kubernetes starts the containers once the init container returns: it must keep
        # checking while migrations are missing, and return once they are applied.
        calls = calls_until_it_returns(wait["command"], tmp_path / component, failures=2)
        assert calls == ["manage.py migrate --check"] * 3, component


def kustomize_with_image_tag(tag: str, build: Path) -> list[dict]:
    """deploy/k8s/ as `kubectl apply -k` sends it, built in `build` with the image tagged `tag`."""
    build.mkdir()
    for source in (DEPLOY / "k8s").iterdir():
        (build / source.name).write_text(source.read_text())
    kustomization = yaml.safe_load((build / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    image["newTag"] = tag
    (build / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    try:
        built = subprocess.run(
            ["kubectl", "kustomize", str(build)], check=True, capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("kubectl is not installed: it builds the kustomization")
    return list(yaml.safe_load_all(built.stdout))


def test_the_migration_job_is_named_after_its_spec_so_applying_again_changes_no_job(tmp_path):
    """A Job's pod template cannot change, and `kubectl apply` needs a name (no generateName).
    What makes the manifests re-applicable is that the Job's name is not fixed: kustomize
    suffixes it with the hash of the Job's rendered spec (migrate-job.yaml says how)."""

    def job_name(objects: list[dict]) -> str:
        [name] = [o["metadata"]["name"] for o in objects if o["kind"] == "Job"]
        return name

    release = kustomize_with_image_tag("1.0", tmp_path / "release")
    name = job_name(release)
    assert name.startswith("loam-migrate-")
    # Applying the same manifests again names the Job that exists, which apply leaves as it is,
    assert job_name(kustomize_with_image_tag("1.0", tmp_path / "again")) == name
    # and a new image names a new Job beside it instead of changing that one.
    assert job_name(kustomize_with_image_tag("1.1", tmp_path / "next")) != name
    # Only the Job: the Deployments keep their names, so a release rolls them out.
    deployments = {o["metadata"]["name"] for o in release if o["kind"] == "Deployment"}
    assert deployments == {f"loam-{process}" for process in PROCESSES}
    # The Jobs of past releases delete themselves.
    [job] = [o for o in release if o["kind"] == "Job"]
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


# --- deploy/run-local.sh: the port it serves on ------------------------------------------------


def run_local(tmp_path: Path, *args: str, **env: str) -> tuple[str, list[str]]:
    """Run deploy/run-local.sh (with `args`) in a copy of the tree whose setup, python and
    celery are stubs: the LOAM_BASE_URL the development server got, and its arguments."""
    _calls, runserver = run_local_calls(tmp_path, *args, **env)
    base_url, *server_args = runserver.split()
    return base_url, server_args


def run_local_calls(tmp_path: Path, *args: str, **env: str) -> tuple[list[str], str]:
    """Every python call of run-local.sh ("<its LOAM_BASE_URL> <arguments>"), and the one that
    runs the development server."""
    tree = tmp_path / "tree"
    (tree / "deploy").mkdir(parents=True)
    (tree / "deploy" / "run-local.sh").write_text((DEPLOY / "run-local.sh").read_text())
    (tree / "deploy" / "setup.sh").write_text("")
    stubs = tree / ".venv" / "bin"
    stubs.mkdir(parents=True)
    (stubs / "activate").write_text(f'PATH="{stubs}:$PATH"\n')
    calls = tmp_path / "python-calls"
    (stubs / "python").write_text(f'#!/bin/sh\necho "$LOAM_BASE_URL $*" >>"{calls}"\n')
    (stubs / "celery").write_text("#!/bin/sh\n")
    for stub in ("python", "celery"):
        (stubs / stub).chmod(0o755)
    # Its status is left unread: the EXIT trap's kill finds the stub worker already gone.
    subprocess.run(
        ["bash", str(tree / "deploy" / "run-local.sh"), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        timeout=30,
    )
    lines = calls.read_text().splitlines()
    [runserver] = [line for line in lines if " runserver " in line]
    return lines, runserver


@pytest.mark.parametrize(
    ("env", "base_url", "address"),
    [
        ({}, "http://127.0.0.1:8000", "127.0.0.1:8000"),
        ({"LOAM_PORT": "8123"}, "http://127.0.0.1:8123", "127.0.0.1:8123"),
        (
            {"LOAM_PORT": "8123", "LOAM_BASE_URL": "https://loam.example"},
            "https://loam.example",
            "127.0.0.1:8123",
        ),
    ],
    ids=["default", "loam-port", "base-url-given"],
)
def test_run_local_serves_on_loam_port_and_links_follow_it(tmp_path, env, base_url, address):
    assert run_local(tmp_path, **env) == (base_url, ["manage.py", "runserver", address])


def test_run_local_takes_the_port_as_its_argument_too(tmp_path):
    assert run_local(tmp_path, "8124", LOAM_PORT="8123") == (
        "http://127.0.0.1:8124",
        ["manage.py", "runserver", "127.0.0.1:8124"],
    )


@pytest.mark.parametrize(
    ("args", "env", "base_url"),
    [
        ((), {}, "http://127.0.0.1:8000"),
        ((), {"LOAM_PORT": "8123"}, "http://127.0.0.1:8123"),
        (("8124",), {}, "http://127.0.0.1:8124"),
    ],
    ids=["default", "loam-port", "argument"],
)
def test_run_local_has_the_demo_print_its_links_on_its_port(tmp_path, args, env, base_url):
    calls, _runserver = run_local_calls(tmp_path, *args, **env)
    [seed] = [line for line in calls if " seed_demo" in line]
    assert seed == f"{base_url} manage.py seed_demo --base-url {base_url}"


def fresh_database(url: str, suffix: str) -> str:
    return runpy.run_path(str(DEPLOY / "fresh_database.py"))["fresh_database"](url, suffix)


def test_the_contract_check_gets_a_new_sqlite_file_beside_the_one_named(tmp_path):
    leftover = tmp_path / "loam_contract.sqlite3"
    leftover.write_text("what the last run left")

    url = fresh_database(f"sqlite:///{tmp_path / 'loam.sqlite3'}", "contract")

    assert url == f"sqlite:///{leftover}"
    assert not leftover.exists()


@pytest.mark.postgres
def test_the_contract_check_gets_an_empty_postgresql_database_beside_the_one_named(db):
    import psycopg
    from django.conf import settings

    database = settings.DATABASES["default"]
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    fresh = fresh_database(url, "contract")
    assert fresh == f"{url}_contract"
    with psycopg.connect(fresh, autocommit=True) as connection:
        connection.execute("CREATE TABLE left_by_the_last_run (id int)")

    assert fresh_database(url, "contract") == fresh
    with psycopg.connect(fresh, autocommit=True) as connection:
        tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchall() == []
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE "{database["NAME"]}_contract" WITH (FORCE)')


def test_the_kubernetes_manifests_are_valid_for_the_kubernetes_api_strictly(tmp_path):
    """What `kubectl apply -k` sends, against the API's own schemas: a misspelt or misplaced
    field (which kubectl may drop without a word) fails here."""
    import kubernetes_validate

    for obj in kustomize_with_image_tag("1.0", tmp_path / "release"):
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_the_strict_validation_catches_an_unknown_field(tmp_path):
    import kubernetes_validate

    [job] = [o for o in kustomize_with_image_tag("1.0", tmp_path / "release") if o["kind"] == "Job"]
    job["spec"]["template"]["spec"]["restartsPolicy"] = "Never"  # a typo kubectl would drop
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(job, version, strict=False)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, version, strict=True)


# --- deploy/slurm ------------------------------------------------------------------------------


def _can_switch_to_munge() -> bool:
    import pwd

    try:
        pwd.getpwnam("munge")
    except KeyError:
        return False
    return os.geteuid() == 0 and shutil.which("runuser") is not None


@pytest.mark.skipif(not _can_switch_to_munge(), reason="needs root and the munge user")
def test_slurm_start_refuses_a_run_dir_its_daemon_users_cannot_reach(tmp_path):
    """A clone under a `mktemp -d` folder (mode 700): refused with the folder and the user,
    before any daemon starts (munged used to fail later with "Failed to check logfile")."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    run_dir = private / "clone" / "var" / "slurm"
    # Ports no cluster uses: were the check to let it through, nothing of anyone's is touched.
    knobs = {
        "LOAM_SLURM_ROOT": str(run_dir),
        "LOAM_SLURM_REST_PORT": "6890",
        "LOAM_SLURM_CTLD_PORT": "6887",
        "LOAM_SLURM_DBD_PORT": "6889",
        "LOAM_SLURM_SLURMD_PORT0": "17900",
        "LOAM_SLURM_MYSQL_PORT": "3396",
    }
    done = subprocess.run(
        ["bash", str(DEPLOY / "slurm" / "start.sh")],
        env={**os.environ, **knobs},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    match = re.search(
        r"user munge cannot reach the run dir \S+: (\S+) is not searchable", done.stderr
    )
    assert match, done.stderr
    assert Path(match[1]) in run_dir.parents
    assert not (run_dir / "munge").exists() and not (run_dir / "pids").exists()


def test_slurm_bundles_are_made_of_the_built_images_only(tmp_path):
    """deploy/slurm/bundles.sh: a bundle per image built (image.json and rootfs), whose rootfs
    is a link to the image's, never a copy; an image still being built is left out and a bundle
    whose image is gone is removed."""
    source, target = tmp_path / "images", tmp_path / "bundles"
    for name in ("debian-12", "pytorch"):
        (source / name / "rootfs" / "etc").mkdir(parents=True)
        (source / name / "image.json").write_text(f'{{"name": "{name}", "digest": "sha256:1"}}')
    (source / "half-built" / "rootfs.partial").mkdir(parents=True)
    (target / "removed-image").mkdir(parents=True)

    subprocess.run(
        ["bash", str(DEPLOY / "slurm" / "bundles.sh"), str(target), str(source)], check=True
    )

    assert sorted(path.name for path in target.iterdir()) == ["debian-12", "pytorch"]
    bundle = target / "pytorch"
    assert (bundle / "rootfs").resolve() == source / "pytorch" / "rootfs"
    assert (bundle / "image.json").read_text() == (source / "pytorch" / "image.json").read_text()
    config = json.loads((bundle / "config.json").read_text())
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert {"type": "user"} in config["linux"]["namespaces"]
    assert "network" not in {space["type"] for space in config["linux"]["namespaces"]}
