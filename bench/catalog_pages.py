"""Catalog and operator overview: queries and time per render as the park grows.

    python bench/catalog_pages.py [--scales 1,4,16] [--repeat 20] [--json]

Builds the demo park in a throwaway SQLite database (or DATABASE_URL's, if set, which must be
an empty scratch database), multiplies its nodes by each scale, and renders `/catalog/` and
`/ops/` through the test client. Query counts must not grow with the data.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,4,16")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="loam-bench-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch}/bench.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from apps.operations import demo
    from apps.orchestration.models import Node
    from apps.orchestration.services import register_node

    setup_test_environment()
    settings.STORAGES["staticfiles"] = {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
    }
    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=StringIO())
    client = Client()
    client.login(username=demo.OPERATOR["email"], password=demo.OPERATOR["password"])
    base_nodes = list(Node.objects.select_related("pool"))

    results = []
    for scale in (int(s) for s in args.scales.split(",")):
        for copy in range(1, scale):
            for node in base_nodes:
                register_node(
                    pool=node.pool,
                    hostname=f"{node.hostname}-x{copy}",
                    accelerators=node.accelerators.count(),
                    vcpu=node.vcpu_total,
                    ram_gb=node.ram_gb_total,
                )
        for path in ("/catalog/", "/ops/"):
            timings = []
            for _ in range(args.repeat):
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    response = client.get(path)
                    timings.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            results.append(
                {
                    "path": path,
                    "nodes": Node.objects.count(),
                    "queries": len(queries),
                    "median_ms": round(statistics.median(timings), 2),
                }
            )

    if args.json:
        print(json.dumps({"database": connection.vendor, "results": results}, indent=2))
        return
    print(f"database: {connection.vendor}, {args.repeat} renders per row")
    print(f"{'path':<12}{'nodes':>7}{'queries':>9}{'median ms':>11}")
    for row in results:
        print(f"{row['path']:<12}{row['nodes']:>7}{row['queries']:>9}{row['median_ms']:>11}")


if __name__ == "__main__":
    main()
