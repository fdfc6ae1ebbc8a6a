"""Print the URL of an empty database beside the one a URL names, made new on every call.

    python deploy/fresh_database.py postgres://postgres@127.0.0.1:5432/loam_ci contract
    → postgres://postgres@127.0.0.1:5432/loam_ci_contract  (dropped and created again)

A SQLite URL gets a file beside its own, removed first. Used by deploy/api_contract.sh, whose
generated requests must neither land in the database they were pointed at nor meet what an
earlier run left behind.
"""

import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def fresh_database(url: str, suffix: str) -> str:
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        original = Path(parts.path[1:])  # sqlite:///relative or sqlite:////absolute
        fresh = original.with_name(f"{original.stem}_{suffix}{original.suffix}")
        fresh.unlink(missing_ok=True)
        return f"{parts.scheme}:///{fresh}"
    name = f"{parts.path.lstrip('/')}_{suffix}"
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(parts._replace(path=f"/{name}"))


if __name__ == "__main__":
    print(fresh_database(*sys.argv[1:3]))
