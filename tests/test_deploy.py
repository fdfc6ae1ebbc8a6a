"""What deploy/ gives an operator says the same thing everywhere: the compose file, the Kubernetes
manifests and the systemd units run the same processes with the same commands and settings, and
the nginx template's variables are the ones every caller sets. (deploy/stack/start.sh runs the
real thing; tests/e2e/test_production_stack.py checks it from the outside.)"""

import gc
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.urls import reverse

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PROCESSES = ("web", "worker", "beat")


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


def test_every_process_runs_the_same_command_in_compose_kubernetes_and_systemd():
    services = compose()["services"]
    containers = k8s_containers()
    for process in PROCESSES:
        command = services[process]["command"]
        assert containers[process]["command"] == command, process
        assert systemd_command(process) == command, process
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
