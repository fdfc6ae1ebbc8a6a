"""Reachability of what the portal depends on, for /healthz and for `.ci/run`."""

from celery import current_app
from django.db import connection


def database_status() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "unreachable"; report it, don't raise
        return {"ok": False, "vendor": connection.vendor, "error": str(exc)}
    return {"ok": True, "vendor": connection.vendor}


def broker_status(timeout: float = 2.0) -> dict:
    # The project's app (portal.celery, made current when Django loads portal's settings),
    # reached without importing portal: the apps sit below it.
    conn = current_app.connection_for_write()  # the connection tasks are sent on
    transport = conn.transport_cls
    try:
        with conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=timeout
            )
    except Exception as exc:  # kombu raises transport-specific errors
        return {"ok": False, "transport": transport, "error": str(exc)}
    return {"ok": True, "transport": transport}
