"""labgov settings: one module, driven by environment variables (see README, "Configuration")."""

import base64
import datetime as dt
import hashlib
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "labgov.core.middleware.RealErrorPagesMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
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
                "labgov.core.menu.menu",
            ],
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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses logins while locked out
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
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

# Security. Production defaults are strict; each can be relaxed by its variable.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
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

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "COERCE_DECIMAL_TO_STRING": True,
}

# Celery. Without a broker the tasks run in-process, so the demo needs nothing installed.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or None
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
if CELERY_TASK_ALWAYS_EAGER:
    # Tasks run in-process; an in-memory transport keeps Celery from looking for a broker.
    CELERY_BROKER_URL = "memory://localhost/"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600, minimum=1)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict = {}

# Cost arithmetic settings (Runpod does not document them; see README).
LABGOV_HOURS_PER_MONTH = env_decimal("LABGOV_HOURS_PER_MONTH", "730")

# Error pages and reports hide marked secrets (Runpod keys) even when DEBUG is on.
DEFAULT_EXCEPTION_REPORTER_FILTER = "labgov.core.debug.SecretsHiddenReporterFilter"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
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
LABGOV_AFTER_SYNC = [
    "labgov.provisioning.services.commitments.commitments_after_sync",
    "labgov.alerts.tasks.evaluation_after_sync",
]
CELERY_BEAT_SCHEDULE["runpod-sync-all"] = {
    "task": "labgov.runpod.tasks.sync_all_accounts",
    "schedule": LABGOV_SYNC_INTERVAL_MINUTES * 60,
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
CELERY_BEAT_SCHEDULE["provisioning-resume"] = {
    "task": "labgov.provisioning.tasks.resume_provisioning",
    "schedule": 300,
}
