from django.db.models import Case, IntegerField, Value, When

from labgov.accounts import access
from labgov.accounts.models import Lab
from labgov.alerts.models import Alert

SEVERITY_ORDER = Case(
    When(severity="critical", then=Value(0)),
    When(severity="warning", then=Value(1)),
    default=Value(2),
    output_field=IntegerField(),
)


def alerts_for_user(user):
    return Alert.objects.visible_to(user)


def alert_for_user(user, pk: int) -> Alert:
    return access.get_or_404(
        alerts_for_user(user).select_related(
            "lab",
            "resource",
            "resource__account",
            "funding_source",
            "allocation",
            "account",
            "owner",
            "acknowledged_by",
            "snoozed_by",
            "resolved_by",
        ),
        pk=pk,
    )


def alert_list(user, *, state: str = "active", kind: str = "", severity: str = "", lab=None):
    alerts = alerts_for_user(user).select_related("lab", "owner")
    if state == "active":
        alerts = alerts.unresolved()
    elif state and state != "all":
        alerts = alerts.filter(state=state)
    if kind:
        alerts = alerts.filter(kind=kind)
    if severity:
        alerts = alerts.filter(severity=severity)
    if lab:
        alerts = alerts.filter(lab_id=lab)
    return alerts.annotate(severity_order=SEVERITY_ORDER).order_by(
        "severity_order", "-last_seen_at", "-id"
    )


def labs_for_filter(user) -> list[tuple[int, str]]:
    return list(Lab.objects.filter(access.labs_q(user)).order_by("name").values_list("pk", "name"))


def open_alert_count(user) -> int:
    return alerts_for_user(user).needing_attention().count()


def top_alerts(user, *, lab_id: int | None = None, limit: int = 5) -> list[Alert]:
    """The most pressing unresolved alerts a person sees, for home and lab pages."""
    alerts = alerts_for_user(user).needing_attention().select_related("lab")
    if lab_id is not None:
        alerts = alerts.filter(lab_id=lab_id)
    return list(
        alerts.annotate(severity_order=SEVERITY_ORDER).order_by(
            "severity_order", "-monthly_cost_usd", "-last_seen_at"
        )[:limit]
    )
