"""The training queue: priority, fair share between organisations, backfill with a held node."""

from apps.orchestration.scheduler.queue import (
    charge,
    fair_order,
    plan,
    queue_positions,
    schedule_queue,
)

from .helpers import node, task


def queued(id, org, t, **kw):
    kw.setdefault("num_gpu", 1)
    return task(id, organization=org, submitted_at=t, **kw)


def test_priority_first_then_arrival():
    tasks = [
        queued("low-early", "a", 1, priority=0),
        queued("high-late", "a", 5, priority=10),
        queued("low-late", "a", 9, priority=0),
    ]
    assert [t.id for t in fair_order(tasks)] == ["high-late", "low-early", "low-late"]


def test_a_flood_does_not_starve_another_organisation():
    flood = [queued(f"a{i}", "a", i) for i in range(100)]
    late = queued("b0", "b", 1000)
    order = [t.id for t in fair_order([*flood, late])]
    assert order.index("b0") <= 1  # right after a's first task, not after a's hundredth
    assert queue_positions([*flood, late])["b0"] == 2
    # Placed in the first round on a small cluster: 4 GPUs, 101 tasks waiting.
    started = [t.id for t, _ in plan([*flood, late], [node("n1"), node("n2")])]
    assert len(started) == 4 and "b0" in started


def test_fair_share_counts_past_usage():
    tasks = [queued("a0", "a", 0), queued("b0", "b", 5)]
    # a used 10 GPU-hours lately, b none: b goes first although it came later.
    assert [t.id for t in fair_order(tasks, {"a": 36000.0})] == ["b0", "a0"]
    assert [t.id for t in fair_order(tasks)] == ["a0", "b0"]


def test_fair_share_is_usage_over_shares():
    tasks = [queued("a0", "a", 0), queued("b0", "b", 5)]
    # a used twice what b used, but holds three shares to b's one: a is further from its share.
    usage = {"a": 7200.0, "b": 3600.0}
    assert [t.id for t in fair_order(tasks, usage)] == ["b0", "a0"]
    assert [t.id for t in fair_order(tasks, usage, shares={"a": 3})] == ["a0", "b0"]


def test_an_organization_with_two_shares_takes_two_turns_to_one():
    a = [queued(f"a{i}", "a", i) for i in range(12)]
    b = [queued(f"b{i}", "b", i) for i in range(12)]
    order = [t.id for t in fair_order(a + b, shares={"a": 2})]
    assert [t[0] for t in order[:12]].count("a") == 8  # two of every three turns
    assert [t[0] for t in fair_order_ids(a + b)[:12]].count("a") == 6


def fair_order_ids(tasks, **kw):
    return [t.id for t in fair_order(tasks, **kw)]


def test_turns_follow_usage_not_task_count():
    big = [queued(f"big{i}", "a", i, num_gpu=4) for i in range(3)]
    small = [queued(f"small{i}", "b", i, num_gpu=1) for i in range(8)]
    order = [t.id for t in fair_order(big + small)]
    # One 4-GPU task of a is worth four 1-GPU tasks of b.
    assert order[:6] == ["big0", "small0", "small1", "small2", "small3", "big1"]
    assert charge(big[0]) == 4 * 3600 and charge(task(num_gpu=0, cpu=2000)) == 2 * 3600


def test_backfill_runs_a_small_task_behind_a_blocked_head():
    n1 = node("n1", gpus=(0, 1000))  # one GPU free
    n2 = node("n2", gpus=(0, 0, 1000, 1000))  # two free of four
    head = queued("head", "a", 0, num_gpu=4)
    small = queued("small", "b", 1, num_gpu=1)
    result = schedule_queue([head, small], [n1, n2])
    assert [t.id for t, _ in result.started] == ["small"]
    assert result.backfilled == ["small"]
    assert [t.id for t in result.waiting] == ["head"]
    # The head holds n2 (closest to four free GPUs); small went around it to n1.
    assert result.reserved == {"head": "n2"}
    assert result.started[0][1].node.id == "n1"
    assert n1.gpu_free == [0, 1000]  # the caller's nodes are untouched


def test_backfill_never_takes_the_held_node():
    n2 = node("n2", gpus=(0, 0, 1000, 1000))
    head = queued("head", "a", 0, num_gpu=4)
    smalls = [queued(f"s{i}", "b", i + 1) for i in range(3)]
    result = schedule_queue([head, *smalls], [n2])
    # Room for two small ones on n2, but n2 is held for the head: nothing jumps ahead.
    assert result.started == [] and result.reserved == {"head": "n2"}


def test_impossible_tasks_do_not_block_the_queue():
    n = node("n1", gpus=(1000, 1000), model="T4")
    never = queued("never", "a", 0, num_gpu=1, gpu_models={"A100"})
    ok = queued("ok", "b", 1)
    result = schedule_queue([never, ok], [n])
    assert result.impossible == {"never": "gpu_model"}
    assert [t.id for t, _ in result.started] == ["ok"] and result.reserved == {}
