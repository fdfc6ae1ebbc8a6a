"""Real image builds (root, debootstrap, the network or a mirror): the base image and pytorch
built from their recipes into LOAM_AGENT_IMAGE_DIR (once per machine and recipe), each with
loam-init as PID 1 and a digest of what is in it; pytorch's Python has torch, JupyterLab and
TensorBoard for a tenant's login shell. And the mounts a build makes never outlive it."""

import json
import os
import signal
import subprocess
import time

import pytest
from loam_agent.hosts import image
from loam_agent.hosts.image import ImageError, installed_packages, list_images, load_recipe

pytestmark = pytest.mark.containers


def in_image(root, command: str) -> subprocess.CompletedProcess:
    """`command` in a login shell in the image, as a tenant's ssh session runs it."""
    return subprocess.run(
        ["chroot", str(root), "/bin/sh", "-lc", command],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"},
    )


def test_the_base_image_boots_loam_init_and_reports_its_digest(host_images):
    root = image.rootfs(host_images, "debian-12")
    init = (root / "usr/local/sbin/loam-init").read_text()
    assert "/etc/loam/services/*.env" in init and init.rstrip().endswith(
        "exec /usr/sbin/sshd -D -e"
    )
    assert not list((root / "etc/ssh").glob("ssh_host_*"))  # made per host at its first start
    facts = json.loads((host_images / "debian-12" / "image.json").read_text())
    assert facts["recipe"] == load_recipe("debian-12").digest
    # The digest is what the build found in the image: computed again, it is the same.
    again = image.image_digest(facts["recipe"], installed_packages(root), [])
    assert facts["digest"] == again
    assert "debian-12" in [built.name for built in list_images(host_images)]


def test_pytorch_has_torch_jupyterlab_and_tensorboard_for_a_login_shell(pytorch_images):
    root = image.rootfs(pytorch_images, "pytorch")
    result = in_image(root, 'python -c "import torch, jupyterlab, tensorboard"')
    assert result.returncode == 0, result.stderr
    version = in_image(root, 'python -c "import torch; print(torch.__version__)"')
    assert version.stdout.startswith("2.13.0"), version.stdout
    for service in ("jupyter", "tensorboard"):
        launcher = root / "usr/local/lib/loam/services" / service
        assert launcher.stat().st_mode & 0o111
        assert "$LOAM_SERVICE_PORT" in launcher.read_text()
    # The recipe's settings lie where JupyterLab reads its overrides: its application folder.
    lab = in_image(root, "jupyter lab path").stdout
    application = lab.split("Application directory:", 1)[1].split()[0]
    assert (root / application.lstrip("/") / "settings/overrides.json").is_file(), lab
    built = {b.name: b for b in list_images(pytorch_images)}["pytorch"]
    distributions = json.loads((pytorch_images / "pytorch" / "image.json").read_text())
    assert any(d.startswith("torch-2.13.0") for d in distributions["distributions"])
    assert built.digest.startswith("sha256:") and built.size_bytes > 500 * 2**20
    # Nothing of this machine's pip configuration stays in the image.
    assert not (root / "opt/wheels").exists()
    assert not (root / "etc/xdg/pip").exists()


def test_a_bound_path_is_read_only_in_the_image_and_gone_after(tmp_path):
    root, wheels = tmp_path / "root", tmp_path / "wheels"
    root.mkdir()
    wheels.mkdir()
    (wheels / "torch.whl").write_text("wheel")
    target = root / str(wheels).lstrip("/")
    with image._bound(root, [wheels]):
        assert (target / "torch.whl").read_text() == "wheel"
        with pytest.raises(OSError):
            (target / "new").write_text("x")
    assert image._mounts_under(root) == []
    assert list(root.iterdir()) == []  # the folders made to bind on are removed too
    assert (wheels / "torch.whl").exists()


def test_a_failed_step_unmounts_everything_before_the_image_is_deleted(tmp_path):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "dev").mkdir()
    with pytest.raises(ImageError, match="failed"), image._chroot(root):
        assert image._mounts_under(root)
        image._in_chroot(root, ["/bin/true"], {"PATH": "/usr/sbin:/usr/bin"})  # an empty root
    assert image._mounts_under(root) == []


def test_loam_init_starts_the_services_asked_for_then_becomes_sshd(pytorch_images, tmp_path):
    """PID 1 of a host of the pytorch image, in a container of its own (an overlay on the image,
    no network but its loopback): JupyterLab answers under its base URL with its token, and
    TensorBoard, not asked for, doesn't run."""
    layers = {name: tmp_path / name for name in ("upper", "work", "root")}
    for folder in layers.values():
        folder.mkdir()
    lower = image.rootfs(pytorch_images, "pytorch")
    options = f"lowerdir={lower},upperdir={layers['upper']},workdir={layers['work']}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, layers["root"]], check=True)
    services = layers["root"] / "etc/loam/services"
    services.mkdir(parents=True)
    (services / "jupyter.env").write_text(
        "LOAM_SERVICE_PORT=8888\nLOAM_SERVICE_BASE_URL=/instances/42/jupyter/\n"
        "LOAM_SERVICE_TOKEN=s3cret\n"
    )
    nspawn = subprocess.Popen(
        ["systemd-nspawn", "-q", "-D", layers["root"], "--register=no", "--keep-unit"]
        + ["-M", f"loam-init-test-{os.getpid()}", "--private-network"]
        + ["--resolv-conf=off", "/usr/local/sbin/loam-init"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        status = "http://127.0.0.1:8888/instances/42/jupyter/api/status"
        probe = (
            "for i in $(seq 120); do "
            f"curl -fsS -H 'Authorization: token s3cret' {status} && exit 0; sleep 0.5; done; "
            "exit 1"
        )
        leader = _leader(nspawn.pid)
        answer = subprocess.run(
            ["nsenter", "-t", str(leader), "-n", "-m", "-p", "sh", "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert answer.returncode == 0, (layers["upper"] / "var/log/jupyter.log").read_text()
        assert json.loads(answer.stdout.splitlines()[-1])["started"]
        unauthorized = subprocess.run(
            [
                "nsenter",
                "-t",
                str(leader),
                "-n",
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                status,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert unauthorized.stdout == "403"
        processes = subprocess.run(
            ["nsenter", "-t", str(leader), "-m", "-p", "ps", "-eo", "args"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "sshd" in processes.splitlines()[1]  # PID 1 became sshd
        assert "tensorboard" not in processes
    finally:
        os.killpg(nspawn.pid, signal.SIGKILL)
        nspawn.wait(timeout=30)
        subprocess.run(["umount", "-l", layers["root"]], check=False)


def _leader(nspawn_pid: int) -> int:
    """The container's PID 1, once nspawn has started it."""
    for _ in range(100):
        children = subprocess.run(
            ["pgrep", "-P", str(nspawn_pid)], capture_output=True, text=True
        ).stdout.split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise AssertionError("the container did not start")
