"""Loam settings: one module, every deployment-specific value read from the environment.

Defaults suit a developer laptop (SQLite, a filesystem Celery broker, console email);
production sets DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY, DEBUG=false and ALLOWED_HOSTS.
See `.env.example` for the full list.
"""

import ipaddress
import sys
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"  # the embedded defaults' data: SQLite file, broker folder, uploads

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# A key that is recognisably unsafe: `check --deploy` refuses it (see apps.core.checks).
DEVELOPMENT_SECRET_KEY = "django-insecure-loam-development-key-never-use-in-production"

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # First: `manage.py runserver` is then Daphne's, serving the web terminal's WebSocket too.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "django_htmx",
    "channels",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "apps.core",
    "apps.tenants",
    "apps.catalog",
    "apps.workloads",
    "apps.quotas",
    "apps.sharedfs",
    "apps.orchestration",
    "apps.storage",
    "apps.orders",
    "apps.billing",
    "apps.operations",
    "apps.api",
    "apps.webhooks",
    "apps.agents",
    "apps.partners",
]

MIDDLEWARE = [
    # First: /metrics is answered before the Host check and the HTTPS redirect (a scraper
    # addresses a process by IP over the private network), and every other request is timed.
    "portal.metrics.MetricsEndpointMiddleware",
    "portal.metrics.RequestMetricsMiddleware",
    "apps.core.contention.ContentionMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.core.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "apps.tenants.middleware.CurrentOrganizationMiddleware",
    "apps.tenants.middleware.MfaRequiredMiddleware",
    "apps.core.nul_input.RefuseNulInputMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.tenants.context_processors.navigation",
                "apps.billing.context_processors.wallet_banner",
            ],
        },
    },
]

# --- Cache (rate limits, the catalog's free room): Redis in production, memory locally -------
# The login rate limits (allauth) and the API's throttles count in this cache, so every web
# process must share it: per-process memory would let each gunicorn worker count on its own
# (issue 18: 19 of 30 wrong passwords were checked against a limit of 5). The catalog keeps
# free room here, counted again when any process changes it (catalog.selectors.free_room). CACHE_URL
# (django-environ's cache URL) or else REDIS_URL, e.g. redis://127.0.0.1:6379/1, selects Redis
# (django's RedisCache, the `redis` package, with one client per pool: apps.core.cache); without
# either, the laptop default is memory.
_CACHE_URL = env.str("CACHE_URL", default="") or env.str("REDIS_URL", default="")
_DJANGO_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
CACHES = {
    "default": (
        {**env.cache_url_config(_CACHE_URL), "KEY_PREFIX": "loam"}
        if _CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
if CACHES["default"]["BACKEND"] == _DJANGO_REDIS_CACHE:
    CACHES["default"]["BACKEND"] = "apps.core.cache.RedisCache"

# --- Database ---------------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'loam.sqlite3'}"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The embedded default has several writers (runserver, the Celery worker and beat's jobs
    # such as probe_backends and run_task): WAL lets readers and one writer work at once; each
    # transaction takes the write lock when it begins (IMMEDIATE), so a second writer waits
    # for it (up to `timeout` seconds) instead of failing with "database is locked" when a
    # read transaction tries to become a write one.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": env.int("SQLITE_BUSY_TIMEOUT_S", default=30),
        }
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool(
    "DATABASE_PREPARED_STATEMENTS", default=True
):
    # Parameters bound by the server, and a statement run a few times on a connection is
    # prepared there: PostgreSQL parses and plans it once (a quarter to a third of its CPU an
    # order). Off behind a pooler in transaction mode (PgBouncer before 1.21), where a prepared
    # statement may be missing on the next transaction's server connection.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=env.int("DATABASE_PREPARE_THRESHOLD", default=5)
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth (django-allauth) --------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "portal:start"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = env.str("ACCOUNT_EMAIL_VERIFICATION", default="mandatory")
ACCOUNT_UNIQUE_EMAIL = True
# The subjects (templates/account/email/) name the product themselves; allauth's default prefix
# is the site's domain ("[127.0.0.1:8000]").
ACCOUNT_EMAIL_SUBJECT_PREFIX = ""
# Failed logins: 10 a minute per address, 5 per 5 minutes per email (counted in the shared
# cache above). A locked email is locked for the rest of those 5 minutes only, never for good;
# a password reset clears it at once, and a successful login does not count.
ACCOUNT_RATE_LIMITS = {"login_failed": "10/m/ip,5/5m/key"}
# Counts failed logins per account by the email alone, whatever Host the request names.
ACCOUNT_ADAPTER = "apps.tenants.account_adapter.AccountAdapter"
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]

# --- Internationalisation ---------------------------------------------------------------------
LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
TIME_ZONE = env.str("TIME_ZONE", default="Asia/Shanghai")
USE_TZ = True

# --- Static and uploaded files ----------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=BASE_DIR / "staticfiles")
STATICFILES_DIRS = [BASE_DIR / "static"]
# Uploads (business licences) live outside static/ and are never served by the static handler.
MEDIA_ROOT = env.path("MEDIA_ROOT", default=VAR_DIR / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- Email ------------------------------------------------------------------------------------
EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://")
vars().update(EMAIL_CONFIG)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Loam <noreply@loam.localhost>")

# --- Celery -----------------------------------------------------------------------------------
# Without a broker URL the portal uses kombu's filesystem transport: a real worker process
# (`celery -A portal worker`) on the same machine, with no service to install.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _broker_dir = VAR_DIR / "celery-broker"
    (_broker_dir / "processed").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# How often running hosts are metered and charged; a pass that takes longer, or finds usage
# unmetered for two intervals, logs a warning (apps.billing.tasks.meter_usage).
LOAM_METERING_INTERVAL_S = env.int("LOAM_METERING_INTERVAL_S", default=60)
# The organizations' shared file storage (apps/sharedfs): the PostgreSQL server that keeps each
# one's JuiceFS file system (metadata and data blocks) in a database and role of its own,
# reached by the portal as a role that may create roles and databases, and by every agent
# server of the park as each file system's own role; the capacity where no shared storage
# quota is set; and how often what each one stores is read and metered.
LOAM_SHARED_FS_SERVER = env.str(
    "LOAM_SHARED_FS_SERVER", default="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
)
# Names its databases and roles: portals that share a storage server each take their own.
LOAM_SHARED_FS_PREFIX = env.str("LOAM_SHARED_FS_PREFIX", default="loam")
LOAM_SHARED_FS_DEFAULT_GB = env.int("LOAM_SHARED_FS_DEFAULT_GB", default=100)
LOAM_SHARED_FS_USAGE_INTERVAL_S = env.int("LOAM_SHARED_FS_USAGE_INTERVAL_S", default=300)
CELERY_BEAT_SCHEDULE = {
    "purge-idempotency-records": {
        "task": "apps.api.tasks.purge_idempotency_records",
        "schedule": 3600,
    },
    "meter-usage": {
        "task": "apps.billing.tasks.meter_usage",
        "schedule": LOAM_METERING_INTERVAL_S,
    },
    "issue-due-invoices": {"task": "apps.billing.tasks.issue_due_invoices", "schedule": 3600},
    "schedule-task-queues": {"task": "apps.orchestration.tasks.schedule_queues", "schedule": 30},
    "probe-backends": {"task": "apps.orchestration.tasks.probe_backends", "schedule": 60},
    "sample-capacity": {"task": "apps.orchestration.tasks.sample_capacity", "schedule": 300},
    "enforce-idle-policies": {
        "task": "apps.orders.tasks.enforce_idle_policies",
        "schedule": 300,
    },
    # A scheduled stop happens within a minute of its time; hosts left stopped are released.
    "stop-scheduled-hosts": {"task": "apps.orders.tasks.stop_scheduled_hosts", "schedule": 30},
    "release-stopped-hosts": {"task": "apps.orders.tasks.release_stopped_hosts", "schedule": 3600},
    # Work left waiting (a killed worker, a lost message, a failed dispatch) is sent again.
    "reconcile-hosts": {"task": "apps.orders.tasks.reconcile_hosts", "schedule": 60},
    "reconcile-tasks": {"task": "apps.orchestration.tasks.reconcile_tasks", "schedule": 60},
    "reconcile-webhook-deliveries": {
        "task": "apps.webhooks.tasks.reconcile_deliveries",
        "schedule": 60,
    },
    # Host agents: silent servers marked down; old card samples and orphaned hosts cleared.
    "mark-silent-agent-servers": {"task": "apps.agents.tasks.mark_silent_servers", "schedule": 10},
    "tidy-agent-state": {"task": "apps.agents.tasks.tidy_agent_state", "schedule": 300},
    # Hosts' monitoring: a sample a minute of each running host whose backend has METRICS (the
    # simulator's model; agents send theirs), and samples past LOAM_HOST_SAMPLES_KEPT_S pruned.
    "sample-hosts": {"task": "apps.orders.tasks.sample_hosts", "schedule": 60},
    # What each organization's shared file storage holds, and its meter (apps/sharedfs).
    "read-shared-fs-usage": {
        "task": "apps.sharedfs.tasks.read_shared_fs_usage",
        "schedule": LOAM_SHARED_FS_USAGE_INTERVAL_S,
    },
}
# How long a host, an operation, a task hand-over or a webhook attempt may wait for its job
# before the reconciliation sweep sends it again.
LOAM_RECONCILE_AFTER_S = env.int("LOAM_RECONCILE_AFTER_S", default=300)
# How long a backend may take over a host request (create, stop, start, resize, disk, bandwidth,
# release) before it fails; shorter than LOAM_RECONCILE_AFTER_S, so the sweep sends again only
# requests that nothing follows any more.
LOAM_HOST_REQUEST_TIMEOUT_S = env.int("LOAM_HOST_REQUEST_TIMEOUT_S", default=240)

# --- REST API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": [
        "apps.api.throttling.ApiKeyThrottle",
        "apps.api.throttling.UserThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "api_key": env.str("LOAM_API_RATE_PER_KEY", default="1200/min"),
        "user": env.str("LOAM_API_RATE_PER_USER", default="600/min"),
    },
    # JSON behind a nesting limit (deep JSON overflowed the recursion stack: a 500).
    "DEFAULT_PARSER_CLASSES": [
        "apps.api.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.api.pagination.Pagination",
    "EXCEPTION_HANDLER": "apps.api.exceptions.handle_exception",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Loam API",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "DESCRIPTION": "Loam's partner API: the catalog, quotes, orders, instances, quotas, API keys, "
    "webhooks, wallet, usage and invoices of your organization. Authenticate with "
    "`Authorization: Bearer <key>`.",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.api.schema.add_problem_responses",
    ],
    # Swagger UI and ReDoc are served from our own static files (no CDN in a park).
    "SWAGGER_UI_DIST": "/static/vendor/swagger-ui",
    "SWAGGER_UI_FAVICON_HREF": "/static/vendor/swagger-ui/favicon-32x32.png",
    "REDOC_DIST": "/static/vendor/redoc",
    # Several models have a `kind`; name each choice set after what it classifies.
    "ENUM_NAME_OVERRIDES": {
        "OrderKindEnum": "apps.orders.models.OrderKind",
        "UsageKindEnum": "apps.billing.models.MeterKind",
        "VolumeStateEnum": "apps.storage.models.VolumeState",
        "SavedImageStateEnum": "apps.agents.models.SavedImageState",
    },
}

# --- Stripe -----------------------------------------------------------------------------------
STRIPE_SECRET_KEY = env.str("STRIPE_SECRET_KEY", default="")
STRIPE_PUBLISHABLE_KEY = env.str("STRIPE_PUBLISHABLE_KEY", default="")
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", default="")
STRIPE_API_BASE = env.str("STRIPE_API_BASE", default="")
STRIPE_ENABLED = bool(STRIPE_SECRET_KEY)
# Where tenants send bank transfers (对公转账) to top up; the demo's is made up.
LOAM_BANK_TRANSFER_ACCOUNT = {
    "payee": env.str("LOAM_BANK_PAYEE", default="示范区域算力服务有限公司"),
    "bank": env.str("LOAM_BANK_NAME", default="示范银行上海分行营业部"),
    "account": env.str("LOAM_BANK_ACCOUNT", default="3100 0000 0000 0000 0000"),
}
if STRIPE_ENABLED and not (STRIPE_PUBLISHABLE_KEY and STRIPE_WEBHOOK_SECRET):
    raise ImproperlyConfigured(
        "STRIPE_SECRET_KEY is set, so STRIPE_PUBLISHABLE_KEY and STRIPE_WEBHOOK_SECRET "
        "are required too."
    )

# --- Security (strict once DEBUG is off) ------------------------------------------------------
# Behind a TLS-terminating proxy (deploy/nginx/loam.conf) that sets these headers itself. Turn
# them off where clients reach the portal without such a proxy, or they could claim HTTPS, another
# host or another address (which login rate limits count by).
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https")
    if env.bool("SECURE_PROXY_SSL_HEADER", default=True)
    else None
)
USE_X_FORWARDED_HOST = env.bool("USE_X_FORWARDED_HOST", default=False)
# Behind a proxy REMOTE_ADDR is the proxy's (empty on a unix socket): allauth reads the client's
# address from this header instead, e.g. X-Real-IP, which deploy/nginx/loam.conf sets.
ALLAUTH_TRUSTED_CLIENT_IP_HEADER = env.str("ALLAUTH_TRUSTED_CLIENT_IP_HEADER", default="") or None
# Off by default so the portal runs over plain HTTP on a laptop; a deployment behind TLS turns
# them on (deploy/production.env.example, and `.ci/run` checks that profile with --deploy).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# /healthz is probed over plain HTTP by load balancers inside the park network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (apps.core.csp): scripts from this site only ("'nonce'" is the
# request's nonce, for the inline script drf-spectacular's Swagger UI page renders); inline
# styles are allowed (ReDoc and Swagger UI inject theirs). data: images and fonts are
# Bootstrap's and Swagger UI's; ReDoc's search runs in a blob: worker; the licence PDF is shown
# in an <object> on the operator's page; Stripe Checkout is where the top-up form redirects.
LOAM_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'", "'nonce'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "worker-src": ["'self'", "blob:"],
    "object-src": ["'self'"],
    "frame-ancestors": ["'self'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'", "https://checkout.stripe.com"],
}
# True sends it as Content-Security-Policy-Report-Only (to try a stricter policy first).
LOAM_CSP_REPORT_ONLY = env.bool("LOAM_CSP_REPORT_ONLY", default=False)

# --- Metrics (/metrics, portal.metrics) -------------------------------------------------------
# Prometheus may scrape with `Authorization: Bearer <METRICS_TOKEN>` (no token: that way is off),
# or without it from an address in METRICS_ALLOWED_IPS (addresses or networks; loopback by
# default) when the request did not come through a proxy. nginx's REMOTE_ADDR is loopback, so it
# proxies /metrics only for loopback clients (deploy/nginx/loam.conf), and a request it proxies
# needs the token anyway. Under gunicorn, PROMETHEUS_MULTIPROC_DIR (a directory of its own; the
# hooks of portal/metrics_workers.py empty it at start) makes every worker's request counts add up.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
try:
    METRICS_ALLOWED_NETWORKS = [
        ipaddress.ip_network(entry, strict=False)
        for entry in env.list("METRICS_ALLOWED_IPS", default=["127.0.0.0/8", "::1"])
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"METRICS_ALLOWED_IPS: {exc}") from exc
# The provisioning-duration histogram covers the hosts that came up within this window.
METRICS_PROVISIONING_WINDOW_S = env.int("METRICS_PROVISIONING_WINDOW_S", default=3600)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # httpx (the Slurm client) logs every request at INFO: only its warnings are worth a line.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# --- Backends ---------------------------------------------------------------------------------
# A demo park: the simulator is offered (its hosts do not exist). Off in production, where a
# tenant must never order and pay for a simulated host; on for development (DEBUG) and the test
# suite, which run the demo park. `check --deploy` warns while it is on.
LOAM_DEMO = env.bool("LOAM_DEMO", default=DEBUG or "pytest" in sys.modules)
# The backend drivers this deployment loads (dotted paths, loaded by the orchestration app); a
# simulator among them is offered only in a demo park (LOAM_DEMO).
LOAM_BACKEND_DRIVERS = env.list(
    "LOAM_BACKEND_DRIVERS",
    default=[
        "apps.orchestration.backends.simulator.SimulatorDriver",
        "apps.orchestration.backends.slurm.driver.SlurmDriver",
        "apps.orchestration.backends.agent.AgentDriver",
    ],
)
# Host agents (apps.agents, docs/agent-protocol.md): a server with no heartbeat for this long is
# silent (shown unhealthy, its node down: no new placements); per-card samples are kept this
# long for the charts; a join token is valid this long unless the operator chooses otherwise.
LOAM_AGENT_SILENT_AFTER_S = env.int("LOAM_AGENT_SILENT_AFTER_S", default=20)
LOAM_AGENT_SAMPLES_KEPT_S = env.int("LOAM_AGENT_SAMPLES_KEPT_S", default=3600)
LOAM_AGENT_TOKEN_HOURS = env.int("LOAM_AGENT_TOKEN_HOURS", default=24)
# Hosts' monitoring charts (1 h, 24 h, 7 d): a sample per host and minute, kept a week and a
# day (the 7-day chart, and a margin for a late prune).
LOAM_HOST_SAMPLES_KEPT_S = env.int("LOAM_HOST_SAMPLES_KEPT_S", default=8 * 24 * 3600)
# The ports of a server's public address the portal hands out (each host's SSH port, port
# mappings), inclusive, where the server's agent names no range of its own: "first-last".
_public_ports = env.str("LOAM_AGENT_PUBLIC_PORTS", default="20000-29999")
try:
    LOAM_AGENT_PUBLIC_PORTS = tuple(int(part) for part in _public_ports.split("-"))
    if len(LOAM_AGENT_PUBLIC_PORTS) != 2 or not (
        1024 <= LOAM_AGENT_PUBLIC_PORTS[0] <= LOAM_AGENT_PUBLIC_PORTS[1] <= 65535
    ):
        raise ValueError("not first-last within 1024-65535")
except ValueError as exc:
    raise ImproperlyConfigured(
        f"LOAM_AGENT_PUBLIC_PORTS={_public_ports!r}: {exc}; write it as e.g. 20000-29999"
    ) from exc
# The networks the portal's nginx reaches agent servers from (CIDR, comma-separated): the only
# sources let in to a host's web services (JupyterLab, TensorBoard) on their server ports,
# whatever its security group says. Empty suits a portal on the agent server itself (its own
# connections to its hosts pass no host's rules); a portal elsewhere names its egress address.
# A change reaches a host with its next network change.
_portal_networks = env.list("LOAM_PORTAL_SOURCE_NETWORKS", default=[])
try:
    LOAM_PORTAL_SOURCE_NETWORKS = tuple(
        str(ipaddress.ip_network(network, strict=False)) for network in _portal_networks
    )
except ValueError as exc:
    raise ImproperlyConfigured(
        f"LOAM_PORTAL_SOURCE_NETWORKS={','.join(_portal_networks)!r}: {exc}; write networks "
        "in CIDR form, e.g. 203.0.113.7/32,10.0.0.0/8"
    ) from exc
# The SSH certificate authority hosts trust for the web terminal (`apps.agents.host_ca`): its
# ed25519 private key, made (mode 0600) on first use. Every portal process must read the same
# file; a new key is trusted by a host from its next start.
LOAM_HOST_CA_KEY = env.path("LOAM_HOST_CA_KEY", default=VAR_DIR / "host-ca" / "ssh_user_ca")
# Where a saved image's archive waits while it is copied to another server of its region
# (`apps.agents.image_copies`): removed once no copy needs it. Every portal process must see
# the same folder (the upload and the download may reach different ones).
LOAM_IMAGE_ARCHIVE_DIR = env.path("LOAM_IMAGE_ARCHIVE_DIR", default=VAR_DIR / "image-archives")
# A web terminal's certificate is valid this long (it is used at once, to log in).
LOAM_TERMINAL_CERT_S = env.int("LOAM_TERMINAL_CERT_S", default=120)
# Port mappings a tenant may add to one host (each forwards a port of its server's public
# address to a port of the host).
LOAM_MAX_PORT_MAPPINGS = env.int("LOAM_MAX_PORT_MAPPINGS", default=10)
# A training task its backend keeps waiting (Slurm: pending) longer than this is reported in
# the audit log; the task page shows the backend's reason all along.
LOAM_TASK_PENDING_REPORT_S = env.int("LOAM_TASK_PENDING_REPORT_S", default=600)

# --- Product rules ----------------------------------------------------------------------------
# Where links in emails point (no request to read the host from in a worker).
LOAM_BASE_URL = env.str("LOAM_BASE_URL", default="http://127.0.0.1:8000").rstrip("/")
# Where hosts' web services (JupyterLab, TensorBoard) are opened: an origin of their own (another
# port of the portal's name, or a sibling name with SESSION_COOKIE_DOMAIN covering both), so that
# what a host serves never runs on the portal's origin (deploy/nginx/loam.conf's second server).
# Empty: the portal's own origin, for development only.
LOAM_SERVICES_URL = env.str("LOAM_SERVICES_URL", default="").rstrip("/")
# Billing: VAT on compute services, and when a wallet counts as running low (hours of spend).
LOAM_INVOICE_TAX_RATE = env.str("LOAM_INVOICE_TAX_RATE", default="0.06")
LOAM_LOW_BALANCE_HOURS = env.int("LOAM_LOW_BALANCE_HOURS", default=24)
LOAM_INVITATION_DAYS = env.int("LOAM_INVITATION_DAYS", default=7)
LOAM_LICENCE_MAX_BYTES = env.int("LOAM_LICENCE_MAX_BYTES", default=10 * 1024 * 1024)
# Quotas a new organization starts with, and what verification raises them to; operators
# change any organization's limits afterwards.
LOAM_DEFAULT_QUOTAS = {
    "unverified": {
        "accelerators": 2,
        "compute_units": 8,
        "vcpu": 64,
        "ram_gb": 512,
        "disk_gb": 2000,
        "instances": 2,
    },
    "verified": {
        "accelerators": 16,
        "compute_units": 60,
        "vcpu": 512,
        "ram_gb": 4096,
        "disk_gb": 20000,
        "instances": 10,
    },
}
