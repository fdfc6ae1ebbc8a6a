"""Finding the server's NVIDIA driver user space, as nvidia-container-toolkit does."""

import shutil
import subprocess
from pathlib import Path

import pytest
from loam_agent.hosts.gpu_userspace import discover, driver_libraries

from tests.agent.conftest import FAKE_NVML_SOURCE


@pytest.fixture
def driver(tmp_path) -> Path:
    """A driver's library folder: real files and their soname links, as the installer leaves."""
    folder = tmp_path / "lib"
    folder.mkdir()
    for real, links in {
        "libcuda.so.550.54.15": ("libcuda.so.1", "libcuda.so"),
        "libnvidia-ml.so.550.54.15": ("libnvidia-ml.so.1",),
        "libnvidia-ptxjitcompiler.so.550.54.15": ("libnvidia-ptxjitcompiler.so.1",),
        "libcudadebugger.so.550.54.15": ("libcudadebugger.so.1",),
        "libnvidia-egl-gbm.so.1.1.1": ("libnvidia-egl-gbm.so.1",),  # graphics: not for compute
        "libcudart.so.12.4.127": ("libcudart.so.12",),  # the toolkit's, not the driver's
    }.items():
        (folder / real).write_bytes(b"\x7fELF")
        for link in links:
            (folder / link).symlink_to(real)
    return folder


def listing(folder: Path, *names: str, flags: str = "libc6,x86-64") -> str:
    lines = [f"{len(names)} libs found in cache `/etc/ld.so.cache'"]
    lines += [f"\t{name} ({flags}) => {folder / name}" for name in names]
    return "\n".join(lines) + "\n"


def test_the_drivers_compute_and_utility_libraries_are_found_with_their_real_files(driver):
    output = listing(
        driver,
        "libcuda.so.1",
        "libcuda.so",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        "libcudadebugger.so.1",
        "libnvidia-egl-gbm.so.1",
        "libcudart.so.12",
        "libc.so.6",
    )
    assert driver_libraries(output, "x86_64") == [
        str(driver / "libcuda.so.1"),
        str(driver / "libcuda.so.550.54.15"),
        str(driver / "libcuda.so"),
        str(driver / "libnvidia-ml.so.1"),
        str(driver / "libnvidia-ml.so.550.54.15"),
        str(driver / "libnvidia-ptxjitcompiler.so.1"),
        str(driver / "libnvidia-ptxjitcompiler.so.550.54.15"),
        str(driver / "libcudadebugger.so.1"),
        str(driver / "libcudadebugger.so.550.54.15"),
    ]


def test_32_bit_libraries_and_vanished_files_are_left_out(driver):
    output = listing(driver, "libcuda.so.1", flags="libc6") + listing(
        driver / "gone", "libnvidia-ml.so.1"
    )
    assert driver_libraries(output, "x86_64") == []
    assert driver_libraries(listing(driver, "libcuda.so.1", flags="libc6,AArch64"), "aarch64")


def test_a_server_without_a_driver_has_nothing_to_bind(tmp_path):
    """This machine's own loader cache (no NVIDIA driver here) and an empty PATH."""
    if any("nvidia" in line for line in subprocess.run(
        ["ldconfig", "-p"], capture_output=True, text=True
    ).stdout.splitlines()):  # fmt: skip
        pytest.skip("this machine has an NVIDIA driver")
    found = discover(search_path=str(tmp_path))
    assert (found.files, found.library_dirs) == ((), ())


def test_a_driver_in_a_loader_cache_and_its_tools_on_path_are_what_a_host_gets(tmp_path):
    """The fake libnvidia-ml installed as a driver is: a real file with its soname link, in a
    folder a loader cache lists (here a cache of the test's own, not the system's)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed, so the fake libnvidia-ml can't be built")
    driver = tmp_path / "lib"
    driver.mkdir()
    real = driver / "libnvidia-ml.so.550.54.15"
    soname = "-Wl,-soname,libnvidia-ml.so.1"
    subprocess.run([gcc, "-shared", "-fPIC", soname, "-o", real, FAKE_NVML_SOURCE], check=True)
    (driver / "libnvidia-ml.so.1").symlink_to(real.name)
    (tmp_path / "ld.so.conf").write_text(f"{driver}\n")
    subprocess.run(
        ["ldconfig", "-X", "-C", tmp_path / "ld.so.cache", "-f", tmp_path / "ld.so.conf"],
        check=True,
    )
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\n")
    (tools / "nvidia-smi").chmod(0o755)

    found = discover(tmp_path / "ld.so.cache", search_path=str(tools))

    assert found.files == (str(driver / "libnvidia-ml.so.1"), str(real), str(tools / "nvidia-smi"))
    assert found.library_dirs == (str(driver),)
