"""Syncs fetch whole UTC days, and a day is held when successful windows taken together cover
every hour of it: a first sync begun part-way through a day still holds that day."""

import datetime as dt

import pytest

from labgov.invoicing.reconciliation import period_reconciliation
from labgov.runpod.models import SyncRun
from labgov.runpod.reconcile import account_reconciliation
from labgov.runpod.sync import account_sync, default_window
from tests.factories import RunpodAccountFactory

UTC = dt.UTC
OCTOBER = dt.date(2026, 10, 1)


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.mark.usefixtures("at_sim_now")
def test_a_first_sync_begun_mid_day_holds_its_first_day_whole(
    world, sim, sim_account, fast_clients, settings
):
    # The simulator's clock is 2026-11-20 14:30: thirty days back is 21 October, 14:30.
    settings.LABGOV_SYNC_FIRST_DAYS = 30
    run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.window_start == at(2026, 10, 21)  # that day's midnight, not 14:00
    (october,) = [m for m in account_reconciliation(account=sim_account) if m.month == OCTOBER]
    assert october.days_held[0] == dt.date(2026, 10, 21)
    assert october.days_held_text == "11 of 31 days (21–31)"
    (period,) = period_reconciliation(world.institution, OCTOBER)
    day = next(d for d in period.days if d.day == dt.date(2026, 10, 21))
    assert day.held and day.matched


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("time_zone", "start"),
    [
        ("UTC", at(2026, 10, 21)),
        # Local 21 October begins at 04:00 UTC: its UTC midnight is before it.
        ("America/New_York", at(2026, 10, 21)),
        # Local 21 October begins at 22:00 UTC on the 20th: the sync starts that UTC day.
        ("Europe/Berlin", at(2026, 10, 20)),
    ],
)
def test_a_first_window_starts_at_a_utc_midnight_before_its_first_local_day(
    world, time_zone, start, settings
):
    settings.LABGOV_SYNC_FIRST_DAYS = 30
    world.institution.time_zone = time_zone
    world.institution.save()
    account = RunpodAccountFactory(institution=world.institution)
    window = default_window(account, at(2026, 11, 20, 14, 30))
    assert window.start == start and window.end == at(2026, 11, 20, 14, 30)


@pytest.mark.django_db
def test_a_later_window_starts_at_the_midnight_before_its_overlap(world, settings):
    settings.LABGOV_SYNC_OVERLAP_HOURS = 48
    account = RunpodAccountFactory(
        institution=world.institution, billing_complete_through=at(2026, 11, 20, 14)
    )
    assert default_window(account, at(2026, 11, 20, 14, 30)).start == at(2026, 11, 18)
