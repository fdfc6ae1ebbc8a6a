"""The demo park: what `manage.py seed_demo` creates. Facts only; the command does the writing."""

import csv
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

# stack, code, name, operating system, stack version, accelerator models it supports
IMAGES = [
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
