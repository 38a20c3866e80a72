"""Billing periods and closed periods: the one question every money-moving service asks
before it touches the past (re-attribution, removal of synced data).

A billing period is a calendar month in the institution's time zone (`Institution.time_zone`,
UTC by default). Runpod bills in UTC hours, so each edge is the institution's local midnight
rounded down to a whole UTC hour (the same for every zone but the few with half-hour
offsets): every hourly bucket belongs to exactly one period, and to one local day.
"""

import datetime as dt
import functools
import zoneinfo

from django.db import transaction

from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.periods import UTC, hour_floor
from labgov.usage.models import ClosedPeriod

DAY = dt.timedelta(days=1)


def zone(name: str) -> dt.tzinfo:
    """The time zone of an institution (its validated IANA name)."""
    return UTC if name in ("", "UTC") else zoneinfo.ZoneInfo(name)


# Pure (a zone's rules are fixed for the process), and asked for the same few days over and over
# (invoice generation: every line's days).
@functools.lru_cache(maxsize=8192)
def local_day_start(day: dt.date, time_zone: str) -> dt.datetime:
    """The UTC hour at which `day` begins for an institution in `time_zone`."""
    local = dt.datetime(day.year, day.month, day.day, tzinfo=zone(time_zone))
    return hour_floor(local)


def billing_period(
    year: int, month: int, time_zone: str = "UTC"
) -> tuple[dt.datetime, dt.datetime]:
    """The half-open UTC span [start, end) of one month in `time_zone`, on whole hours."""
    first = dt.date(year, month, 1)
    following = dt.date(year + month // 12, month % 12 + 1, 1)
    return local_day_start(first, time_zone), local_day_start(following, time_zone)


def period_days(year: int, month: int, time_zone: str = "UTC"):
    """The local days of a month with their UTC spans: [(day, start, end), …]."""
    first = dt.date(year, month, 1)
    result = []
    day = first
    while day.month == month:
        result.append((day, local_day_start(day, time_zone), local_day_start(day + DAY, time_zone)))
        day += DAY
    return result


def month_of(moment: dt.datetime, time_zone: str = "UTC") -> dt.date:
    """The first day of the billing period holding `moment` (an hour's start)."""
    local = moment.astimezone(zone(time_zone)).date().replace(day=1)
    start, end = billing_period(local.year, local.month, time_zone)
    if moment < start:
        local = (local - DAY).replace(day=1)
    elif moment >= end:
        local = (local + dt.timedelta(days=32)).replace(day=1)
    return local


def closed_until(institution_id: int) -> dt.datetime | None:
    """The end of the latest closed month of the institution (None: nothing closed). Every
    moment before it is frozen; months are closed in order, so no gap can hide behind it."""
    row = (
        ClosedPeriod.objects.filter(institution_id=institution_id)
        .order_by("-month")
        .values_list("month", "institution__time_zone")
        .first()
    )
    if row is None:
        return None
    month, time_zone = row
    return billing_period(month.year, month.month, time_zone)[1]


def require_open(institution_id: int, since: dt.datetime, *, what: str) -> None:
    """Refuse a change that would alter money at or after `since` inside a closed period."""
    until = closed_until(institution_id)
    if until is not None and since < until:
        raise DomainError(
            f"{what} would change spend before {until:%Y-%m-%d %H:%M} UTC, in a period "
            "finance has closed. Choose a start in an open period."
        )


def is_closed(institution_id: int, month: dt.date) -> bool:
    return ClosedPeriod.objects.filter(institution_id=institution_id, month__gte=month).exists()


@transaction.atomic
def period_close(
    *, actor, institution, year: int, month: int, acceptance_reason: str = "", difference_usd=0
) -> ClosedPeriod:
    """Close one month. Months close in order: the previous one must be closed already
    unless nothing is closed yet. Whether the month reconciles is the caller's question
    (labgov.invoicing.services.period_close_checked asks it)."""
    start, end = billing_period(year, month, institution.time_zone)
    if end > dt.datetime.now(UTC):
        raise DomainError(
            f"{dt.date(year, month, 1):%B %Y} has not ended yet; it cannot be closed."
        )
    until = closed_until(institution.pk)
    if until is not None and start != until:
        if start < until:
            raise DomainError(f"{dt.date(year, month, 1):%B %Y} is already closed.")
        due = month_of(until, institution.time_zone)
        raise DomainError(f"Close {due:%B %Y} first: months close in order.")
    period = ClosedPeriod.objects.create(
        institution=institution,
        month=dt.date(year, month, 1),
        closed_by=actor,
        acceptance_reason=acceptance_reason,
        accepted_difference_usd=difference_usd,
    )
    audit_record(
        actor=actor,
        action="period.close",
        target=period,
        institution_id=institution.pk,
        note=acceptance_reason,
    )
    return period
