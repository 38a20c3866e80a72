"""Closed billing periods: the one question every money-moving service asks before it
touches the past (re-attribution, removal of synced data)."""

import datetime as dt

from django.db import transaction

from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.periods import UTC, month_period
from labgov.usage.models import ClosedPeriod


def closed_until(institution_id: int) -> dt.datetime | None:
    """The end of the latest closed month of the institution (None: nothing closed). Every
    moment before it is frozen; months are closed in order, so no gap can hide behind it."""
    month = (
        ClosedPeriod.objects.filter(institution_id=institution_id)
        .order_by("-month")
        .values_list("month", flat=True)
        .first()
    )
    return month_period(month.year, month.month)[1] if month else None


def require_open(institution_id: int, since: dt.datetime, *, what: str) -> None:
    """Refuse a change that would alter money at or after `since` inside a closed period."""
    until = closed_until(institution_id)
    if until is not None and since < until:
        raise DomainError(
            f"{what} would change spend before {until:%Y-%m-%d}, in a period finance has "
            "closed. Choose a start in an open period."
        )


@transaction.atomic
def period_close(*, actor, institution, year: int, month: int) -> ClosedPeriod:
    """Close one month. Months close in order: the previous one must be closed already
    unless nothing is closed yet."""
    start, end = month_period(year, month)
    if end > dt.datetime.now(UTC):
        raise DomainError(f"{start:%B %Y} has not ended yet; it cannot be closed.")
    until = closed_until(institution.pk)
    if until is not None and start != until:
        if start < until:
            raise DomainError(f"{start:%B %Y} is already closed.")
        raise DomainError(f"Close {until:%B %Y} first: months close in order.")
    period = ClosedPeriod.objects.create(
        institution=institution, month=start.date(), closed_by=actor
    )
    audit_record(actor=actor, action="period.close", target=period, institution_id=institution.pk)
    return period
