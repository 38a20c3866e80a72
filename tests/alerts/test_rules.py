"""Each rule fires, does not fire, and clears at the right time (the clock moved with
time-machine)."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.alerts.models import Alert, AlertSettings, Kind, Severity
from labgov.funding.models import LedgerEntry
from labgov.funding.services import ledger_post
from labgov.runpod.models import SyncRun
from tests.alerts.conftest import (
    T0,
    bill,
    evaluate,
    make_pod,
    make_volume,
    spend,
    unresolved,
)
from tests.factories import FundingSourceFactory

pytestmark = pytest.mark.django_db

HOUR = dt.timedelta(hours=1)


def _resolved(alert):
    alert.refresh_from_db()
    return alert.state == Alert.State.RESOLVED and alert.resolved_by_id is None


# -- Stopped but billing ----------------------------------------------------------------------


def test_stopped_pod_with_billing_volume_disk_fires_with_its_monthly_cost(world, account, clock):
    pod = make_pod(
        account, world.allocation, status="EXITED", volume_disk_gb=100, name="vision-annotate"
    )
    bill(pod, T0 - 3 * HOUR, gpu="0.69")  # the last hour it ran
    bill(pod, T0 - 2 * HOUR)
    bill(pod, T0 - HOUR)
    evaluate(world)
    [alert] = unresolved(Kind.STOPPED_POD_DISK)
    assert alert.resource == pod
    assert alert.monthly_cost_usd == D("20.00")  # 100 GB at $0.20/GB/month
    assert alert.lab == world.lab and alert.owner == world.member
    assert alert.severity == Severity.WARNING
    assert "vision-annotate" in alert.title and "$20.00/month" in alert.title


@pytest.mark.parametrize(
    "case",
    ["running", "no volume disk", "no billing", "latest hour still ran", "billing long ago"],
)
def test_stopped_pod_rule_does_not_fire(world, account, clock, case):
    status = "RUNNING" if case == "running" else "EXITED"
    disk = 0 if case == "no volume disk" else 100
    pod = make_pod(account, world.allocation, status=status, volume_disk_gb=disk)
    if case == "latest hour still ran":
        bill(pod, T0 - HOUR, gpu="0.69")
    elif case == "billing long ago":
        bill(pod, T0 - dt.timedelta(days=3))
    elif case != "no billing":
        bill(pod, T0 - HOUR)
    evaluate(world)
    assert unresolved(Kind.STOPPED_POD_DISK) == []


def test_stopped_pod_alert_clears_when_the_pod_is_terminated(world, account, clock):
    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100)
    bill(pod, T0 - HOUR)
    evaluate(world)
    [alert] = unresolved(Kind.STOPPED_POD_DISK)
    clock.shift(HOUR)
    pod.status, pod.gone_at = "TERMINATED", T0
    pod.save()
    evaluate(world)
    assert _resolved(alert)
    assert alert.resolved_at == T0 + HOUR


def test_stopped_pod_alert_clears_when_the_pod_runs_again(world, account, clock):
    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100)
    bill(pod, T0 - HOUR)
    evaluate(world)
    [alert] = unresolved(Kind.STOPPED_POD_DISK)
    pod.status = "RUNNING"
    pod.save()
    evaluate(world)
    assert _resolved(alert)


def test_network_volume_unused_for_seven_days_fires_and_clears(world, account, clock):
    volume = make_volume(account, world.allocation, runpod_id="nv1", name="old-thesis-data")
    make_pod(
        account,
        world.allocation,
        status="EXITED",
        network_volume_id="nv1",
        status_changed_at=T0 - dt.timedelta(days=6),
    )
    evaluate(world)
    assert unresolved(Kind.IDLE_NETWORK_VOLUME) == []  # 6 days: not yet
    clock.shift(dt.timedelta(days=1))
    evaluate(world)
    [alert] = unresolved(Kind.IDLE_NETWORK_VOLUME)
    assert alert.resource == volume
    assert alert.monthly_cost_usd == D("21.00")  # 300 GB at $0.07
    assert "7 days" in alert.title
    # A running pod mounts it again: the alert resolves itself.
    make_pod(account, world.allocation, status="RUNNING", network_volume_id="nv1")
    evaluate(world)
    assert _resolved(alert)


def test_network_volume_no_pod_ever_used_counts_from_its_creation(world, account, clock):
    make_volume(account, runpod_id="nv2", created_at_runpod=T0 - dt.timedelta(days=3))
    evaluate(world)
    assert unresolved(Kind.IDLE_NETWORK_VOLUME) == []
    clock.shift(dt.timedelta(days=5))
    evaluate(world)
    [alert] = unresolved(Kind.IDLE_NETWORK_VOLUME)
    # An unattributed volume of an institution-wide account concerns the institution.
    assert alert.lab is None and alert.owner is None


def test_idle_days_follow_the_lab_setting(world, account, clock):
    AlertSettings.objects.create(institution=world.institution, lab=world.lab, idle_volume_days=30)
    make_volume(account, world.allocation, created_at_runpod=T0 - dt.timedelta(days=10))
    evaluate(world)
    assert unresolved(Kind.IDLE_NETWORK_VOLUME) == []
    clock.shift(dt.timedelta(days=20))
    evaluate(world)
    assert len(unresolved(Kind.IDLE_NETWORK_VOLUME)) == 1


# -- Budget thresholds ------------------------------------------------------------------------


def _use(world, amount, kind=LedgerEntry.Kind.USAGE):
    ledger_post(
        actor=None,
        funding_source=world.funding_source,
        allocation=world.allocation,
        kind=kind,
        amount_usd=D(amount),
    )


def test_budget_thresholds_fire_escalate_and_clear(world, account, clock):
    # The allocation's cap is $1,000 of the funding source's $10,000.
    _use(world, "400")
    evaluate(world)
    assert unresolved(Kind.BUDGET_THRESHOLD) == []
    _use(world, "150", LedgerEntry.Kind.COMMITMENT)  # 55 % of the allocation, committed + spent
    evaluate(world)
    [alert] = unresolved(Kind.BUDGET_THRESHOLD)
    assert alert.subject_key == f"allocation:{world.allocation.pk}"
    assert (alert.level, alert.severity) == (50, Severity.INFO)
    _use(world, "300")  # 85 %
    evaluate(world)
    alert.refresh_from_db()
    assert (alert.level, alert.severity) == (80, Severity.WARNING)
    _use(world, "200")  # 105 %
    evaluate(world)
    alert.refresh_from_db()
    assert (alert.level, alert.severity) == (100, Severity.CRITICAL)
    assert "105%" in alert.title
    # The commitment is released and a correction refunds usage: below 50 % it clears.
    _use(world, "-150", LedgerEntry.Kind.RELEASE)
    _use(world, "-700", LedgerEntry.Kind.ADJUSTMENT)
    evaluate(world)
    assert _resolved(alert)


def test_budget_thresholds_are_configurable(world, account, clock):
    AlertSettings.objects.create(
        institution=world.institution, lab=None, budget_thresholds="25, 75"
    )
    _use(world, "300")
    evaluate(world)
    [alert] = unresolved(Kind.BUDGET_THRESHOLD)
    assert alert.level == 25


def test_funding_source_threshold(world, account, clock):
    ledger_post(
        actor=None,
        funding_source=world.funding_source,
        kind=LedgerEntry.Kind.COMMITMENT,
        amount_usd=D("8100"),
    )
    evaluate(world)
    alert = Alert.objects.get(subject_key=f"funding_source:{world.funding_source.pk}")
    assert alert.level == 80 and alert.lab == world.lab and alert.owner is None


# -- Forecast overrun -------------------------------------------------------------------------


def test_forecast_overrun_fires_and_clears_when_the_burn_stops(world, account, clock):
    fs = FundingSourceFactory(
        lab=world.lab, amount_usd=D("1000"), end_date=T0.date() + dt.timedelta(days=60)
    )
    ledger_post(actor=None, funding_source=fs, kind=LedgerEntry.Kind.USAGE, amount_usd=D("300"))
    from tests.factories import AllocationFactory

    allocation = AllocationFactory(funding_source=fs, user=world.member, cap_usd=D("1000"))
    for back in range(1, 8):  # $70/day: $700 left lasts 10 days, 50 days before the end
        spend(world, account, T0.date() - dt.timedelta(days=back), "70", allocation=allocation)
    evaluate(world)
    alert = Alert.objects.get(kind=Kind.FORECAST_OVERRUN, subject_key=f"funding_source:{fs.pk}")
    assert alert.facts["run_out_date"] == (T0.date() + dt.timedelta(days=10)).isoformat()
    assert "runs out on 26 November 2026" in alert.title
    assert "7 weeks before it ends" in alert.title
    # A week without spend: the burn rate is zero, and so is the risk.
    clock.shift(dt.timedelta(days=8))
    evaluate(world)
    assert _resolved(alert)


def test_forecast_that_lasts_past_the_end_does_not_fire(world, account, clock):
    fs = FundingSourceFactory(
        lab=world.lab, amount_usd=D("1000"), end_date=T0.date() + dt.timedelta(days=20)
    )
    from tests.factories import AllocationFactory

    allocation = AllocationFactory(funding_source=fs, user=world.member, cap_usd=D("1000"))
    for back in range(1, 8):  # $10/day for 20 days: $200 of $1,000
        spend(world, account, T0.date() - dt.timedelta(days=back), "10", allocation=allocation)
    evaluate(world)
    assert not Alert.objects.filter(kind=Kind.FORECAST_OVERRUN).exists()


# -- Funding ending with data -----------------------------------------------------------------


def test_funding_ending_with_volumes_warns_ahead_and_clears(world, account, clock):
    fs = FundingSourceFactory(lab=world.lab, end_date=T0.date() + dt.timedelta(days=40))
    from tests.factories import AllocationFactory

    allocation = AllocationFactory(funding_source=fs, user=world.member)
    volume = make_volume(account, allocation, size_gb=500, name="datasets")
    make_volume(account, allocation, size_gb=300, name="checkpoints")
    evaluate(world)
    assert not Alert.objects.filter(kind=Kind.FUNDING_ENDING).exists()  # 40 days ahead
    clock.shift(dt.timedelta(days=15))
    evaluate(world)
    [alert] = unresolved(Kind.FUNDING_ENDING)
    assert "800 GB" in alert.title and "ends in 4 weeks (26 December 2026)" in alert.title
    assert alert.monthly_cost_usd == D("56.00")  # 800 GB at $0.07
    assert {v["name"] for v in alert.facts["volumes"]} == {"datasets", "checkpoints"}
    assert alert.severity == Severity.WARNING
    # Both volumes move to other money: nothing is left on the ending grant.
    for v in alert.facts["volumes"]:
        from labgov.runpod.models import Resource

        Resource.objects.filter(pk=v["id"]).update(current_allocation=world.allocation)
    evaluate(world)
    assert _resolved(alert)
    assert volume.pk in [v["id"] for v in alert.facts["volumes"]]


def test_funding_without_volumes_does_not_fire(world, account, clock):
    FundingSourceFactory(lab=world.lab, end_date=T0.date() + dt.timedelta(days=5))
    evaluate(world)
    assert not Alert.objects.filter(kind=Kind.FUNDING_ENDING).exists()


# -- Balance risk -----------------------------------------------------------------------------


def test_balance_risk_lists_the_pods_that_would_lose_their_data(world, account, clock):
    account.manual_balance_usd = D("100")
    account.save()
    make_pod(account, name="no-network-volume")
    make_pod(account, name="safe-on-network-volume", network_volume_id="nv9")
    for back in range(1, 8):
        spend(world, account, T0.date() - dt.timedelta(days=back), "50")  # $50/day: 2 days
    evaluate(world)
    [alert] = unresolved(Kind.BALANCE_RISK)
    assert alert.account == account
    assert [p["name"] for p in alert.facts["pods_at_risk"]] == ["no-network-volume"]
    assert "lasts about 2 days at $50.00/day" in alert.title
    assert alert.severity == Severity.WARNING
    # More credit: the risk is gone.
    account.manual_balance_usd = D("1000")
    account.save()
    evaluate(world)
    assert _resolved(alert)


def test_balance_reported_by_runpod_wins_and_its_spend_rate_counts(world, account, clock):
    account.manual_balance_usd = D("100000")
    account.balance_usd = D("30")
    account.balance_spend_per_hr_usd = D("20")  # $480/day: hours left
    account.balance_fetched_at = T0
    account.save()
    evaluate(world)
    [alert] = unresolved(Kind.BALANCE_RISK)
    assert alert.severity == Severity.CRITICAL
    assert "reported by Runpod" in alert.detail


def test_no_balance_known_no_alert(world, account, clock):
    for back in range(1, 8):
        spend(world, account, T0.date() - dt.timedelta(days=back), "500")
    evaluate(world)
    assert unresolved(Kind.BALANCE_RISK) == []


# -- Unattributed spend and failing syncs -----------------------------------------------------


def test_unattributed_spend_above_threshold_fires_then_ages_out(world, account, clock):
    spend(world, account, T0.date() - dt.timedelta(days=2), "60")
    evaluate(world)
    assert unresolved(Kind.UNATTRIBUTED_SPEND) == []  # $60 is under the $100 default
    spend(world, account, T0.date() - dt.timedelta(days=1), "60")
    evaluate(world)
    [alert] = unresolved(Kind.UNATTRIBUTED_SPEND)
    assert "$120.00" in alert.title
    clock.shift(dt.timedelta(days=31))
    evaluate(world)
    assert _resolved(alert)


def test_attributed_spend_does_not_count_as_unattributed(world, account, clock):
    spend(world, account, T0.date() - dt.timedelta(days=1), "500", allocation=world.allocation)
    evaluate(world)
    assert unresolved(Kind.UNATTRIBUTED_SPEND) == []


def _run(account, status, started, error=""):
    return SyncRun.objects.create(
        account=account,
        status=status,
        started_at=started,
        finished_at=started + dt.timedelta(minutes=1),
        error=error,
    )


def test_sync_failing_for_more_than_n_hours_fires_and_clears(world, account, clock):
    _run(account, SyncRun.Status.SUCCEEDED, T0 - dt.timedelta(hours=5))
    _run(account, SyncRun.Status.FAILED, T0 - dt.timedelta(hours=1), "The API key was refused.")
    evaluate(world)
    assert unresolved(Kind.SYNC_FAILING) == []  # 5 hours of the 6 allowed
    clock.shift(dt.timedelta(hours=2))
    evaluate(world)
    [alert] = unresolved(Kind.SYNC_FAILING)
    assert "The API key was refused." in alert.detail
    _run(account, SyncRun.Status.SUCCEEDED, T0 + dt.timedelta(hours=2))
    evaluate(world)
    assert _resolved(alert)


def test_a_lab_can_switch_a_rule_off(world, account, clock):
    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100)
    bill(pod, T0 - HOUR)
    evaluate(world)
    [alert] = unresolved(Kind.STOPPED_POD_DISK)
    AlertSettings.objects.create(
        institution=world.institution, lab=world.lab, disabled_kinds=[Kind.STOPPED_POD_DISK]
    )
    evaluate(world)
    assert _resolved(alert)
