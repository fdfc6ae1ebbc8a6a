"""The demo park: what `manage.py seed_demo` creates. Facts only; the command does the writing."""

import csv
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

ACCELERATORS_CSV = Path(__file__).resolve().parent.parent / "catalog" / "data" / "accelerators.csv"

VENDOR_CODES = {"NVIDIA": "nvidia", "Huawei": "huawei", "Hygon": "hygon", "Cambricon": "cambricon"}


def accelerator_rows():
    """The project's own copy of the accelerator figures (vendor data sheets, see `source`)."""
    with ACCELERATORS_CSV.open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)


PARK = {"slug": "demo", "name": "长三角公共算力园区 (Demo)"}

# code, name, level, parent code, typical latency from the park's access network
REGIONS = [
    ("sh-center", "上海算力中心", "center", None, 2),
    ("js-nanjing", "江苏省节点 · 南京", "province", "sh-center", 6),
    ("zj-hangzhou", "浙江省节点 · 杭州", "province", "sh-center", 5),
    ("js-suzhou-edge", "苏州工业园边缘站", "edge", "js-nanjing", 3),
]

# Energy facts per site: PUE, power price (fen per kWh), grid carbon intensity (g CO2 per kWh).
SITE_ENERGY = {
    "sh-center": ("1.25", 68, 580),
    "js-nanjing": ("1.32", 62, 600),
    "zj-hangzhou": ("1.28", 60, 520),
    "js-suzhou-edge": ("1.55", 80, 600),
}

# Per accelerator model: catalog prefix, vCPU and RAM (GB) per card, list price (fen per card-hour).
FAMILIES = {
    "H200 SXM": ("h200", 24, 240, 3800),
    "A100 SXM 80GB": ("a100", 16, 128, 1800),
    "L40S": ("l40s", 12, 96, 900),
    "Ascend 910B": ("ascend910b", 24, 192, 1500),
    "DCU K100-AI": ("k100ai", 16, 128, 1000),
    "MLU370-X8": ("mlu370x8", 12, 96, 700),
}
FLAVOR_SIZES = (1, 2, 4, 8)

# region code, accelerator model, node count, cards per node
POOLS = [
    ("sh-center", "H200 SXM", 2, 8),
    ("sh-center", "A100 SXM 80GB", 2, 8),
    ("js-nanjing", "Ascend 910B", 2, 8),
    ("js-nanjing", "L40S", 1, 8),
    ("zj-hangzhou", "DCU K100-AI", 2, 8),
    ("zj-hangzhou", "MLU370-X8", 1, 8),
    ("js-suzhou-edge", "L40S", 1, 4),
]
# Price multiplier per region level: provinces are cheaper than the center, the edge dearer.
LEVEL_PRICE_FACTOR = {"center": 1.0, "province": 0.92, "edge": 1.15}
DISK_GB_MONTH_MINOR = 35  # ¥0.35 per GB per month
BANDWIDTH_MBPS_MONTH_MINOR = 2300  # ¥23 per Mbps per month
NO_CARD_HOUR_MINOR = 10  # ¥0.10 an hour for a host started without its cards (无卡模式)

# stack, code, name, operating system, stack version, accelerator models it supports.
# debian-12 and pytorch are what the host agents build (agent/loam_agent/hosts/recipes/, the
# code is the recipe's name), so an agent pool of NVIDIA cards in the demo park sells them; the
# cards' user space comes from the server's driver.
IMAGES = [
    (
        "cuda",
        "debian-12",
        "Debian 12 (bookworm) · Python 3.11",
        "Debian 12",
        "server driver",
        ["H200 SXM", "A100 SXM 80GB", "L40S", "H100 SXM"],
    ),
    (
        "cuda",
        "pytorch",
        "PyTorch 2.13 · Python 3.11 · JupyterLab",
        "Debian 12",
        "server driver",
        ["H200 SXM", "A100 SXM 80GB", "L40S", "H100 SXM"],
    ),
    (
        "cuda",
        "ubuntu2204-cuda124",
        "Ubuntu 22.04 · CUDA 12.4 · PyTorch 2.5",
        "Ubuntu 22.04",
        "CUDA 12.4",
        ["H200 SXM", "A100 SXM 80GB", "L40S", "H100 SXM"],
    ),
    (
        "cann",
        "openeuler2203-cann80",
        "openEuler 22.03 · CANN 8.0 · MindSpore 2.4",
        "openEuler 22.03",
        "CANN 8.0",
        ["Ascend 910B"],
    ),
    (
        "dtk",
        "kylin-v10-dtk2404",
        "Kylin V10 · DTK 24.04 · PyTorch 2.1",
        "Kylin V10",
        "DTK 24.04",
        ["DCU K100-AI"],
    ),
    (
        "neuware",
        "ubuntu2004-neuware3",
        "Ubuntu 20.04 · Neuware 3.x · PyTorch 1.13",
        "Ubuntu 20.04",
        "Neuware 3.10",
        ["MLU370-X8"],
    ),
]

PLATFORM_ADMIN = {"email": "admin@loam.localhost", "password": "loam-admin-demo"}
OPERATOR = {"email": "operator@loam.localhost", "password": "loam-operator-demo"}
OWNER = {"email": "owner@demo-enterprise.localhost", "password": "loam-owner-demo"}
ENTERPRISE = {
    "slug": "demo-enterprise",
    "name": "演示智能科技 (Demo AI)",
    "legal_name": "演示智能科技（上海）有限公司",
    "credit_code": "91310115MA1K4ABC05",
}
# Organization quota defaults for the demo enterprise: resource -> limit.
ENTERPRISE_QUOTAS = {
    "accelerators": 16,
    "compute_units": 60,
    "vcpu": 512,
    "ram_gb": 4096,
    "disk_gb": 20000,
    "instances": 10,
}
ENTERPRISE_OPENING_BALANCE_MINOR = 500000  # ¥5,000

# --- A month of life ---------------------------------------------------------------------------
# What `seed_demo` writes through the services, as it happened: the demo enterprise's hosts,
# training tasks and money over the last month, and a new enterprise waiting for the park.
# A moment is `day(n, hh, mm)`: n days after the story's first day (local time; the story starts
# 30 days ago or earlier, so that last month has an invoice), or `ago(...)`: before now.


def day(n: int, hour: int = 0, minute: int = 0) -> tuple[str, timedelta]:
    return ("start", timedelta(days=n, hours=hour, minutes=minute))


def ago(*, days: int = 0, hours: int = 0, minutes: int = 0) -> tuple[str, timedelta]:
    return ("now", -timedelta(days=days, hours=hours, minutes=minutes))


STORY_DAYS = 30  # at least; capacity samples cover this many days back from now
# The simulator answers these during the story, and these afterwards (the live demo).
LIVE_SIMULATOR = {"latency_seconds": [1, 3], "idle_share": 0}
IDLE_READING_PCT = 0.6  # what the cards of an idle host read


@dataclass(frozen=True)
class DemoHost:
    name: str
    flavor: str
    region: str
    image: str
    ordered: tuple
    data_disk_gb: int = 0
    bandwidth_mbps: int = 0
    # (operation kind, moment), in order: stop, start, release
    later: tuple = ()
    idle_since: tuple | None = None  # its cards read idle from then on (the idle page lists it)


@dataclass(frozen=True)
class DemoTask:
    name: str
    image: str
    model: str
    cards: int
    command: str
    submitted: tuple
    minutes: int  # how long it runs on the simulator
    exit_code: int = 0


DEMO_HOSTS = [
    DemoHost(
        "infer-l40s-01",
        "l40s.1x",
        "js-nanjing",
        "ubuntu2204-cuda124",
        day(0, 11, 20),
        data_disk_gb=100,
        bandwidth_mbps=50,
        later=(("stop", day(10, 20, 0)), ("start", day(12, 9, 10))),
    ),
    DemoHost(
        "llm-sft-a100",
        "a100.4x",
        "sh-center",
        "ubuntu2204-cuda124",
        day(2, 10, 5),
        data_disk_gb=500,
        bandwidth_mbps=20,
    ),
    DemoHost(
        "pretrain-h200",
        "h200.4x",
        "sh-center",
        "ubuntu2204-cuda124",
        day(5, 9, 30),
        data_disk_gb=2000,
        later=(("release", day(7, 18, 40)),),
    ),
    DemoHost(
        "notebook-910b",
        "ascend910b.1x",
        "js-nanjing",
        "openeuler2203-cann80",
        day(8, 10, 0),
        data_disk_gb=200,
        later=(("stop", day(20, 19, 0)),),
    ),
    DemoHost(
        "dcu-eval",
        "k100ai.2x",
        "zj-hangzhou",
        "kylin-v10-dtk2404",
        day(11, 10, 30),
        later=(("release", day(14, 17, 0)),),
    ),
    DemoHost(
        "infer-edge-01",
        "l40s.1x",
        "js-suzhou-edge",
        "ubuntu2204-cuda124",
        day(15, 11, 0),
        bandwidth_mbps=100,
        idle_since=ago(hours=7),
    ),
    DemoHost(
        "mlu-bench",
        "mlu370x8.1x",
        "zj-hangzhou",
        "ubuntu2004-neuware3",
        ago(days=5, hours=3),
        idle_since=ago(hours=10),
    ),
]

DEMO_TASKS = [
    DemoTask(
        "qwen2-7b-sft",
        "ubuntu2204-cuda124",
        "A100 SXM 80GB",
        2,
        "torchrun --nproc-per-node 2 train.py --model qwen2-7b --data sft-v1",
        day(4, 11, 0),
        minutes=310,
    ),
    DemoTask(
        "bert-zh-ner",
        "ubuntu2204-cuda124",
        "L40S",
        1,
        "python finetune_ner.py --model bert-base-chinese",
        day(8, 15, 0),
        minutes=40,
        exit_code=1,
    ),
    DemoTask(
        "resnet50-mindspore",
        "openeuler2203-cann80",
        "Ascend 910B",
        4,
        "msrun --worker_num 4 train.py --net resnet50 --dataset imagenet",
        day(9, 10, 0),
        minutes=420,
    ),
    DemoTask(
        "llama-eval-dcu",
        "kylin-v10-dtk2404",
        "DCU K100-AI",
        2,
        "python eval.py --model llama-2-13b --tasks ceval,cmmlu",
        day(13, 20, 0),
        minutes=180,
    ),
    DemoTask(
        "qwen2-7b-sft-v2",
        "ubuntu2204-cuda124",
        "A100 SXM 80GB",
        2,
        "torchrun --nproc-per-node 2 train.py --model qwen2-7b --data sft-v2",
        day(17, 9, 0),
        minutes=480,
    ),
    DemoTask(
        "vit-distill",
        "ubuntu2204-cuda124",
        "L40S",
        1,
        "python distill.py --teacher vit-l --student vit-s --batch-size 512",
        day(21, 16, 0),
        minutes=90,
        exit_code=137,  # killed: out of memory
    ),
    DemoTask(
        "qwen2-7b-dpo",
        "ubuntu2204-cuda124",
        "A100 SXM 80GB",
        2,
        "torchrun --nproc-per-node 2 dpo.py --model qwen2-7b-sft-v2",
        ago(hours=2),
        minutes=360,  # still running when the seed is done
    ),
]

# The demo enterprise's money: an opening balance from the park, bank transfers credited the next
# day, and one announced yesterday, still awaiting the money.
OPENING_BALANCE_AT = day(0, 9, 0)
# (amount in minor units, announced, credited or None: still awaiting). Each of a tenant's
# transfers has an amount of its own: the seed finds it again by it.
DEMO_TRANSFERS = [
    (6_000_000, day(0, 9, 30), day(1, 10, 15)),
    (4_000_000, day(21, 10, 0), day(22, 14, 30)),
    (5_000_000, ago(days=1, hours=3), None),
]


@dataclass(frozen=True)
class DemoTenant:
    """Another enterprise of the park, from its sign-up on (its owner has no password)."""

    owner_email: str
    name: str
    legal_name: str
    credit_code: str
    signed_up: tuple
    transfer: tuple  # (amount in minor units, announced, credited)
    verification_sent: tuple
    verified: tuple | None  # None: it still awaits the operators
    hosts: tuple = ()


OTHER_TENANTS = [
    # A verified enterprise that keeps a node of Ascend and one of DCU cards busy.
    DemoTenant(
        "owner@changfeng-auto.localhost",
        "长风自动驾驶 (Demo)",
        "长风自动驾驶科技（南京）有限公司",
        "91320115MA1W8CF270",
        signed_up=day(0, 14, 0),
        transfer=(20_000_000, day(0, 15, 0), day(1, 11, 0)),
        verification_sent=day(1, 9, 30),
        verified=day(2, 16, 0),
        hosts=(
            DemoHost(
                "perception-910b",
                "ascend910b.8x",
                "js-nanjing",
                "openeuler2203-cann80",
                day(6, 10, 0),
                data_disk_gb=4000,
                bandwidth_mbps=100,
            ),
            DemoHost(
                "sim-k100",
                "k100ai.8x",
                "zj-hangzhou",
                "kylin-v10-dtk2404",
                day(9, 14, 0),
                data_disk_gb=2000,
            ),
        ),
    ),
    # A new enterprise: signed up two days ago, paid in by bank transfer, sent its business
    # licence (awaiting verification) and ordered its first host (awaiting approval: it is not
    # verified yet).
    DemoTenant(
        "owner@qinghe-vision.localhost",
        "青禾视觉 (Demo)",
        "青禾视觉科技（杭州）有限公司",
        "91330106MA2H7QK38N",
        signed_up=ago(days=2, hours=5),
        transfer=(200_000, ago(days=2, hours=4), ago(days=1, hours=20)),
        verification_sent=ago(days=1, hours=6),
        verified=None,
        hosts=(
            DemoHost(
                "vision-train-01", "l40s.1x", "js-nanjing", "ubuntu2204-cuda124", ago(hours=5)
            ),
        ),
    ),
]
