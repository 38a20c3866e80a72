import datetime as dt

import pytest
import time_machine

from labgov.accounts.services import institution_time_zone_set
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.usage.periods import billing_period, closed_until, month_of, period_close
from tests.invoicing.conftest import at


def test_a_period_is_the_calendar_month_of_the_zone_on_whole_utc_hours():
    assert billing_period(2026, 10) == (at(2026, 10, 1), at(2026, 11, 1))
    assert billing_period(2026, 12) == (at(2026, 12, 1), at(2027, 1, 1))
    # New York: EDT (UTC-4) on 1 October and still on 1 November at midnight.
    assert billing_period(2026, 10, "America/New_York") == (at(2026, 10, 1, 4), at(2026, 11, 1, 4))
    assert billing_period(2026, 11, "America/New_York")[1] == at(2026, 12, 1, 5)
    # Kolkata is UTC+5:30: local midnight is 18:30 UTC, rounded down to the hour.
    assert billing_period(2026, 10, "Asia/Kolkata") == (at(2026, 9, 30, 18), at(2026, 10, 31, 18))
    assert month_of(at(2026, 9, 30, 18), "Asia/Kolkata") == dt.date(2026, 10, 1)
    assert month_of(at(2026, 9, 30, 17), "Asia/Kolkata") == dt.date(2026, 9, 1)
    assert month_of(at(2026, 10, 1, 3), "America/New_York") == dt.date(2026, 9, 1)


@pytest.mark.django_db
@time_machine.travel(dt.datetime(2027, 1, 15, tzinfo=dt.UTC), tick=False)
def test_the_time_zone_is_validated_audited_and_fixed_once_a_period_closes(world):
    with pytest.raises(DomainError, match="IANA"):
        institution_time_zone_set(
            actor=world.inst_admin, institution=world.institution, time_zone="Mars/Olympus"
        )
    for person in (world.finance, world.lab_admin, world.outsider):
        with pytest.raises(DomainError, match="admins"):
            institution_time_zone_set(
                actor=person, institution=world.institution, time_zone="Europe/Berlin"
            )
    institution = institution_time_zone_set(
        actor=world.inst_admin, institution=world.institution, time_zone="Europe/Berlin"
    )
    event = AuditEvent.objects.get(action="institution.time_zone")
    assert event.before == {"time_zone": "UTC"} and event.after == {"time_zone": "Europe/Berlin"}
    period_close(actor=world.finance, institution=institution, year=2026, month=10)
    # Berlin's November starts at 23:00 UTC on 31 October (CET, UTC+1).
    assert closed_until(institution.pk) == at(2026, 10, 31, 23)
    with pytest.raises(DomainError, match="cannot change"):
        institution_time_zone_set(actor=world.inst_admin, institution=institution, time_zone="UTC")
