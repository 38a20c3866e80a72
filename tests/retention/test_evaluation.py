"""Each trigger with the clock moved (funding end, membership end, idle from billing
history), cases opened once, cancelled when the condition clears, warnings exactly once per
step, review dates and holds running out, and the after-sync and scheduled entry points."""

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from labgov.notifications.models import Notification
from labgov.retention import services
from labgov.retention.evaluation import retention_evaluate
from labgov.retention.models import Hold, RetentionCase, State
from labgov.runpod.models import Assignment
from tests.alerts.conftest import bill
from tests.factories import AllocationFactory, FundingSourceFactory
from tests.retention.conftest import T0, make_pod, make_volume

DAY = dt.timedelta(days=1)


def _evaluate(world):
    return retention_evaluate(institution_id=world.institution.pk)


def _warnings(case):
    """(person, the latest warning's key) of each notification of the case (its thread), once
    for each time it was made unread."""
    return [
        (recipient, key)
        for recipient, key, times in Notification.objects.filter(
            kind="retention.warning", thread_key=f"retention:{case.pk}"
        )
        .order_by("id")
        .values_list("recipient_id", "dedupe_key", "times_told")
        for _ in range(times)
    ]


@pytest.fixture
def grant(world, clock):
    source = FundingSourceFactory(lab=world.lab, name="Grant ending", end_date=T0.date() + 45 * DAY)
    return AllocationFactory(funding_source=source, user=world.member)


@pytest.fixture
def volume(account, grant):
    return make_volume(account, grant, name="results", created_at_runpod=T0 - 2 * DAY)


def test_funding_end_opens_a_case_when_the_first_warning_is_due(world, policy, volume, clock):
    assert _evaluate(world).opened == []  # due in 45 days: beyond the 30-day warning
    clock.shift(15 * DAY + dt.timedelta(hours=1))
    result = _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    assert result.opened == [case.pk]
    assert case.reason == "funding_ended" and case.due_date == T0.date() + 45 * DAY
    # Opened once, however often it runs.
    assert _evaluate(world).opened == []
    assert RetentionCase.objects.filter(resource=volume).count() == 1


def test_a_policy_turned_off_opens_nothing(world, policy, volume, clock):
    policy.is_active = False
    policy.save()
    clock.shift(40 * DAY)
    assert _evaluate(world).opened == []


def test_membership_end_is_a_trigger(world, policy, account, clock):
    from labgov.accounts.models import Membership

    long_grant = FundingSourceFactory(lab=world.lab, end_date=T0.date() + 400 * DAY)
    allocation = AllocationFactory(funding_source=long_grant, user=world.member)
    volume = make_volume(account, allocation, created_at_runpod=T0 - DAY)
    membership = Membership.objects.get(user=world.member, lab=world.lab)
    membership.end_date = T0.date() + 10 * DAY
    membership.save()
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    assert case.reason == "owner_left"
    assert case.due_date == T0.date() + 24 * DAY  # 14 days of grace


def test_idle_volume_judged_from_billing_history(world, policy, account, clock):
    long_grant = FundingSourceFactory(lab=world.lab, end_date=T0.date() + 400 * DAY)
    allocation = AllocationFactory(funding_source=long_grant, user=world.member)
    volume = make_volume(
        account, allocation, runpod_id="vol-idle", created_at_runpod=T0 - 200 * DAY
    )
    pod = make_pod(account, allocation, status="EXITED", network_volume_id="vol-idle")
    # The pod that mounts it last computed 40 days ago: idle since then, due after 60 days.
    last = T0 - 40 * DAY
    bill(pod, last - dt.timedelta(hours=1), gpu="1.00", disk="0")
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    assert case.reason == "idle"
    assert case.due_date == (last.date() + 60 * DAY)
    # A running pod mounting it clears the condition: the case is cancelled.
    pod.status = "RUNNING"
    pod.save()
    result = _evaluate(world)
    case.refresh_from_db()
    assert result.cancelled == [case.pk] and case.state == State.CANCELLED


def test_stopped_pod_disks_count_only_when_the_policy_says(world, policy, account, grant, clock):
    pod = make_pod(account, grant, status="EXITED", volume_disk_gb=100)
    policy.include_stopped_pod_disks = False
    policy.save()
    clock.shift(20 * DAY)
    _evaluate(world)
    assert not RetentionCase.objects.filter(resource=pod).exists()
    policy.include_stopped_pod_disks = True
    policy.save()
    _evaluate(world)
    case = RetentionCase.objects.get(resource=pod)
    assert case.size_gb == 100 and case.monthly_cost_usd == 20  # 100 GB × $0.20


def test_warnings_exactly_once_each(world, policy, volume, clock):
    clock.shift(15 * DAY)  # 30 days left
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    first = _warnings(case)
    assert {key for _, key in first} == {f"retention:{case.pk}:warn:30"}
    assert {r for r, _ in first} == {world.member.pk, world.lab_admin.pk}
    _evaluate(world)
    clock.shift(DAY)
    _evaluate(world)
    assert _warnings(case) == first
    clock.shift(22 * DAY)  # 7 days left
    _evaluate(world)
    _evaluate(world)
    clock.shift(6 * DAY)  # 1 day left
    _evaluate(world)
    _evaluate(world)
    # Each person's one notification of the case was told three times, the last the 1-day
    # step's.
    assert sorted(_warnings(case)) == sorted(
        (person, f"retention:{case.pk}:warn:1")
        for person in (world.member.pk, world.lab_admin.pk)
        for _ in range(3)
    )


def test_a_late_start_tells_only_the_nearest_step(world, policy, volume, clock):
    clock.shift(42 * DAY)  # 3 days left: the 30- and 7-day steps are past
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    assert {key for _, key in _warnings(case)} == {f"retention:{case.pk}:warn:7"}
    assert case.warned_days == [30, 7]


def test_new_funding_cancels_the_case(world, policy, volume, clock):
    clock.shift(20 * DAY)
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    renewal = FundingSourceFactory(lab=world.lab, end_date=T0.date() + 500 * DAY)
    allocation = AllocationFactory(funding_source=renewal, user=world.member)
    Assignment.objects.create(
        resource=volume, allocation=allocation, starts_at=timezone.now(), source="manual"
    )
    volume.current_allocation = allocation
    volume.save()
    assert _evaluate(world).cancelled == [case.pk]


def test_review_date_and_hold_end_reopen_the_case(world, policy, volume, grant, clock):
    clock.shift(20 * DAY)
    _evaluate(world)
    case = RetentionCase.objects.get(resource=volume)
    today = timezone.now().date()
    services.case_keep(actor=world.lab_admin, case=case, reason="r", review_date=today + 2 * DAY)
    clock.shift(2 * DAY)
    assert _evaluate(world).reopened == [case.pk]
    payer = AllocationFactory(
        funding_source=FundingSourceFactory(lab=world.lab, end_date=today + 300 * DAY),
        user=world.member,
    )
    case.refresh_from_db()
    services.case_hold(
        actor=world.lab_admin,
        case=case,
        kind="thesis",
        reason="t",
        payer=payer,
        until=timezone.now().date() + 3 * DAY,
    )
    clock.shift(3 * DAY)
    assert _evaluate(world).lifted == []  # its last day is today
    clock.shift(DAY)
    assert _evaluate(world).lifted == [case.pk]
    assert not Hold.objects.active().exists()


def test_retention_runs_after_every_sync_and_on_the_schedule():
    assert "labgov.retention.tasks.evaluation_after_sync" in settings.LABGOV_AFTER_SYNC
    entry = settings.CELERY_BEAT_SCHEDULE["retention-evaluate-daily"]
    assert entry["task"] == "labgov.retention.tasks.evaluate_all"
