import pytest

from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.registry import driver_names, get_driver


def test_simulator_is_registered_and_labelled():
    assert "simulator" in driver_names()
    driver = get_driver("simulator", {})
    assert driver.is_simulator is True
    assert driver.capacity() == []


def test_simulator_reports_configured_capacity():
    config = {
        "pools": [
            {
                "name": "p1",
                "accelerator_model": "h200-sxm",
                "nodes": [{"hostname": "n1", "accelerators": 8, "vcpu": 200, "ram_gb": 2000}],
            }
        ]
    }
    [pool] = get_driver("simulator", config).capacity()
    assert pool.name == "p1"
    [node] = pool.nodes
    assert (node.hostname, node.accelerators, node.vcpu, node.ram_gb) == ("n1", 8, 200, 2000)
    assert node.telemetry == {"simulated": True}


def test_simulator_refuses_a_broken_config():
    with pytest.raises(BackendError, match="invalid"):
        get_driver("simulator", {"pools": [{"name": "p1"}]}).capacity()


def test_unknown_driver_names_the_known_ones():
    with pytest.raises(BackendError, match="simulator"):
        get_driver("no-such-driver", {})
