"""labgov settings: one module, driven by environment variables (see README, "Configuration")."""

import base64
import datetime as dt
import hashlib
import ipaddress
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor

from labgov.env import env_bool, env_decimal, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-labgov-secret-key-never-use-in-production-0123456789"  # noqa: S105

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
if not ALLOWED_HOSTS and not DEBUG:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is off")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# Keys for encrypting secrets at rest (Runpod API keys). Comma-separated Fernet keys: the
# first encrypts, all decrypt, so a key can be rotated by prepending a new one.
ENCRYPTION_KEYS = env_list("LABGOV_ENCRYPTION_KEYS")
if not ENCRYPTION_KEYS:
    if not DEBUG:
        raise ImproperlyConfigured("LABGOV_ENCRYPTION_KEYS must be set when DEBUG is off")
    # Development only: derived from SECRET_KEY so the demo needs no setup.
    ENCRYPTION_KEYS = [
        base64.urlsafe_b64encode(hashlib.sha256(SECRET_KEY.encode()).digest()).decode()
    ]

INSTALLED_APPS = [
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
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "django_htmx",
    "template_partials",
    "labgov.core",
    "labgov.accounts",
    "labgov.audit",
    "labgov.funding",
    "labgov.dashboard",
    "labgov.runpod",
    "labgov.simulator",
    "labgov.usage",
    "labgov.notifications",
    "labgov.provisioning",
    "labgov.alerts",
    "labgov.invoicing",
    "labgov.transfers",
    "labgov.exports",
    "labgov.retention",
    "labgov.utilization",
    "labgov.idle",
    "labgov.api",
    "labgov.ops",
    "labgov.navigation",
    "labgov.demo",
]

MIDDLEWARE = [
    "labgov.ops.metrics.RequestMetricsMiddleware",  # first: times everything below
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "labgov.core.middleware.RealErrorPagesMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "labgov.accounts.middleware.WriteScopeMiddleware",  # whose writes (core/dataversion.py)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "labgov.core.middleware.HtmxHistoryMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "labgov.urls"
WSGI_APPLICATION = "labgov.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "labgov.accounts.context_processors.scope",
                "labgov.navigation.menu.menu",
            ],
            # {% url %} remembers what it reversed (labgov/core/reversing.py).
            "builtins": ["labgov.core.reversing"],
        },
    },
]

VAR_DIR = Path(env_str("LABGOV_VAR_DIR", str(BASE_DIR / "var")))
DATABASE_URL = env_str("DATABASE_URL")
if not DATABASE_URL:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'labgov.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django turns psycopg's prepared statements off. The pages' hot compiled queries
    # (core/compiled.py) ask for theirs; psycopg would also prepare any other query bound on
    # the server (the sync's and the FOCUS import's bodies) run this many times on one
    # connection, so the threshold is out of reach. DATABASE_PREPARED=0 turns it all off,
    # for a pooler that cannot keep prepared statements.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "prepare_threshold", 2**31 - 1 if env_bool("DATABASE_PREPARED", True) else None
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The cache every process shares: sessions (below) and the login throttle. Without
# LABGOV_CACHE_URL each process keeps its own in memory (demo, tests), and the page cache is
# off (below). Rendered dashboard pages and the data version they are keyed by
# (labgov/core/dataversion.py) live in the "pages" cache: LABGOV_PAGE_CACHE_URL, a Redis
# instance of their own with maxmemory and allkeys-lru in production (memory limits are per
# instance, and the broker and sessions must never be evicted), or the shared cache when unset.
# Every key carries this installation's prefix, derived from its database and secret key, so
# two installations on one Redis never read each other's pages or sessions.
LABGOV_CACHE_URL = env_str("LABGOV_CACHE_URL", "") or ""
LABGOV_PAGE_CACHE_URL = env_str("LABGOV_PAGE_CACHE_URL", "") or LABGOV_CACHE_URL
for _name, _url in (
    ("LABGOV_CACHE_URL", LABGOV_CACHE_URL),
    ("LABGOV_PAGE_CACHE_URL", LABGOV_PAGE_CACHE_URL),
):
    if _url and not _url.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"{_name} must be a redis:// (or rediss://) URL")
_db = DATABASES["default"]
LABGOV_INSTALLATION = hashlib.sha256(
    "\0".join(
        str(part) for part in (SECRET_KEY, _db.get("HOST"), _db.get("PORT"), _db.get("NAME"))
    ).encode()
).hexdigest()[:16]


def _cache(url: str, location: str) -> dict:
    if url:
        backend = {"BACKEND": "labgov.core.cache.RedisCache", "LOCATION": url}
    else:
        backend = {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": location,
        }
    return {**backend, "KEY_PREFIX": f"labgov-{LABGOV_INSTALLATION}"}


CACHES = {
    "default": _cache(LABGOV_CACHE_URL, "labgov"),
    "pages": _cache(LABGOV_PAGE_CACHE_URL, "labgov-pages"),
}
# Sessions are read from the shared cache and kept in the database too (a lost cache logs
# nobody out). Only with a shared cache: one in each process's memory would let a session
# logged out through one process live on in the others.
SESSION_ENGINE = (
    "django.contrib.sessions.backends.cached_db"
    if LABGOV_CACHE_URL
    else "django.contrib.sessions.backends.db"
)
# Dashboard pages keep their rendered body this long at most (a backstop: every write moves
# the data version on, which retires them at once); 0 turns the page cache off. Off unless
# the cache is shared: with one per process, a write in another process (the worker, the
# demo's schedule, another gunicorn worker) would move only that process's version, and this
# one would go on serving its pages until they expire.
LABGOV_PAGE_CACHE_SECONDS = env_int(
    "LABGOV_PAGE_CACHE_SECONDS", 300 if LABGOV_PAGE_CACHE_URL else 0, minimum=0
)
# How many pages one person may store in the page cache per hour; past it their pages are
# computed and not kept (nobody fills the cache by asking for endless variants of a page).
LABGOV_PAGE_CACHE_PER_PERSON = env_int("LABGOV_PAGE_CACHE_PER_PERSON", 200, minimum=1)

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses logins while locked out
    # Django's ModelBackend, reading the signed-in person with a compiled query.
    "labgov.accounts.backends.PasswordBackend",
    # Institutional sign-in (OpenID Connect); answers only when LABGOV_OIDC_CLIENT_ID is set.
    "labgov.accounts.oidc.InstitutionOIDCBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Institutional sign-in through OpenID Connect (README, "Institutional sign-in"). Off unless a
# client id is set; local passwords stay for the demo and break-glass admins. People are matched
# by the provider's (issuer, subject), never by email.
LABGOV_OIDC_CLIENT_ID = env_str("LABGOV_OIDC_CLIENT_ID", "") or ""
LABGOV_OIDC_ENABLED = bool(LABGOV_OIDC_CLIENT_ID)
LABGOV_OIDC_NAME = env_str("LABGOV_OIDC_NAME", "your institution") or "your institution"
LABGOV_OIDC_ISSUER = env_str("LABGOV_OIDC_ISSUER", "") or ""
LABGOV_OIDC_INSTITUTION = env_str("LABGOV_OIDC_INSTITUTION", "") or ""
LABGOV_OIDC_GROUPS_CLAIM = env_str("LABGOV_OIDC_GROUPS_CLAIM", "") or ""
# "group=lab-slug" pairs: holding the group makes the person a member of that lab of
# LABGOV_OIDC_INSTITUTION; losing it ends that membership (and only that one).
LABGOV_OIDC_GROUP_LABS = dict(
    item.split("=", 1) for item in env_list("LABGOV_OIDC_GROUP_LABS") if "=" in item
)
OIDC_RP_CLIENT_ID = LABGOV_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = env_str("LABGOV_OIDC_CLIENT_SECRET", "") or ""
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("LABGOV_OIDC_AUTHORIZATION_ENDPOINT", "") or ""
OIDC_OP_TOKEN_ENDPOINT = env_str("LABGOV_OIDC_TOKEN_ENDPOINT", "") or ""
OIDC_OP_USER_ENDPOINT = env_str("LABGOV_OIDC_USERINFO_ENDPOINT", "") or ""
OIDC_OP_JWKS_ENDPOINT = env_str("LABGOV_OIDC_JWKS_ENDPOINT", "") or ""
OIDC_RP_SIGN_ALGO = env_str("LABGOV_OIDC_SIGN_ALGO", "RS256") or "RS256"
OIDC_RP_SCOPES = env_str("LABGOV_OIDC_SCOPES", "openid email profile") or "openid email profile"
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_CREATE_USER = True
OIDC_AUTHENTICATE_CLASS = "labgov.accounts.oidc.SignInView"
OIDC_CALLBACK_CLASS = "labgov.accounts.oidc.CallbackView"
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
if LABGOV_OIDC_ENABLED:
    _missing = [
        name
        for name, value in {
            "LABGOV_OIDC_ISSUER": LABGOV_OIDC_ISSUER,
            "LABGOV_OIDC_CLIENT_SECRET": OIDC_RP_CLIENT_SECRET,
            "LABGOV_OIDC_AUTHORIZATION_ENDPOINT": OIDC_OP_AUTHORIZATION_ENDPOINT,
            "LABGOV_OIDC_TOKEN_ENDPOINT": OIDC_OP_TOKEN_ENDPOINT,
            "LABGOV_OIDC_USERINFO_ENDPOINT": OIDC_OP_USER_ENDPOINT,
            "LABGOV_OIDC_JWKS_ENDPOINT": OIDC_OP_JWKS_ENDPOINT,
        }.items()
        if not value
    ]
    if _missing:
        raise ImproperlyConfigured(
            "LABGOV_OIDC_CLIENT_ID is set, so these must be too: " + ", ".join(_missing)
        )
    if LABGOV_OIDC_GROUP_LABS and not (LABGOV_OIDC_GROUPS_CLAIM and LABGOV_OIDC_INSTITUTION):
        raise ImproperlyConfigured(
            "LABGOV_OIDC_GROUP_LABS needs LABGOV_OIDC_GROUPS_CLAIM and LABGOV_OIDC_INSTITUTION"
        )

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    # The apps' static files, less those no page loads (labgov/core/staticfinders.py).
    "labgov.core.staticfinders.ServedAppDirectoriesFinder",
]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
# Source maps are fetched only by a browser's developer tools: they are served as they are,
# not compressed (two thirds of the vendored bytes, and of collectstatic's time).
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (*Compressor.SKIP_COMPRESS_EXTENSIONS, "map")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            # WhiteNoise's, each URL worked out once (labgov/core/static_storage.py).
            else "labgov.core.static_storage.StaticFilesStorage"
        )
    },
}

# Security. Production defaults are strict; each can be relaxed by its variable.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
# A load balancer or Prometheus on the machine may ask gunicorn directly, over plain http.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): scripts, styles, images and requests from labgov's own
# origin only. No inline script, no eval, no inline style (templates have no <script> without
# src other than json_script data, no on…= handlers and no style attributes: tests/core/
# test_csp.py checks), so an injected tag or attribute cannot run or restyle anything.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
SESSION_COOKIE_HTTPONLY = True

# Login throttling (django-axes; see README, "Configuration"): after this many wrong
# passwords for one username from one client address, that pair is locked out for the cool-off
# (counted by username and address together, so a stranger cannot lock someone out of their
# own account; nginx also rate-limits the login paths per address).
AXES_FAILURE_LIMIT = env_int("LABGOV_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_int("LABGOV_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "labgov.core.client_ip.client_ip"
# Proxies whose X-Forwarded-For is believed (addresses or networks): nginx on this machine.
LABGOV_TRUSTED_PROXIES = env_list("LABGOV_TRUSTED_PROXIES", ["127.0.0.1", "::1"])

# The REST API v1 (labgov/api; see README, "Using the API"): personal tokens or the session,
# every refusal in problem+json, calls counted per token.
LABGOV_API_READ_RATE = env_str("LABGOV_API_READ_RATE", "600/min")
LABGOV_API_WRITE_RATE = env_str("LABGOV_API_WRITE_RATE", "60/min")
for _name, _rate in (
    ("LABGOV_API_READ_RATE", LABGOV_API_READ_RATE),
    ("LABGOV_API_WRITE_RATE", LABGOV_API_WRITE_RATE),
):
    _count, _, _period = _rate.partition("/")
    if not _count.isdigit() or int(_count) < 1 or _period not in ("s", "sec", "min", "hour", "day"):
        raise ImproperlyConfigured(f"{_name}={_rate!r} must look like 600/min (s, min, hour, day)")
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "labgov.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["labgov.api.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "labgov.api.schema.ApiSchema",
    "EXCEPTION_HANDLER": "labgov.api.problems.handle",
    "DEFAULT_THROTTLE_RATES": {
        "api_read": LABGOV_API_READ_RATE,
        "api_write": LABGOV_API_WRITE_RATE,
    },
    "COERCE_DECIMAL_TO_STRING": True,
    "DATETIME_FORMAT": "iso-8601",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "labgov API",
    "DESCRIPTION": (
        "labgov's REST API, version 1. Authenticate with a personal token "
        "(`Authorization: Bearer lgv_…`, made on your *API tokens* page) or a signed-in "
        "session (with CSRF). Access follows the pages: an object outside what you may see "
        "is 404, one you may see but not change is 403. Money is a decimal string with its "
        "`currency`; times are UTC in ISO 8601; a window is `start` (included) to `end` "
        "(excluded). Every refusal is problem+json (RFC 9457)."
    ),
    "VERSION": "1.0.0",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"withCredentials": True, "defaultModelsExpandDepth": -1},
    "ENUM_NAME_OVERRIDES": {
        "SeverityEnum": "labgov.notifications.kinds.Severity",
        "AlertStateEnum": "labgov.alerts.models.Alert.State",
        "RequestStateEnum": "labgov.provisioning.models.ProvisioningRequest.State",
        "LedgerKindEnum": "labgov.funding.models.LedgerEntry.Kind",
        "ResourceKindEnum": "labgov.runpod.models.ResourceKind",
        "FundingStatusEnum": "labgov.funding.models.FundingSource.Status",
        "InvoiceStatusEnum": "labgov.invoicing.models.Invoice.Status",
        "CategoryEnum": "labgov.usage.models.Category",
        "RetentionReasonEnum": "labgov.retention.models.Reason",
    },
}

# Celery. Without a broker the tasks run in-process, so the demo needs nothing installed.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or None
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
if CELERY_TASK_ALWAYS_EAGER:
    # Tasks run in-process; an in-memory transport keeps Celery from looking for a broker.
    CELERY_BROKER_URL = "memory://localhost/"
CELERY_TASK_EAGER_PROPAGATES = True
# Without a broker, "Sync now" runs the sync in a thread of the web process beside the request
# (which answers at once), not in the request itself. Tests turn it off (tests/settings.py).
LABGOV_SYNC_NOW_BESIDE = CELERY_TASK_ALWAYS_EAGER and env_bool("LABGOV_SYNC_NOW_BESIDE", True)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Tasks are acknowledged after they finish, and a task whose worker died (kill -9, OOM, a
# lost machine) goes back to the queue instead of being dropped: every acks_late task is
# idempotent (the sync's lock and slices, provisioning's claim and adoption token, the
# notification claims), so running one again completes the work without doing it twice.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Two installations (or a test stack) may share one Redis database under different queues.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
# Redis hands an unacknowledged task (its worker died) to another worker after this long. It
# must exceed the longest task and the longest retry countdown, or a slow task runs twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 7200, minimum=60)
}
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600, minimum=1)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict = {}

# Cost arithmetic settings (Runpod does not document them; see README).
LABGOV_HOURS_PER_MONTH = env_decimal("LABGOV_HOURS_PER_MONTH", "730")

# Exports (see README, "Exports"): files written by background jobs live here, readable only
# through the download page, for this many days; per-invoice XLSX/PDF and the records CSV
# above this many rows are written by a job rather than in the request.
LABGOV_EXPORT_DIR = Path(env_str("LABGOV_EXPORT_DIR", str(VAR_DIR / "exports")))
LABGOV_EXPORT_KEEP_DAYS = env_int("LABGOV_EXPORT_KEEP_DAYS", 7, minimum=1)
LABGOV_EXPORT_SYNC_MAX_ROWS = env_int("LABGOV_EXPORT_SYNC_MAX_ROWS", 20000, minimum=1)
# The general-ledger account the chargeback journal debits (README, "Exports").
LABGOV_JOURNAL_GL_ACCOUNT = env_str("LABGOV_JOURNAL_GL_ACCOUNT", "")
CELERY_BEAT_SCHEDULE["exports-expire"] = {
    "task": "labgov.exports.tasks.expire_exports",
    "schedule": 3600,
}

# Error pages and reports hide marked secrets (Runpod keys) even when DEBUG is on.
DEFAULT_EXCEPTION_REPORTER_FILTER = "labgov.core.debug.SecretsHiddenReporterFilter"

# Logs: one JSON object per line in production (LABGOV_LOG_FORMAT=json, the default when DEBUG
# is off), for a log collector; plain lines for people otherwise. With JSON, every request is
# logged as one line by labgov (gunicorn's own access log is then off, see gunicorn.conf.py),
# and Celery leaves the root logger to this configuration.
LABGOV_LOG_FORMAT = env_str("LABGOV_LOG_FORMAT", "plain" if DEBUG else "json")
if LABGOV_LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"LABGOV_LOG_FORMAT={LABGOV_LOG_FORMAT!r} must be json or plain")
LABGOV_LOG_REQUESTS = LABGOV_LOG_FORMAT == "json"
CELERY_WORKER_HIJACK_ROOT_LOGGER = LABGOV_LOG_FORMAT != "json"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "labgov.core.log_json.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LABGOV_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # axes: failed logins and lockouts are warnings; its start banner and successes are not.
    "filters": {"refusals": {"()": "labgov.core.log_filters.RefusalsWithoutTraceback"}},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        # A 403 is logged as one line, without the PermissionDenied's traceback.
        "django.request": {"filters": ["refusals"]},
    },
}

# Runpod sync (see README, "Configuration").
LABGOV_SYNC_INTERVAL_MINUTES = env_int("LABGOV_SYNC_INTERVAL_MINUTES", 15, minimum=1)
LABGOV_SYNC_FIRST_DAYS = env_int("LABGOV_SYNC_FIRST_DAYS", 30, minimum=1)
LABGOV_SYNC_OVERLAP_HOURS = env_int("LABGOV_SYNC_OVERLAP_HOURS", 48, minimum=0)
LABGOV_SYNC_SLICE_HOURS = env_int("LABGOV_SYNC_SLICE_HOURS", 24, minimum=1)
LABGOV_SYNC_LOCK_SECONDS = env_int("LABGOV_SYNC_LOCK_SECONDS", 900, minimum=30)
# Hosts a Runpod connection's base URL may name besides https://api.runpod.io (a simulator,
# a proxy); they may use plain http. None in production, so an admin cannot send a stored key
# to a service of their choosing (or probe the network with it).
LABGOV_RUNPOD_HOSTS = env_list(
    "LABGOV_RUNPOD_HOSTS", ["127.0.0.1", "localhost", "::1"] if DEBUG else []
)
LABGOV_SYNC_WRITERS = env_int("LABGOV_SYNC_WRITERS", 2, minimum=1)
# What runs after every sync, in order: `step(*, run)` callables given the finished SyncRun.
# The sync knows none of its consumers; each one that needs fresh spend adds its step here.
# FOCUS billing sources (labgov/runpod/focus.py): the largest file the upload page takes; a
# larger one is imported with `manage.py import_focus`.
LABGOV_FOCUS_MAX_UPLOAD_MB = env_int("LABGOV_FOCUS_MAX_UPLOAD_MB", 512, minimum=1)
# The folder under which institution admins may give a FOCUS source its own folder, which the
# worker reads every LABGOV_FOCUS_FOLDER_MINUTES (labgov/runpod/focus_folders.py); unset: no
# source has a folder. A file is read once it has not changed for LABGOV_FOCUS_SETTLE_SECONDS
# (one still being copied in is left for the next round).
LABGOV_FOCUS_DROP_ROOT = env_str("LABGOV_FOCUS_DROP_ROOT", "") or ""
LABGOV_FOCUS_FOLDER_MINUTES = env_int("LABGOV_FOCUS_FOLDER_MINUTES", 15, minimum=1)
LABGOV_FOCUS_SETTLE_SECONDS = env_int("LABGOV_FOCUS_SETTLE_SECONDS", 60, minimum=0)
LABGOV_AFTER_SYNC = [
    "labgov.provisioning.services.commitments.commitments_after_sync",
    "labgov.alerts.tasks.evaluation_after_sync",
    "labgov.retention.tasks.evaluation_after_sync",
]
# What runs in the transaction of every re-attribution of a resource (runpod.services.
# resource_assign): `step(*, actor, resource, before_allocation_id)`. A retention case follows
# the lab that pays.
LABGOV_AFTER_ASSIGN = ["labgov.retention.services.case_follow_payer"]
# Seconds, when set, override the minutes (the deploy smoke test syncs every few seconds).
LABGOV_SYNC_INTERVAL_SECONDS = env_int(
    "LABGOV_SYNC_INTERVAL_SECONDS", LABGOV_SYNC_INTERVAL_MINUTES * 60, minimum=1
)
# Checks a cost transfer must also pass, each a function of (institution_id, month,
# funding_source_ids) returning a list of (field, message) problems: apps that hold what a transfer
# must not contradict (issued invoices) add theirs here, so transfers import none of them.
LABGOV_TRANSFER_CHECKS = ["labgov.invoicing.services.transfer_problems"]
# Who finishes an approved back-dated move of spend (labgov/transfers/splits.py), by the prefix
# of its origin: the app that asked for it, so transfers import none of them.
LABGOV_SPEND_MOVE_ORIGINS = {"retention-case": "labgov.retention.services.case_move_approved"}
CELERY_BEAT_SCHEDULE["runpod-sync-all"] = {
    "task": "labgov.runpod.tasks.sync_all_accounts",
    "schedule": LABGOV_SYNC_INTERVAL_SECONDS,
}
# Billing partitions (PostgreSQL, see README "Billing partitions"): this month's and the next
# three are made daily, so a sync rarely has to make one. `manage.py billing_partitions ahead`.
CELERY_BEAT_SCHEDULE["runpod-focus-folders"] = {
    "task": "labgov.runpod.tasks.focus_folders_import",
    "schedule": LABGOV_FOCUS_FOLDER_MINUTES * 60,
}
CELERY_BEAT_SCHEDULE["runpod-billing-partitions-ahead"] = {
    "task": "labgov.runpod.tasks.billing_partitions_ahead",
    "schedule": crontab(minute=15, hour=2),
}

# Runpod storage prices in USD per GB per month (Runpod's docs, pods/pricing), for estimates.
LABGOV_PRICE_POD_DISK_RUNNING = env_decimal("LABGOV_PRICE_POD_DISK_RUNNING", "0.10")
LABGOV_PRICE_VOLUME_DISK_STOPPED = env_decimal("LABGOV_PRICE_VOLUME_DISK_STOPPED", "0.20")
LABGOV_PRICE_NETWORK_STANDARD = env_decimal("LABGOV_PRICE_NETWORK_STANDARD", "0.07")
LABGOV_PRICE_NETWORK_STANDARD_OVER_TIER = env_decimal(
    "LABGOV_PRICE_NETWORK_STANDARD_OVER_TIER", "0.05"
)
# Runpod publishes no high-performance price; this is labgov's assumption until it does.
LABGOV_PRICE_NETWORK_HIGH_PERFORMANCE = env_decimal("LABGOV_PRICE_NETWORK_HIGH_PERFORMANCE", "0.14")
LABGOV_NETWORK_TIER_GB = env_int("LABGOV_NETWORK_TIER_GB", 1000, minimum=0)

# Email (see README, "Configuration"). Development prints mail to the console.
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "labgov <labgov@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# Links in emails are this plus the page's path, e.g. https://labgov.example.edu
LABGOV_BASE_URL = (env_str("LABGOV_BASE_URL", "") or "").rstrip("/")

# Notifications (see README, "Notifications"): the daily digest's hour, and how long a webhook
# may take to answer.
LABGOV_DIGEST_HOUR_UTC = env_int("LABGOV_DIGEST_HOUR_UTC", 7, minimum=0)
if LABGOV_DIGEST_HOUR_UTC > 23:
    raise ImproperlyConfigured(f"LABGOV_DIGEST_HOUR_UTC={LABGOV_DIGEST_HOUR_UTC} must be 0 to 23")
LABGOV_WEBHOOK_TIMEOUT_SECONDS = env_int("LABGOV_WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# Hosts a lab webhook may reach over plain http or on a private address (a local test
# receiver); none in production, so a lab admin cannot point labgov's posts at services on
# its own machine or network.
LABGOV_WEBHOOK_HTTP_HOSTS = env_list(
    "LABGOV_WEBHOOK_HTTP_HOSTS", ["127.0.0.1", "localhost", "::1"] if DEBUG else []
)
CELERY_BEAT_SCHEDULE["notifications-unconfirmed"] = {
    "task": "labgov.notifications.tasks.mark_unconfirmed_emails",
    "schedule": 900,
}
CELERY_BEAT_SCHEDULE["notifications-digest"] = {
    "task": "labgov.notifications.tasks.send_digests",
    "schedule": crontab(minute=0, hour=LABGOV_DIGEST_HOUR_UTC),
}

# Provisioning requests (see README, "Configuration").
LABGOV_REQUEST_EXPIRE_DAYS = env_int("LABGOV_REQUEST_EXPIRE_DAYS", 14, minimum=1)
LABGOV_PROVISION_CLAIM_SECONDS = env_int("LABGOV_PROVISION_CLAIM_SECONDS", 600, minimum=30)
CELERY_BEAT_SCHEDULE["provisioning-expire"] = {
    "task": "labgov.provisioning.tasks.expire_requests",
    "schedule": 3600,
}
# Alerts: evaluated after every sync, and once a day at this hour (UTC) for the conditions
# time alone changes (idle days, end dates, snoozes running out).
LABGOV_ALERTS_DAILY_HOUR_UTC = env_int("LABGOV_ALERTS_DAILY_HOUR_UTC", 5, minimum=0)
if LABGOV_ALERTS_DAILY_HOUR_UTC > 23:
    raise ImproperlyConfigured("LABGOV_ALERTS_DAILY_HOUR_UTC must be an hour, 0 to 23")
CELERY_BEAT_SCHEDULE["alerts-evaluate-daily"] = {
    "task": "labgov.alerts.tasks.evaluate_all",
    "schedule": crontab(minute=0, hour=LABGOV_ALERTS_DAILY_HOUR_UTC),
}
# Invoices: on the first day of each month, at this hour of the institution's own clock
# (0–23), the previous month's drafts are generated and finance is told (hourly check).
LABGOV_INVOICE_DRAFTS_HOUR = env_int("LABGOV_INVOICE_DRAFTS_HOUR", 6)
if not 0 <= LABGOV_INVOICE_DRAFTS_HOUR <= 23:
    raise ImproperlyConfigured("LABGOV_INVOICE_DRAFTS_HOUR must be 0 to 23")
CELERY_BEAT_SCHEDULE["invoicing-drafts"] = {
    "task": "labgov.invoicing.tasks.generate_due_drafts",
    "schedule": crontab(minute=30),
}
# Retention: evaluated after every sync and daily at this hour (UTC): due dates, warnings,
# review dates and holds run out with time alone.
LABGOV_RETENTION_DAILY_HOUR_UTC = env_int("LABGOV_RETENTION_DAILY_HOUR_UTC", 6, minimum=0)
if LABGOV_RETENTION_DAILY_HOUR_UTC > 23:
    raise ImproperlyConfigured("LABGOV_RETENTION_DAILY_HOUR_UTC must be an hour, 0 to 23")
CELERY_BEAT_SCHEDULE["retention-evaluate-daily"] = {
    "task": "labgov.retention.tasks.evaluate_all",
    "schedule": crontab(minute=0, hour=LABGOV_RETENTION_DAILY_HOUR_UTC),
}
# GPU utilization (see README, "Running idle"): a light poll of running pods' utilization
# between billing syncs, raw samples kept this many days (hourly aggregates as long as billing).
LABGOV_UTILIZATION_POLL_MINUTES = env_int("LABGOV_UTILIZATION_POLL_MINUTES", 5, minimum=1)
LABGOV_UTILIZATION_RAW_DAYS = env_int("LABGOV_UTILIZATION_RAW_DAYS", 14, minimum=1)
# What every inventory pass hands the pods it listed to: `step(*, account, pods, now)`.
LABGOV_AFTER_INVENTORY = ["labgov.utilization.recording.samples_after_inventory"]
# Checks that exempt a pod from automatic stops: `check(resources) -> {resource id: reason}`.
# Another app (retention holds) adds its own here.
LABGOV_AUTOSTOP_EXEMPTIONS = [
    "labgov.idle.exemptions.never_auto_stop_marks",
    "labgov.retention.exemptions.held_resources",
]
CELERY_BEAT_SCHEDULE["utilization-poll"] = {
    "task": "labgov.idle.tasks.poll_all",
    "schedule": LABGOV_UTILIZATION_POLL_MINUTES * 60,
}
CELERY_BEAT_SCHEDULE["utilization-prune"] = {
    "task": "labgov.utilization.tasks.prune_samples",
    "schedule": crontab(minute=30, hour=3),
}
CELERY_BEAT_SCHEDULE["provisioning-resume"] = {
    "task": "labgov.provisioning.tasks.resume_provisioning",
    "schedule": 300,
}

# Prometheus metrics at /metrics (see README, "Monitoring"): a bearer token, and/or the client
# addresses or networks allowed without one. With neither, /metrics answers no one.
LABGOV_METRICS_TOKEN = env_str("LABGOV_METRICS_TOKEN", "")
LABGOV_METRICS_ALLOWED_IPS = env_list("LABGOV_METRICS_ALLOWED_IPS")
for _network in LABGOV_METRICS_ALLOWED_IPS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"LABGOV_METRICS_ALLOWED_IPS: {_network!r} is not an address or network"
        ) from None
