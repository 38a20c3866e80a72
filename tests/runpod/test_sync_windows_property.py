"""Re-syncs and overlapping windows never double-count: whatever windows are synced, in
whatever order, the stored records equal Runpod's records over their union."""

import datetime as dt
from decimal import Decimal
from itertools import count

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labgov.funding.models import LedgerEntry
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import BillingRecord
from labgov.runpod.services import account_connect
from labgov.runpod.sync import BILLING_KINDS, account_sync
from tests.fixtures_sim import hour

pytestmark = pytest.mark.usefixtures("at_sim_now", "two_day_slices")
HISTORY_HOURS = 24 * 29
_names = count()

windows = st.lists(
    st.tuples(st.integers(0, HISTORY_HOURS - 1), st.integers(1, 24 * 6)),
    min_size=1,
    max_size=4,
)


@pytest.fixture
def two_day_slices(settings):
    """Slices of two days (the suite's are four): a window of up to six days is cut in up to
    three, so windows meet slice boundaries as well as each other."""
    settings.LABGOV_SYNC_SLICE_HOURS = 48


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spans=windows)
def test_any_windows_in_any_order_store_each_record_once(sim, world, fast_clients, spans):
    now = hour(sim.state.now)
    origin = now - dt.timedelta(hours=HISTORY_HOURS)
    # The examples share one database and one simulator: each runs in a savepoint rolled back
    # at its end, so the next example's connection of the same Runpod account is not refused
    # as a duplicate (removal, which would do the same, costs a second an example).
    with transaction.atomic():
        account = account_connect(
            actor=world.inst_admin,
            institution=world.institution,
            name=f"Sim {next(_names)}",
            api_key=sim.api_key,
            base_url=sim.base_url,
        )
        _check(sim, account, fast_clients, origin, now, spans)
        transaction.set_rollback(True)


def _check(sim, account, fast_clients, origin, now, spans) -> None:
    expected: dict[tuple, Decimal] = {}
    with RunpodClient(base_url=sim.base_url, api_key=sim.api_key) as client:
        for offset, length in spans:
            start = origin + dt.timedelta(hours=offset)
            end = min(start + dt.timedelta(hours=length), now)
            run = account_sync(
                account_id=account.pk, client_factory=fast_clients, start=start, end=end
            )
            assert run.status == "succeeded", run.error
            for kind in BILLING_KINDS:
                for r in client.billing_records(kind, start=start, end=end):
                    expected[(kind, r.resource_id, r.start)] = r.total_usd
    stored = list(
        BillingRecord.objects.filter(resource__account=account).values_list("total_usd", flat=True)
    )
    assert len(stored) == len(expected)
    assert sum(stored, Decimal(0)) == sum(expected.values(), Decimal(0))
    # The ledger's usage from this account equals its attributed records, whatever the order.
    attributed = BillingRecord.objects.filter(
        resource__account=account, allocation__isnull=False
    ).values_list("total_usd", flat=True)
    usage = LedgerEntry.objects.filter(source=f"runpod-account:{account.pk}").values_list(
        "amount_usd", flat=True
    )
    assert sum(usage, Decimal(0)) == sum(attributed, Decimal(0))
