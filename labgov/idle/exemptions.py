"""What exempts a pod from automatic stops. Each check in settings.LABGOV_AUTOSTOP_EXEMPTIONS is
`check(resources: list[Resource], now) -> {resource id: reason}`; a pod any check names is
not stopped (nor warned). Other apps add their own check there (a retention hold: the
retention app's `held_resources`), so this app depends on none of them."""

import datetime as dt

from django.conf import settings
from django.db.models import Q
from django.utils.module_loading import import_string

from labgov.idle.models import AutoStopMark


def never_auto_stop_marks(resources, now: dt.datetime) -> dict[int, str]:
    marks = AutoStopMark.objects.filter(
        resource_id__in=[r.pk for r in resources],
        kind=AutoStopMark.Kind.NEVER_STOP,
        ended_at__isnull=True,
    ).filter(Q(until__isnull=True) | Q(until__gt=now))
    return {
        m.resource_id: f"marked never auto-stop until {m.until:%Y-%m-%d}: {m.reason}" for m in marks
    }


def exempt(resources, now: dt.datetime) -> dict[int, str]:
    found: dict[int, str] = {}
    for path in settings.LABGOV_AUTOSTOP_EXEMPTIONS:
        for rid, reason in import_string(path)(resources, now).items():
            found.setdefault(rid, reason)
    return found
