"""Reconciliation says which days of a month labgov holds: equal totals over one synced day
are not a reconciled month."""

import datetime as dt

import pytest
from django.urls import reverse

from labgov.runpod.reconcile import MonthReconciliation, account_reconciliation, day_ranges
from labgov.runpod.sync import account_sync

pytestmark = pytest.mark.usefixtures("at_sim_now")
UTC = dt.UTC
OCTOBER = dt.date(2026, 10, 1)


def _sync(account, clients, start, end):
    run = account_sync(account_id=account.pk, client_factory=clients, start=start, end=end)
    assert run.status == "succeeded", run.error
    return run


def _month(account, month) -> MonthReconciliation:
    return next(m for m in account_reconciliation(account=account) if m.month == month)


def test_a_month_of_which_only_the_last_day_was_synced_is_not_reconciled(
    world, sim_account, fast_clients, client_for
):
    _sync(
        sim_account,
        fast_clients,
        dt.datetime(2026, 10, 31, tzinfo=UTC),
        dt.datetime(2026, 11, 1, tzinfo=UTC),
    )
    october = _month(sim_account, OCTOBER)
    assert october.runpod_usd > 0
    assert october.matches_to_the_cent  # both sides lack the same 30 days...
    assert october.days_held == [dt.date(2026, 10, 31)]
    assert len(october.days_due) == 31
    assert not october.covered_whole and not october.reconciled  # ...so it is not reconciled
    assert october.days_held_text == "1 of 31 days (31)"

    page = client_for(world.inst_admin).get(reverse("runpod:account_detail", args=[sim_account.pk]))
    html = page.content.decode()
    row = html[html.index('data-month="2026-10"') :].split("</tr>")[0]
    assert "1 of 31 days (31)" in row
    assert "Incomplete: days missing" in row and "Reconciled" not in row


def test_a_month_synced_whole_in_pieces_is_reconciled(sim_account, fast_clients):
    # Two syncs that overlap, together covering October whole.
    _sync(
        sim_account,
        fast_clients,
        dt.datetime(2026, 10, 1, tzinfo=UTC),
        dt.datetime(2026, 10, 20, 6, tzinfo=UTC),
    )
    october = _month(sim_account, OCTOBER)
    assert october.days_held_text == "19 of 31 days (1–19)"
    assert not october.reconciled
    _sync(
        sim_account,
        fast_clients,
        dt.datetime(2026, 10, 20, tzinfo=UTC),
        dt.datetime(2026, 11, 2, tzinfo=UTC),
    )
    october = _month(sim_account, OCTOBER)
    assert october.covered_whole and october.matches_to_the_cent and october.reconciled
    assert october.days_held_text == "31 of 31 days"


def test_the_current_month_counts_the_days_that_have_ended(sim_account, fast_clients, sim):
    # The simulator's now is 2026-11-20 14:30: 19 days of November have ended.
    _sync(sim_account, fast_clients, dt.datetime(2026, 11, 1, tzinfo=UTC), sim.state.now)
    november = _month(sim_account, dt.date(2026, 11, 1))
    assert len(november.days_due) == 19
    assert november.reconciled


def test_a_failed_sync_holds_no_days(sim, sim_account, fast_clients):
    sim.inject_fault("/v2/billing", "500", times=None)
    run = account_sync(
        account_id=sim_account.pk,
        client_factory=fast_clients,
        start=dt.datetime(2026, 10, 1, tzinfo=UTC),
        end=dt.datetime(2026, 11, 1, tzinfo=UTC),
    )
    assert run.status == "failed"
    sim.clear_faults()
    _sync(
        sim_account,
        fast_clients,
        dt.datetime(2026, 10, 30, tzinfo=UTC),
        dt.datetime(2026, 11, 1, tzinfo=UTC),
    )
    assert _month(sim_account, OCTOBER).days_held_text == "2 of 31 days (30–31)"


def test_day_ranges():
    days = [dt.date(2026, 10, d) for d in (1, 2, 3, 5, 30, 31)]
    assert day_ranges(days) == "1–3, 5, 30–31"
