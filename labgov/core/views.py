from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


def _database_state() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any driver error means "down"; say which
        return f"error: {exc.__class__.__name__}"
    return "ok"


def _broker_state() -> str:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "in-process"
    from labgov.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # kombu raises several unrelated types for "unreachable"
        return f"error: {exc.__class__.__name__}"
    return "ok"


@require_GET
def healthz(request):
    database = _database_state()
    broker = _broker_state()
    healthy = database == "ok" and broker in ("ok", "in-process")
    return JsonResponse(
        {
            "status": "ok" if healthy else "degraded",
            "database": {"vendor": connection.vendor, "state": database},
            "broker": {"state": broker},
        },
        status=200 if healthy else 503,
    )
