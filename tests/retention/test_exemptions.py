"""A pod or volume in a retention hold is exempt from the idle stop policy."""

import datetime as dt

from django.utils import timezone

from labgov.idle.exemptions import exempt
from labgov.retention import services
from tests.retention.test_cases import case, payer  # noqa: F401 - fixtures


def test_a_held_resource_is_exempt_until_the_hold_is_lifted(world, case, payer):  # noqa: F811
    now = timezone.now()
    assert case.resource_id not in exempt([case.resource], now)
    services.case_hold(
        actor=world.lab_admin, case=case, kind="thesis", reason="Thesis data", payer=payer
    )
    reason = exempt([case.resource], now)[case.resource_id]
    assert "retention hold (thesis)" in reason and "Thesis data" in reason
    case.refresh_from_db()
    services.hold_lift(actor=world.lab_admin, case=case, note="Thesis submitted")
    assert case.resource_id not in exempt([case.resource], now + dt.timedelta(minutes=1))
