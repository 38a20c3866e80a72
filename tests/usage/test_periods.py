import datetime as dt

import pytest
import time_machine

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.usage.periods import closed_until, period_close, require_open

pytestmark = pytest.mark.django_db


@time_machine.travel(dt.datetime(2027, 1, 15, tzinfo=UTC), tick=False)
def test_months_close_in_order_and_freeze_what_lies_before(world):
    assert closed_until(world.institution.pk) is None
    require_open(world.institution.pk, dt.datetime(2020, 1, 1, tzinfo=UTC), what="x")

    period_close(actor=world.finance, institution=world.institution, year=2026, month=9)
    assert closed_until(world.institution.pk) == dt.datetime(2026, 10, 1, tzinfo=UTC)
    assert AuditEvent.objects.filter(action="period.close").count() == 1

    with pytest.raises(DomainError, match="already closed"):
        period_close(actor=world.finance, institution=world.institution, year=2026, month=8)
    with pytest.raises(DomainError, match="Close October 2026 first"):
        period_close(actor=world.finance, institution=world.institution, year=2026, month=11)
    with pytest.raises(DomainError, match="not ended"):
        period_close(actor=world.finance, institution=world.institution, year=2027, month=1)

    with pytest.raises(DomainError, match="closed"):
        require_open(world.institution.pk, dt.datetime(2026, 9, 30, 23, tzinfo=UTC), what="It")
    require_open(world.institution.pk, dt.datetime(2026, 10, 1, tzinfo=UTC), what="It")
    # Another institution's closes do not bind this one.
    assert closed_until(0) is None
