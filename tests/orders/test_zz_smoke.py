from apps.orders.models import Instance
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver


def test_smoke(order_hosts, world, monkeypatch):
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_eager_propagates", False)
    (o,) = order_hosts(2)
    i = Instance.objects.get(pk=o.instance_id)
    print(o.state, i.state, i.access, i.node, world.free_accelerators())
    SimulatorDriver.fail_next(
        BackendError("slow", transient=True), BackendError("slow", transient=True)
    )
    (o,) = order_hosts(1, name="b")
    i = Instance.objects.get(pk=o.instance_id)
    print(o.state, i.state, i.access, i.node, world.free_accelerators())
    SimulatorDriver.fail_next(*[BackendError("slow", transient=True)] * 6)
    (o,) = order_hosts(1, name="c")
    i = Instance.objects.get(pk=o.instance_id)
    print(o.state, o.reason, i.state, i.error_message, i.node, world.free_accelerators())
