"""Portal scoring: each part decides under its preset, weights blend, decisions explain."""

import pytest

from apps.orchestration.scheduler import filters
from apps.orchestration.scheduler.fragmentation import ShapeDistribution
from apps.orchestration.scheduler.scoring import (
    PARTS,
    PRESETS,
    Weights,
    combine,
    decide,
    place,
)

from .helpers import node, task


def pools():
    """Three otherwise equal 2-GPU nodes, each best at one thing."""
    common = dict(gpus=(1000, 1000), cpu=64000, mem=262144)
    return [
        node(
            "fast",
            perf_units_per_gpu=3.0,
            price_per_hour_minor=4000,
            watts_per_unit=200,
            pue=1.5,
            carbon_g_per_kwh=600,
            latency_ms=5,
            region="sh",
            **common,
        ),
        node(
            "cheap",
            perf_units_per_gpu=1.0,
            price_per_hour_minor=1200,
            watts_per_unit=300,
            pue=1.5,
            carbon_g_per_kwh=600,
            latency_ms=5,
            region="sh",
            **common,
        ),
        node(
            "green",
            perf_units_per_gpu=1.0,
            price_per_hour_minor=3000,
            watts_per_unit=300,
            pue=1.1,
            carbon_g_per_kwh=50,
            latency_ms=5,
            region="sh",
            **common,
        ),
    ]


@pytest.mark.parametrize("preference", ["fast", "cheap", "green"])
def test_each_preset_picks_its_pool(preference):
    decision = decide(task(num_gpu=1, preference=preference), pools())
    assert decision.node.id == preference


def test_lower_latency_region_preferred():
    near = node("near", latency_ms=4, region="hz")
    far = node("far", latency_ms=60, region="bj")
    assert decide(task(), [far, near], weights=Weights(1, 0, 0, 0, 0)).node.id == "near"
    # A preferred region outweighs a few ms of latency.
    got = decide(task(), [far, near], weights=Weights(1, 0, 0, 0, 0), preferred_regions=["bj"])
    assert got.node.id == "far"


def test_fragmentation_part_prefers_filling_a_used_node():
    dist = ShapeDistribution({(1000, 0, 2, 1000, frozenset()): 1})
    idle = node("idle", gpus=(1000, 1000))
    used = node("used", gpus=(0, 1000))
    d = decide(task(num_gpu=1), [idle, used], weights=Weights(0, 0, 0, 0, 1), distribution=dist)
    assert d.node.id == "used"
    raw = {c.node_id: c.raw["frag_delta"] for c in d.candidates}
    # Idle: the 2-GPU type then cannot fit, 1000 milli stranded. Used: the last GPU goes, 0.
    assert raw == {"idle": 1000.0, "used": -1000.0}


def test_parts_are_normalised_across_candidates():
    d = decide(task(), pools())
    feasible = [c for c in d.candidates if c.rejected is None]
    for part in PARTS:
        values = [c.parts[part] for c in feasible]
        assert all(0.0 <= v <= 1.0 for v in values)
        assert max(values) == 1.0
    price = {c.node_id: c.parts["price"] for c in feasible}
    assert price == {"fast": 0.0, "cheap": 1.0, "green": pytest.approx(1000 / 2800)}
    # Every candidate is equal on fragmentation here (no distribution): all 1.
    assert {c.parts["fragmentation"] for c in feasible} == {1.0}
    assert sum(d.weights.as_dict().values()) == pytest.approx(1.0)


def test_rejected_candidates_carry_their_reason():
    nodes = pools() + [node("drained", drained=True), node("t4", model="T4")]
    d = decide(task(gpu_models={"X"}), nodes)
    rejected = {c.node_id: c.rejected for c in d.candidates if c.rejected}
    assert rejected == {"drained": filters.DRAINED, "t4": filters.GPU_MODEL}
    assert all(c.total is None for c in d.candidates if c.rejected)


def test_combine_blends_operator_and_tenant():
    operator = Weights(region=0, performance=0, energy=0, price=0, fragmentation=1)
    w = combine(operator, "cheap", operator_share=0.5)
    cheap = PRESETS["cheap"].normalized()
    assert w.fragmentation == pytest.approx(0.5 + 0.5 * cheap.fragmentation)
    assert w.price == pytest.approx(0.5 * cheap.price)
    assert combine(operator, "cheap", operator_share=1.0) == operator.normalized()
    assert combine(None, "green") == PRESETS["green"].normalized()
    with pytest.raises(ValueError):
        combine(None, "luxury")
    with pytest.raises(ValueError):
        Weights(price=-1)


def test_operator_weights_can_override_a_tenant_preference():
    operator = Weights(region=0, performance=0, energy=10, price=0, fragmentation=0)
    t = task(preference="cheap")
    assert decide(t, pools()).node.id == "cheap"
    assert decide(t, pools(), operator=operator, operator_share=0.9).node.id == "green"


def test_explanation_names_the_top_two_reasons():
    nodes = pools()
    nodes[1].gpu_free = [0, 1000]  # "cheap" is half used: filling it strands nothing
    dist = ShapeDistribution({(1000, 0, 2, 1000, frozenset()): 1})
    d = decide(task(preference="cheap"), nodes, distribution=dist, currency="¥")
    assert d.reasons() == [
        {
            "part": "price",
            "code": "cheapest",
            "best": True,
            "value": 1200.0,
            "text": "lowest price (¥12.00/h)",
        },
        {
            "part": "fragmentation",
            "code": "least_fragmentation",
            "best": True,
            "value": -1000.0,
            "text": "lowest fragmentation",
        },
    ]
    assert d.explain() == "cheap: lowest price (¥12.00/h) and lowest fragmentation"
    assert d.as_dict()["explanation"] == d.explain()


def test_explanation_leaves_out_parts_where_everyone_is_equal():
    # Same latency and no fragmentation data: only what set the winner apart is said.
    assert decide(task(preference="fast"), pools()).explain() == (
        "fast: fastest accelerators (3 units per GPU)"
    )
    green = decide(task(preference="green"), pools())
    assert green.reasons()[0]["code"] == "greenest"
    assert (
        green.explain() == "green: lowest carbon (16 g CO2e per unit-hour) and low price (¥30.00/h)"
    )


def test_explanation_when_nothing_fits():
    d = decide(task(num_gpu=4), [node("a"), node("b"), node("c", drained=True)])
    assert d.node is None and d.chosen is None
    assert d.rejected_counts() == {"gpu_count": 2, "drained": 1}
    assert d.reasons()[0]["code"] == "gpu_count"
    assert d.explain() == (
        "No node can take t (2 node(s): not enough whole GPUs free; "
        "1 node(s): the node is drained for maintenance)"
    )


def test_single_candidate_and_place():
    only = node("only", gpus=(1000, 400))
    d = decide(task(num_gpu=1, gpu_milli=300), [only, node("full", gpus=(0, 0))])
    assert d.explain().startswith("only: the only node that fits")
    p = place(task(num_gpu=1, gpu_milli=300), d)
    assert p.gpu_indices == (1,) and only.gpu_free == [1000, 100]


def test_alike_nodes_are_scored_once_and_each_gets_its_own_candidate():
    distribution = ShapeDistribution({(1000, 0, 2, 1000, frozenset()): 1})
    fuller = dict(gpus=(1000, 0), cpu=64000, mem=262144, region="sh")
    empty = dict(gpus=(1000, 1000), cpu=64000, mem=262144, region="sh")
    # Cards listed in another order are still alike: which card is free does not matter.
    nodes = [
        node("empty-1", **empty),
        node("fuller-1", **fuller),
        node("full", gpus=(0, 0), cpu=64000, mem=262144, region="sh"),
        node("empty-2", **empty),
        node("fuller-2", gpus=(0, 1000), cpu=64000, mem=262144, region="sh"),
        node("far", **empty, latency_ms=40),
    ]
    t = task(num_gpu=1)
    d = decide(t, nodes, distribution=distribution)
    by_id = {c.node_id: c for c in d.candidates}
    assert [c.node_id for c in d.candidates] == [n.id for n in nodes]
    assert d.node.id == "fuller-1"  # best fit, and the first of its kind
    assert by_id["fuller-2"].total == by_id["fuller-1"].total
    assert by_id["fuller-2"].parts == by_id["fuller-1"].parts
    assert by_id["fuller-2"].parts is not by_id["fuller-1"].parts  # each its own
    assert by_id["empty-2"].total == by_id["empty-1"].total < by_id["fuller-1"].total
    assert by_id["full"].rejected == filters.GPU_COUNT and by_id["full"].total is None
    assert by_id["far"].total < by_id["empty-1"].total
    # The same figures as a decision over one node of each kind.
    distinct = decide(t, [nodes[0], nodes[1], nodes[2], nodes[5]], distribution=distribution)
    for candidate in distinct.candidates:
        assert by_id[candidate.node_id].total == candidate.total
        assert by_id[candidate.node_id].parts == candidate.parts


def issue_35_park():
    """The park where a balanced 1-card task went to an H200 at ¥38/h: the H200 node is half
    used (filling it fragments least) and draws the least power per unit of work, the L40S and
    A100 nodes are empty."""
    common = dict(cpu=64000, mem=262144, region="sh", latency_ms=5, pue=1.3)
    return [
        node("h200", gpus=(0, 0, 0, 0, 1000, 1000, 1000, 1000), model="H200",
             perf_units_per_gpu=9.89, price_per_hour_minor=3800, watts_per_unit=70.8,
             carbon_g_per_kwh=550, **common),
        node("l40s", gpus=(1000,) * 8, model="L40S", perf_units_per_gpu=3.62,
             price_per_hour_minor=828, watts_per_unit=96.7, carbon_g_per_kwh=550, **common),
        node("a100", gpus=(1000,) * 8, model="A100", perf_units_per_gpu=3.12,
             price_per_hour_minor=1800, watts_per_unit=128.2, carbon_g_per_kwh=550, **common),
    ]  # fmt: skip


def issue_35_distribution():
    return ShapeDistribution({(1000, 0, 8, 1000, frozenset()): 1})


def test_balanced_never_pays_much_more_for_the_same_work():
    """At ¥38/h for 9.89 units the H200's work costs 1.7x the L40S's (¥8.28/h for 3.62 units):
    balanced does not choose it, whatever it gains on carbon and fragmentation; the A100 costs
    2.5x for the same work. Fast still may."""
    balanced = decide(task(), issue_35_park(), distribution=issue_35_distribution())
    assert balanced.node.id == "l40s"
    dearer = {c.node_id for c in balanced.candidates if c.dearer}
    assert dearer == {"h200", "a100"}
    # Without the limit the H200 would have won: it leads on the other parts.
    by_id = {c.node_id: c for c in balanced.candidates}
    assert by_id["h200"].total > by_id["l40s"].total
    assert balanced.reasons()[0]["part"] == "price"

    fast = decide(task(preference="fast"), issue_35_park(), distribution=issue_35_distribution())
    assert fast.node.id == "h200" and not any(c.dearer for c in fast.candidates)


def test_balanced_takes_a_dearer_hour_that_buys_as_much_speed():
    """Within BALANCED_VALUE_LIMIT a faster, dearer hour may win on its other merits."""
    nodes = issue_35_park()
    nodes[0].price_per_hour_minor = 1400  # ¥14/h for 9.89 units: 1.4 per unit, L40S 2.3
    d = decide(task(), nodes, distribution=issue_35_distribution())
    assert d.node.id == "h200"
    # Now the L40S's cheaper hour is the dearer work, and the A100's too.
    assert {c.node_id for c in d.candidates if c.dearer} == {"l40s", "a100"}


def test_unpriced_nodes_are_not_judged_on_value():
    nodes = issue_35_park()
    nodes[1].price_per_hour_minor = 0
    d = decide(task(), nodes, distribution=issue_35_distribution())
    assert not any(c.dearer for c in d.candidates)
