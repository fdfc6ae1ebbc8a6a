"""The settings module's environment parsing, checked in a fresh interpreter per case."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, django
from django.conf import settings
django.setup()
db = settings.DATABASES["default"]
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "ALLOWED_HOSTS": settings.ALLOWED_HOSTS,
    "DB_ENGINE": db["ENGINE"], "DB_NAME": str(db["NAME"]), "DB_HOST": db.get("HOST", ""),
    "DB_PORT": str(db.get("PORT", "")), "DB_USER": db.get("USER", ""),
    "DB_OPTIONS": {k: v for k, v in db.get("OPTIONS", {}).items() if k != "init_command"},
    "BROKER": settings.CELERY_BROKER_URL,
    "EMAIL_BACKEND": settings.EMAIL_BACKEND, "EMAIL_HOST": getattr(settings, "EMAIL_HOST", ""),
    "EMAIL_PORT": getattr(settings, "EMAIL_PORT", None),
    "EMAIL_USE_TLS": getattr(settings, "EMAIL_USE_TLS", False),
    "SECRET_KEY_IS_DEV": settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY,
    "STRIPE_ENABLED": settings.STRIPE_ENABLED,
    "SECURE_SSL_REDIRECT": settings.SECURE_SSL_REDIRECT,
    "STATICFILES_BACKEND": settings.STORAGES["staticfiles"]["BACKEND"],
}))
"""
CONFIG_NAMES = (
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "EMAIL_URL",
    "STRIPE_SECRET_KEY",
    "STRIPE_PUBLISHABLE_KEY",
    "STRIPE_WEBHOOK_SECRET",
    "SECURE_SSL_REDIRECT",
    "DATABASE_PREPARED_STATEMENTS",
    "DATABASE_PREPARE_THRESHOLD",
)


def load_settings(**overrides):
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_NAMES}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", **overrides)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return result


def parsed(**overrides):
    result = load_settings(**overrides)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_defaults_are_the_embedded_local_setup():
    values = parsed()
    assert values["DEBUG"] is False
    assert values["DB_ENGINE"] == "django.db.backends.sqlite3"
    assert values["DB_NAME"] == str(ROOT / "var" / "loam.sqlite3")
    assert values["BROKER"] == "filesystem://"
    assert values["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    assert values["ALLOWED_HOSTS"] == ["127.0.0.1", "localhost"]
    assert values["SECRET_KEY_IS_DEV"] is True
    assert values["STRIPE_ENABLED"] is False
    assert values["SECURE_SSL_REDIRECT"] is False


def test_database_url_for_postgres():
    values = parsed(DATABASE_URL="postgres://loam:secret@db.internal:6543/portal")
    assert values["DB_ENGINE"] == "django.db.backends.postgresql"
    assert (values["DB_HOST"], values["DB_PORT"], values["DB_USER"], values["DB_NAME"]) == (
        "db.internal",
        "6543",
        "loam",
        "portal",
    )


def test_postgres_prepares_statements_unless_told_not_to():
    url = "postgres://loam@db.internal/portal"
    assert parsed(DATABASE_URL=url)["DB_OPTIONS"] == {
        "server_side_binding": True,
        "prepare_threshold": 5,
    }
    assert parsed(DATABASE_URL=url, DATABASE_PREPARE_THRESHOLD="2")["DB_OPTIONS"] == {
        "server_side_binding": True,
        "prepare_threshold": 2,
    }
    # Behind a pooler in transaction mode: client-side binding, nothing prepared.
    assert parsed(DATABASE_URL=url, DATABASE_PREPARED_STATEMENTS="false")["DB_OPTIONS"] == {}


def test_sqlite_has_no_prepared_statement_options():
    assert "server_side_binding" not in parsed()["DB_OPTIONS"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("on", True), ("false", False), ("0", False), ("", False)],
)
def test_debug_flag(raw, expected):
    assert parsed(DEBUG=raw)["DEBUG"] is expected


def test_debug_selects_the_static_storage():
    assert parsed(DEBUG="true")["STATICFILES_BACKEND"].endswith("StaticFilesStorage")
    assert "whitenoise" in parsed(DEBUG="false")["STATICFILES_BACKEND"]


def test_lists_broker_secret_and_security_flags():
    values = parsed(
        ALLOWED_HOSTS="portal.example,api.portal.example",
        CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672//",
        SECRET_KEY="x" * 60,
        SECURE_SSL_REDIRECT="true",
    )
    assert values["ALLOWED_HOSTS"] == ["portal.example", "api.portal.example"]
    assert values["BROKER"] == "amqp://guest:guest@127.0.0.1:5672//"
    assert values["SECRET_KEY_IS_DEV"] is False
    assert values["SECURE_SSL_REDIRECT"] is True


def test_email_url_for_smtp():
    values = parsed(EMAIL_URL="smtp+tls://mailer:pw@smtp.example:587")
    assert values["EMAIL_BACKEND"] == "django.core.mail.backends.smtp.EmailBackend"
    assert (values["EMAIL_HOST"], values["EMAIL_PORT"], values["EMAIL_USE_TLS"]) == (
        "smtp.example",
        587,
        True,
    )


def test_stripe_switched_on_but_incomplete_fails_at_start():
    result = load_settings(STRIPE_SECRET_KEY="sk_test_123")
    assert result.returncode != 0
    assert "STRIPE_PUBLISHABLE_KEY and STRIPE_WEBHOOK_SECRET" in result.stderr


def test_stripe_complete_is_enabled():
    values = parsed(
        STRIPE_SECRET_KEY="sk_test_123",
        STRIPE_PUBLISHABLE_KEY="pk_test_123",
        STRIPE_WEBHOOK_SECRET="whsec_123",
    )
    assert values["STRIPE_ENABLED"] is True


def test_deploy_check_refuses_the_development_secret_key():
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_NAMES}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "loam.E001" in result.stderr
