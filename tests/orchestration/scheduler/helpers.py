"""Small builders shared by the scheduler tests."""

from apps.orchestration.scheduler.model import NodeState, TaskRequest


def node(id="n", gpus=(1000, 1000), model="X", cpu=32000, mem=131072, **kw) -> NodeState:
    return NodeState(
        id=id, cpu_milli_total=cpu, memory_mib_total=mem, gpu_free=list(gpus), gpu_model=model, **kw
    )


def task(id="t", cpu=1000, mem=1024, num_gpu=1, gpu_milli=1000, **kw) -> TaskRequest:
    return TaskRequest(
        id=id, cpu_milli=cpu, memory_mib=mem, num_gpu=num_gpu, gpu_milli=gpu_milli, **kw
    )
