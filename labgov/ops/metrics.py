"""Prometheus metrics at /metrics (see README, "Monitoring").

Two kinds: request latency, observed by `RequestMetricsMiddleware` in every web process (under
gunicorn several processes, added up through prometheus-client's multiprocess mode, whose
directory deploy/gunicorn.conf.py sets up), and the state of the installation, read from the
database and the broker when Prometheus scrapes (sync lag and failures per account, open
alerts by kind, queue depth), so every process answers the same and nothing is counted twice.

The endpoint is for operators: it names every institution's accounts, so it answers only a
request carrying `Authorization: Bearer $LABGOV_METRICS_TOKEN` or coming from an address in
LABGOV_METRICS_ALLOWED_IPS (judged like the login throttle's client address, so a client
behind nginx cannot claim to be one through X-Forwarded-For). With neither set, it answers
no one.
"""

import hmac
import ipaddress
import logging
import os
import time

from django.conf import settings
from django.db.models import Count, Max, Q
from django.http import HttpResponse, HttpResponseForbidden
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

# The classic text format every Prometheus version reads (0.26 defaults to 1.0.0).
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from labgov.core.client_ip import client_ip

log = logging.getLogger("labgov.request")

REQUEST_LATENCY = Histogram(
    "labgov_http_request_duration_seconds",
    "Time labgov took to answer a request, by URL pattern, method and status class.",
    ["route", "method", "status"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


class RequestMetricsMiddleware:
    """Observes each request's latency (by URL pattern, never the raw path, so the label set
    stays small) and, when logs are JSON, writes one line per request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None else "unmatched"
        REQUEST_LATENCY.labels(route, request.method, f"{response.status_code // 100}xx").observe(
            elapsed
        )
        if settings.LABGOV_LOG_REQUESTS:
            log.info(
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "route": route,
                    "status_code": response.status_code,
                    "duration_ms": round(elapsed * 1000, 1),
                    "client": client_ip(request),
                    "user_id": getattr(getattr(request, "user", None), "pk", None),
                },
            )
        return response


class StateCollector:
    """Read at scrape time from the database and the broker."""

    def collect(self):
        from labgov.alerts.models import Alert, Kind
        from labgov.runpod.models import RunpodAccount, SyncRun

        now = timezone.now()
        lag = GaugeMetricFamily(
            "labgov_sync_lag_seconds",
            "Seconds since the account's last successful sync finished (since it was "
            "connected, when none has).",
            labels=["institution", "account", "account_id"],
        )
        failures = GaugeMetricFamily(
            "labgov_sync_consecutive_failures",
            "Failed syncs of the account since its last successful one.",
            labels=["institution", "account", "account_id"],
        )
        runs = GaugeMetricFamily(
            "labgov_sync_runs",
            "Sync runs recorded for the account, by status (failed ones are sync failures).",
            labels=["institution", "account", "account_id", "status"],
        )
        accounts = list(
            RunpodAccount.objects.filter(is_active=True)
            .select_related("institution")
            .annotate(
                last_success=Max(
                    "sync_runs__finished_at",
                    filter=Q(sync_runs__status=SyncRun.Status.SUCCEEDED),
                )
            )
            .order_by("pk")
        )
        by_status: dict[int, dict[str, int]] = {}
        for row in (
            SyncRun.objects.filter(account__in=accounts)
            .values("account_id", "status")
            .annotate(n=Count("pk"))
        ):
            by_status.setdefault(row["account_id"], {})[row["status"]] = row["n"]
        streaks: dict[int, int] = {}
        for account in accounts:
            if account.last_success is None:
                streaks[account.pk] = by_status.get(account.pk, {}).get(SyncRun.Status.FAILED, 0)
        failing = SyncRun.objects.filter(status=SyncRun.Status.FAILED)
        for account in accounts:
            if account.last_success is not None:
                streaks[account.pk] = failing.filter(
                    account=account, started_at__gt=account.last_success
                ).count()
        for account in accounts:
            labels = [account.institution.slug, account.name, str(account.pk)]
            since = account.last_success or account.created_at
            lag.add_metric(labels, max(0.0, (now - since).total_seconds()))
            failures.add_metric(labels, streaks[account.pk])
            for status in SyncRun.Status.values:
                runs.add_metric([*labels, status], by_status.get(account.pk, {}).get(status, 0))
        yield lag
        yield failures
        yield runs

        alerts = GaugeMetricFamily(
            "labgov_alerts_open",
            "Alerts needing attention (open, or snoozed past their snooze), by kind.",
            labels=["kind"],
        )
        counted = dict(
            Alert.objects.needing_attention(now)
            .values_list("kind")
            .annotate(n=Count("pk"))
            .values_list("kind", "n")
        )
        for kind in Kind.values:
            alerts.add_metric([kind], counted.get(kind, 0))
        yield alerts

        from labgov.notifications.models import Notification

        unconfirmed = GaugeMetricFamily(
            "labgov_notification_emails_unconfirmed",
            "Notification emails whose sender died mid-send (may not have arrived; never "
            "sent twice).",
        )
        unconfirmed.add_metric([], Notification.objects.exclude(email_problem="").count())
        yield unconfirmed

        depth, up = queue_depth()
        broker = GaugeMetricFamily("labgov_broker_up", "1 when the broker answered the scrape.")
        broker.add_metric([], up)
        yield broker
        if depth is not None:
            queue = GaugeMetricFamily(
                "labgov_queue_depth", "Tasks waiting in the Celery queue.", labels=["queue"]
            )
            queue.add_metric([settings.CELERY_TASK_DEFAULT_QUEUE], depth)
            yield queue


def queue_depth() -> tuple[int | None, int]:
    """(tasks waiting, broker up). Without a broker (tasks in-process) nothing waits."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return 0, 1
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://")):
        return None, 1
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return int(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE)), 1
    except redis.RedisError:
        return None, 0


def _allowed(request) -> bool:
    token = settings.LABGOV_METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").encode(), token.encode())
    networks = settings.LABGOV_METRICS_ALLOWED_IPS
    if not networks:
        return False
    try:
        address = ipaddress.ip_address(client_ip(request))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(net, strict=False) for net in networks)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(REQUEST_LATENCY)
    registry.register(StateCollector())
    return registry


@require_GET
def metrics(request):
    if not _allowed(request):
        return HttpResponseForbidden("Metrics need the bearer token or an allowed address.\n")
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_PLAIN_0_0_4)
