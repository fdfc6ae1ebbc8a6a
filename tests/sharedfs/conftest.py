import uuid

import psycopg
import pytest
from django.conf import settings
from psycopg import sql

import portal.settings


@pytest.fixture
def storage_server(settings):
    """The storage server (LOAM_SHARED_FS_SERVER as configured: this machine's PostgreSQL) under
    a prefix of this test's own; the databases and roles the test made there go with it."""
    settings.LOAM_SHARED_FS_SERVER = portal.settings.LOAM_SHARED_FS_SERVER
    settings.LOAM_SHARED_FS_PREFIX = f"loam-test-{uuid.uuid4().hex[:8]}"
    try:
        psycopg.connect(settings.LOAM_SHARED_FS_SERVER, connect_timeout=3).close()
    except psycopg.Error:
        pytest.skip("no PostgreSQL at LOAM_SHARED_FS_SERVER")
    yield settings.LOAM_SHARED_FS_PREFIX
    prefix = settings.LOAM_SHARED_FS_PREFIX
    with psycopg.connect(settings.LOAM_SHARED_FS_SERVER, autocommit=True) as connection:
        databases = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            [prefix.replace("-", "_") + "%"],
        ).fetchall()
        for (database,) in databases:
            connection.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database))
            )
        roles = connection.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s", [prefix + "%"]
        ).fetchall()
        for (role,) in roles:
            connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def databases_of(prefix: str) -> list[str]:
    with psycopg.connect(settings.LOAM_SHARED_FS_SERVER) as connection:
        rows = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname",
            [prefix.replace("-", "_") + "%"],
        ).fetchall()
    return [name for (name,) in rows]


def roles_of(prefix: str) -> list[str]:
    with psycopg.connect(settings.LOAM_SHARED_FS_SERVER) as connection:
        rows = connection.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s ORDER BY rolname", [prefix + "%"]
        ).fetchall()
    return [name for (name,) in rows]
