"""The simulator's model of the work on its nodes (backends/simulated_load.py): a card reads what
its holder does with it, nobody's card reads 0 %, and a host's figures follow from the cards it
holds: the same readings the node's telemetry reports (issue 35)."""

from datetime import UTC, datetime

from apps.orchestration.backends.base import HostLoad
from apps.orchestration.backends.simulated_load import LoadModel
from apps.orchestration.backends.simulator import SimulatorDriver

MINUTE = int(datetime(2026, 12, 5, 10, 30, tzinfo=UTC).timestamp() // 60)


def load(indices=(0, 1), **changes) -> HostLoad:
    values = {
        "handle": "sim-0123456789ab",
        "node": "sim-1",
        "accelerator_indices": tuple(indices),
        "vcpu": 16,
        "ram_gb": 128,
        "disk_gb": 500,
        "bandwidth_mbps": 100,
        "card_memory_mib": 80 * 1024,
        "card_tdp_w": 700,
        **changes,
    }
    return HostLoad(**values)


def test_a_card_nobody_holds_reads_zero_whatever_its_draw():
    busy = LoadModel(seed=7, idle_share=0.0)
    for index in range(8):
        assert busy.card_utilization("sim-1", index, held=False, minute=MINUTE) == 0.0
        assert busy.card_utilization("sim-1", index, held=True, minute=MINUTE) >= 20


def test_a_held_card_is_idle_or_busy_by_a_stable_draw_and_a_busy_one_moves():
    model = LoadModel(seed=7, idle_share=0.5)
    readings = {
        index: [
            model.card_utilization("sim-1", index, held=True, minute=MINUTE + m) for m in range(120)
        ]
        for index in range(16)
    }
    idle = [index for index, values in readings.items() if max(values) <= 2]
    busy = [index for index, values in readings.items() if min(values) >= 20]
    assert idle and busy and sorted(idle + busy) == list(range(16))  # each is one or the other
    assert all(len(set(readings[index])) == 1 for index in idle)  # idle stays idle
    assert all(len(set(readings[index])) > 10 for index in busy)  # busy swings over two hours
    # The same card at the same minute reads the same, every time.
    again = LoadModel(seed=7, idle_share=0.5)
    assert (
        again.card_utilization("sim-1", busy[0], held=True, minute=MINUTE) == readings[busy[0]][0]
    )


def test_a_scripted_reading_wins_held_or_not():
    model = LoadModel(scripted={"sim-1": {3: 55.0}})
    assert model.card_utilization("sim-1", 3, held=False, minute=MINUTE) == 55.0
    assert model.card_utilization("sim-1", 3, held=True, minute=MINUTE) == 55.0


def test_telemetry_reads_a_node_with_no_card_held_as_idle():
    driver = SimulatorDriver({"idle_share": 0})
    (idle,) = driver.telemetry({"sim-1": 8}, {"sim-1": frozenset()})
    assert [card.utilization_pct for card in idle.accelerators] == [0.0] * 8

    (two,) = driver.telemetry({"sim-1": 8}, {"sim-1": frozenset({2, 5})})
    readings = {card.index: card.utilization_pct for card in two.accelerators}
    assert readings[2] >= 20 and readings[5] >= 20
    assert [readings[i] for i in (0, 1, 3, 4, 6, 7)] == [0.0] * 6


def test_telemetry_without_held_counts_every_card_as_held():
    (reading,) = SimulatorDriver({"idle_share": 0}).telemetry({"sim-1": 4})
    assert all(card.utilization_pct >= 20 for card in reading.accelerators)


def test_a_hosts_gpu_is_the_mean_of_what_its_cards_read_on_the_node():
    model = LoadModel(seed=3, idle_share=0.3)
    figures = model.host_figures(load((1, 4, 6)), MINUTE)
    cards = [model.card_utilization("sim-1", i, held=True, minute=MINUTE) for i in (1, 4, 6)]
    assert figures.gpu_count == 3 and figures.simulated
    assert abs(figures.gpu_utilization_pct - sum(cards) / 3) <= 0.05
    assert figures.gpu_memory_total_mib == 3 * 80 * 1024
    assert 0 < figures.gpu_memory_used_mib <= figures.gpu_memory_total_mib
    # Power: between the cards' idle draw and their TDP.
    assert 3 * 700 * 0.15 <= figures.power_w <= 3 * 700


def test_a_host_without_cards_reads_zero_on_its_gpu():
    figures = LoadModel(seed=3).host_figures(load(()), MINUTE)
    assert figures.gpu_count == 0
    assert figures.gpu_utilization_pct == 0.0 and figures.gpu_memory_used_mib == 0
    assert figures.power_w == 0.0


def test_a_hosts_figures_stay_within_its_shape():
    model = LoadModel(seed=11, idle_share=0.0)
    for minute in range(MINUTE, MINUTE + 600, 7):
        figures = model.host_figures(load((0, 1, 2, 3), bandwidth_mbps=50), minute)
        assert 0 <= figures.cpu_pct <= 100
        assert 0 < figures.memory_used_mib <= figures.memory_limit_mib == 128 * 1024
        assert 0 <= figures.disk_used_mib <= figures.disk_size_mib == 500 * 1024
        line = 50 * 1_000_000 / 8
        assert 0 <= figures.net_tx_bytes_per_s <= figures.net_rx_bytes_per_s <= line


def test_an_idle_host_idles_on_every_chart():
    busy = LoadModel(seed=5, idle_share=0.0).host_figures(load(), MINUTE)
    idle = LoadModel(seed=5, idle_share=1.0).host_figures(load(), MINUTE)
    assert idle.gpu_utilization_pct <= 2 < 20 <= busy.gpu_utilization_pct
    assert idle.cpu_pct < busy.cpu_pct and idle.power_w < busy.power_w
    assert idle.net_rx_bytes_per_s < busy.net_rx_bytes_per_s


def test_host_metrics_answers_for_the_minute_asked():
    driver = SimulatorDriver({"seed": 9, "idle_share": 0})
    at = datetime(2026, 12, 5, 10, 30, 42, tzinfo=UTC)
    (figures,) = driver.host_metrics([load()], at)
    assert figures == LoadModel(seed=9, idle_share=0).host_figures(load(), MINUTE)
