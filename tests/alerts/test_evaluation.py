"""Evaluating again never duplicates alerts or notifications; acknowledged and snoozed alerts
stay quiet until they get worse or the snooze ends; a sync evaluates its institution."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.db import IntegrityError, transaction

from labgov.alerts.config import Resolver, parse_thresholds
from labgov.alerts.evaluation import alerts_evaluate_all
from labgov.alerts.models import Alert, AlertSettings, Kind
from labgov.alerts.services import alert_acknowledge, alert_resolve, alert_snooze
from labgov.core.errors import DomainError
from labgov.funding.models import LedgerEntry
from labgov.funding.services import ledger_post
from labgov.notifications.models import Notification
from tests.alerts.conftest import T0, bill, evaluate, make_pod, unresolved

pytestmark = pytest.mark.django_db

HOUR = dt.timedelta(hours=1)


@pytest.fixture
def stopped(world, account, clock):
    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100)
    bill(pod, T0 - HOUR)
    return pod


def _notified(alert):
    """Who was told of the alert, once for each time their notification of it (its thread)
    was made unread."""
    return sorted(
        username
        for username, times in Notification.objects.filter(
            thread_key=f"alert:{alert.pk}"
        ).values_list("recipient__username", "times_told")
        for _ in range(times)
    )


def test_re_evaluation_never_duplicates_alerts_or_notifications(world, stopped, clock):
    first = evaluate(world)
    assert len(first.opened) == 1
    [alert] = unresolved()
    # The owner and the lab's admin are told, once.
    assert _notified(alert) == sorted([world.member.username, world.lab_admin.username])
    note = Notification.objects.get(recipient=world.member)
    assert note.kind == "alert.stopped_pod_disk"
    assert "Costs $20.00 a month." in note.body
    for hours in range(3):
        clock.shift(HOUR)
        bill(stopped, T0 + hours * HOUR)  # still billing
        again = evaluate(world)
        assert again.opened == [] and again.notified == 0
    assert Alert.objects.count() == 1
    assert Notification.objects.filter(recipient=world.member).count() == 1
    alert.refresh_from_db()
    assert alert.first_seen_at == T0 and alert.last_seen_at == T0 + 3 * HOUR


def test_the_database_refuses_a_second_unresolved_alert_for_a_subject(world, stopped, clock):
    evaluate(world)
    alert = Alert.objects.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(
            institution=world.institution,
            kind=alert.kind,
            subject_key=alert.subject_key,
            subject_label="x",
            severity="info",
            title="duplicate",
        )


def test_acknowledged_alert_stays_quiet_and_resolves_when_cleared(world, stopped, clock):
    evaluate(world)
    alert = alert_acknowledge(actor=world.lab_admin, alert=Alert.objects.get())
    evaluate(world)
    alert.refresh_from_db()
    assert alert.state == Alert.State.ACKNOWLEDGED and alert.acknowledged_by == world.lab_admin
    assert len(_notified(alert)) == 2
    stopped.status = "RUNNING"
    stopped.save()
    evaluate(world)
    alert.refresh_from_db()
    assert alert.state == Alert.State.RESOLVED


def test_snoozed_alert_comes_back_and_notifies_when_the_snooze_ends(world, stopped, clock):
    evaluate(world)
    alert = alert_snooze(
        actor=world.lab_admin, alert=Alert.objects.get(), until=T0 + dt.timedelta(days=2)
    )
    clock.shift(dt.timedelta(days=1))
    bill(stopped, T0 + dt.timedelta(days=1) - HOUR)
    evaluate(world)
    alert.refresh_from_db()
    assert alert.state == Alert.State.SNOOZED and len(_notified(alert)) == 2
    clock.shift(dt.timedelta(days=1, hours=1))
    bill(stopped, T0 + dt.timedelta(days=2))
    outcome = evaluate(world)
    alert.refresh_from_db()
    assert alert.state == Alert.State.OPEN and alert.snoozed_until is None
    assert outcome.reopened == [alert.pk]
    assert len(_notified(alert)) == 4  # both people told again, once
    evaluate(world)
    assert len(_notified(alert)) == 4


def test_snooze_must_be_in_the_future_and_bounded(world, stopped, clock):
    evaluate(world)
    alert = Alert.objects.get()
    with pytest.raises(DomainError, match="future"):
        alert_snooze(actor=world.lab_admin, alert=alert, until=T0 - HOUR)
    with pytest.raises(DomainError, match="at most 90 days"):
        alert_snooze(actor=world.lab_admin, alert=alert, until=T0 + dt.timedelta(days=91))


def test_resolved_by_hand_while_the_condition_holds_opens_a_new_alert(world, stopped, clock):
    evaluate(world)
    first = alert_resolve(actor=world.lab_admin, alert=Alert.objects.get(), note="Asked Tara")
    assert first.resolved_by == world.lab_admin and first.resolution == "Asked Tara"
    evaluate(world)
    second = Alert.objects.unresolved().get()
    assert second.pk != first.pk
    assert len(_notified(second)) == 2


def test_escalation_notifies_again_once_per_level(world, account, clock):
    def use(amount):
        ledger_post(
            actor=None,
            funding_source=world.funding_source,
            allocation=world.allocation,
            kind=LedgerEntry.Kind.USAGE,
            amount_usd=D(amount),
        )

    use("600")
    evaluate(world)
    alert = Alert.objects.get(kind=Kind.BUDGET_THRESHOLD)
    alert_acknowledge(actor=world.lab_admin, alert=alert)
    use("250")  # 85 %: worse, so it opens again and tells them again
    evaluate(world)
    evaluate(world)
    alert.refresh_from_db()
    assert alert.state == Alert.State.OPEN and alert.level == 80
    # One notification of the alert, told twice: at the opening, and at the new level.
    mine = Notification.objects.get(recipient=world.member)
    assert (mine.thread_key, mine.dedupe_key) == (f"alert:{alert.pk}", f"alert:{alert.pk}:level-80")
    assert mine.times_told == 2


def test_people_who_may_not_manage_cannot_change_alerts(world, stopped, clock):
    from django.core.exceptions import PermissionDenied

    evaluate(world)
    alert = Alert.objects.get()
    for person in (world.member, world.finance, world.other_member):
        with pytest.raises(PermissionDenied):
            alert_acknowledge(actor=person, alert=alert)
    alert_acknowledge(actor=world.inst_admin, alert=alert)


def test_settings_resolve_lab_then_institution_then_default(world):
    AlertSettings.objects.create(
        institution=world.institution, lab=None, idle_volume_days=10, budget_thresholds="60,90"
    )
    AlertSettings.objects.create(
        institution=world.institution, lab=world.lab, idle_volume_days=3, disabled_kinds=[]
    )
    resolver = Resolver(world.institution.pk)
    lab, other, none = (
        resolver.for_lab(world.lab.pk),
        resolver.for_lab(world.other_lab.pk),
        resolver.for_lab(None),
    )
    assert (lab.idle_volume_days, other.idle_volume_days, none.idle_volume_days) == (3, 10, 10)
    assert lab.budget_thresholds == other.budget_thresholds == (60, 90)
    assert lab.funding_ending_days == 30  # nobody set it: the default


@pytest.mark.parametrize(
    ("text", "expected"),
    [("50,80,100", (50, 80, 100)), (" 80%, 50 ;100 ", (50, 80, 100)), ("75,75", (75,))],
)
def test_thresholds_parse(text, expected):
    assert parse_thresholds(text) == expected


@pytest.mark.parametrize("text", ["", "fifty", "0", "50,2000"])
def test_bad_thresholds_are_refused_in_words(text):
    with pytest.raises(DomainError):
        parse_thresholds(text)


def test_daily_evaluation_covers_every_institution(world, stopped, clock):
    results = alerts_evaluate_all()
    assert results[world.institution.pk]["opened"] == 1


def test_a_sync_evaluates_its_institutions_alerts(
    world, sim, sim_account, at_sim_now, fast_clients, django_capture_on_commit_callbacks
):
    """The default scenario's vision-annotate pod has been stopped since 8 November with a
    100 GB volume disk: after a sync it is a stopped-but-billing alert."""
    from labgov.runpod.sync import account_sync

    with django_capture_on_commit_callbacks(execute=True):
        run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    alert = Alert.objects.get(kind=Kind.STOPPED_POD_DISK, subject_label="Pod vision-annotate")
    assert alert.monthly_cost_usd == D("20.00")
    assert run.counts["balance_read"] is True
    sim_account.refresh_from_db()
    assert sim_account.balance_usd == sim.state.balance_usd


def test_an_alert_whose_resource_is_assigned_tells_its_new_people_once(world, account, clock):
    from labgov.runpod.services import resource_assign

    pod = make_pod(account, None, status="EXITED", volume_disk_gb=100)
    bill(pod, T0 - HOUR)
    evaluate(world)
    alert = Alert.objects.get()
    assert alert.lab is None
    assert _notified(alert) == [world.inst_admin.username]
    resource_assign(actor=world.lab_admin, resource=pod, allocation=world.allocation)
    evaluate(world)
    evaluate(world)
    alert.refresh_from_db()
    assert (alert.lab, alert.owner) == (world.lab, world.member)
    assert _notified(alert) == sorted(
        [world.inst_admin.username, world.member.username, world.lab_admin.username]
    )
