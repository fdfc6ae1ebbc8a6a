"""The NVIDIA reader against the fake libnvidia-ml.so.1, loaded by the real pynvml in a
separate agent process (pynvml loads the library once per process)."""

import json
import subprocess
import sys

from tests.agent.conftest import run_agent


def inventory(env) -> dict:
    result = run_agent("inventory", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def reader(report: dict, vendor: str) -> dict:
    return next(status for status in report["readers"] if status["vendor"] == vendor)


def test_cards_and_their_figures_come_from_nvml(fake_nvml_dir, agent_env):
    report = inventory(
        agent_env(
            fake_nvml_dir,
            FAKE_NVML_GPUS="3",
            FAKE_NVML_UTIL="37,0,100",
            FAKE_NVML_POWER_W="250,61,400",
            FAKE_NVML_TEMP_C="55,40,81",
            FAKE_NVML_MEM_TOTAL_MIB="40960",
            FAKE_NVML_MEM_USED_MIB="2048,0,40000",
        )
    )

    assert reader(report, "nvidia") == {
        "vendor": "nvidia",
        "state": "ok",
        "message": "driver 550.54.15-fake",
    }
    assert [card["index"] for card in report["cards"]] == [0, 1, 2]
    first = report["cards"][0]
    assert first["model"] == "NVIDIA A100-SXM4-80GB (fake 0)"
    assert first["memory_total_mib"] == 40960
    assert first["device_path"] == "/dev/nvidia0"
    assert first["uuid"] == "GPU-fa4e0000-0000-0000-0000-000000000000"
    figures = {
        sample["uuid"][-1]: (
            sample["utilization_pct"],
            sample["memory_used_mib"],
            sample["power_w"],
            sample["temperature_c"],
        )
        for sample in report["samples"]
    }
    assert figures == {
        "0": (37, 2048, 250.0, 55),
        "1": (0, 0, 61.0, 40),
        "2": (100, 40000, 400.0, 81),
    }


def test_ecc_not_supported_is_an_absent_figure_not_a_failure(fake_nvml_dir, agent_env):
    report = inventory(agent_env(fake_nvml_dir, FAKE_NVML_GPUS="1"))

    [sample] = report["samples"]
    assert sample["ecc_errors_uncorrected"] is None
    assert sample["health"] == "ok"


def test_uncorrected_ecc_errors_mark_the_card_unhealthy(fake_nvml_dir, agent_env):
    report = inventory(
        agent_env(fake_nvml_dir, FAKE_NVML_GPUS="2", FAKE_NVML_ECC_UNCORRECTED="0,3")
    )

    health = [(s["ecc_errors_uncorrected"], s["health"]) for s in report["samples"]]
    assert health == [(0, "ok"), (3, "ecc_errors")]


def test_a_card_that_never_answered_is_left_out_and_the_others_still_report(
    fake_nvml_dir, agent_env
):
    report = inventory(agent_env(fake_nvml_dir, FAKE_NVML_GPUS="3", FAKE_NVML_LOST="1"))

    assert [card["index"] for card in report["cards"]] == [0, 2]
    assert len(report["samples"]) == 2


def test_a_card_lost_while_running_stays_listed_and_is_reported_unreachable(
    fake_nvml_dir, agent_env
):
    # The fake reads its environment on every call, so the card can be lost mid-process.
    script = """
import json, os
from loam_agent.readers.nvidia import NvidiaReader
reader = NvidiaReader()
reader.inventory()
os.environ["FAKE_NVML_LOST"] = "1"
print(json.dumps({
    "cards": [card.uuid for card in reader.inventory()],
    "samples": [(sample.uuid, sample.health, sample.health_message) for sample in reader.sample()],
}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=agent_env(fake_nvml_dir, FAKE_NVML_GPUS="2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr

    after = json.loads(result.stdout)
    uuids = ["GPU-fa4e0000-0000-0000-0000-000000000000", "GPU-fa4e0000-0000-0000-0000-000000000001"]
    assert after["cards"] == uuids
    assert after["samples"] == [[uuids[0], "ok", ""], [uuids[1], "unreachable", "GPU is lost"]]


def test_nvml_init_error_is_a_status_with_no_cards(fake_nvml_dir, agent_env):
    # 9 is NVML_ERROR_DRIVER_NOT_LOADED.
    report = inventory(agent_env(fake_nvml_dir, FAKE_NVML_INIT_ERROR="9"))

    assert reader(report, "nvidia")["state"] == "init_error"
    assert "Driver Not Loaded" in reader(report, "nvidia")["message"]
    assert report["cards"] == report["samples"] == []


def test_without_the_nvml_library_it_says_no_driver_and_exits_0(no_nvml_dir, agent_env):
    result = run_agent("inventory", env=agent_env(no_nvml_dir))

    assert result.returncode == 0, result.stderr
    assert "library_missing" in result.stdout
    assert "no NVIDIA driver" in result.stdout
    assert "Cards: 0" in result.stdout
    assert "Traceback" not in result.stderr


def test_the_plain_inventory_prints_each_card_and_its_figures(fake_nvml_dir, agent_env):
    result = run_agent(
        "inventory", env=agent_env(fake_nvml_dir, FAKE_NVML_GPUS="1", FAKE_NVML_UTIL="42")
    )

    assert result.returncode == 0, result.stderr
    assert "Cards: 1" in result.stdout
    assert "NVIDIA A100-SXM4-80GB (fake 0)" in result.stdout
    assert "util 42%" in result.stdout
    assert "uncorrected ECC n/a" in result.stdout
