"""The catalog's reads in process: what `GET /api/v1/flavors/` and `GET /catalog/` cost without
HTTP, load or noise from other clients: milliseconds, queries and CPU per request.

    python bench/read_profile.py [--requests 200] [--nodes 360] [--profile 30] [--queries]
                                 [--scratch-db loam_bench_reads]

Builds the world `bench/load.py` reads in (a scratch PostgreSQL database on DATABASE_URL's
server, `loam_bench_reads` or `--scratch-db`, dropped first: the demo park and `--nodes` 8-card
L40S nodes, an organization with a write API key), then sends `--requests` of each read through
Django's test client with the production settings (DEBUG off, the cache CACHE_URL names, else
memory), after five to warm up. Prints per read the median and best of batches of ten, its
queries and the Python CPU a request took; `--profile N` adds cProfile's top N functions by
`--sort` (cumulative by default) for each, `--queries` lists one request's statements. Beside
them, to tell what is theirs: `GET /api/v1/regions/` (what any authenticated API list costs) and the
catalog's list of flavors alone (an htmx request: the page without its layout and filters).
"""

import argparse
import cProfile
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SCRATCH_DB = "loam_bench_reads"
BATCH = 10
# (path, who asks, extra headers)
READS = [
    ("/api/v1/flavors/", "key", {}),
    ("/api/v1/regions/", "key", {}),
    ("/catalog/", "visitor", {}),
    ("/catalog/", "visitor", {"HTTP_HX_REQUEST": "true"}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=360, help="8-card nodes added")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--sort", default="cumulative", help="cProfile's order: tottime, …")
    parser.add_argument("--queries", action="store_true", help="print one request's statements")
    parser.add_argument(
        "--scratch-db",
        default=SCRATCH_DB,
        help="the database to seed; another name lets two runs share a server",
    )
    args = parser.parse_args()

    import load  # bench/load.py: the same world

    static_root = tempfile.mkdtemp(prefix="loam-reads-static-")
    _server, env = load.scratch_database(
        "bench/read_profile.py",
        args.scratch_db,
        ALLOWED_HOSTS="testserver",
        STATIC_ROOT=static_root,
    )
    subprocess.run([*load.MANAGE, "collectstatic", "--noinput", "-v0"], env=env, check=True)

    import django

    django.setup()
    world = argparse.Namespace(nodes=args.nodes, organizations=1, clients=1, park_limit=False)
    (organization,) = load.seed(world)
    from django.test import Client

    clients = {
        "key": Client(HTTP_AUTHORIZATION=f"Bearer {organization['keys'][0]}"),
        "visitor": Client(),
    }
    try:
        for path, who, headers in READS:
            measure(args, clients[who], path, headers)
    finally:
        shutil.rmtree(static_root, ignore_errors=True)


def measure(args, client, path: str, headers: dict) -> None:
    from django.db import connection

    def read():
        response = client.get(path, **headers)
        if response.status_code != 200:
            sys.exit(f"GET {path}: {response.status_code} {response.content[:300]!r}")

    for _ in range(5):
        read()
    batches = []
    began_cpu = time.process_time()
    for _ in range(max(1, args.requests // BATCH)):
        began = time.perf_counter()
        for _ in range(BATCH):
            read()
        batches.append((time.perf_counter() - began) / BATCH * 1000)
    python_cpu = (time.process_time() - began_cpu) / (len(batches) * BATCH) * 1000
    statements = []
    with connection.execute_wrapper(
        lambda execute, sql, params, many, context: (
            statements.append(sql) or execute(sql, params, many, context)
        )
    ):
        read()
    what = f"{path} (htmx: the list alone)" if headers else path
    print(
        f"GET {what} in process, {args.nodes} nodes: {statistics.median(batches):.2f} ms a "
        f"request (best batch {min(batches):.2f} ms), {len(statements)} queries, Python CPU "
        f"{python_cpu:.2f} ms"
    )
    if args.queries:
        for sql in statements:
            print(f"    {sql[:220]}")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [read() for _ in range(BATCH)])
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.profile)


if __name__ == "__main__":
    main()
