"""Retention's answer to the idle stop policy (settings.LABGOV_AUTOSTOP_EXEMPTIONS): a resource
under a standing hold is never stopped automatically, whatever its utilization."""

import datetime as dt

from labgov.retention.models import Hold


def held_resources(resources, now: dt.datetime) -> dict[int, str]:
    holds = Hold.objects.active(on=now.date()).filter(resource_id__in=[r.pk for r in resources])
    return {
        hold.resource_id: f"in a retention hold ({hold.get_kind_display().lower()}): {hold.reason}"
        for hold in holds
    }
