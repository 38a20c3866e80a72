"""The case's state machine: every allowed transition, every refused one, holds that win,
the one- and two-person rules (the self-approval attack performed), payers within the rules
of attribution, and the audit rows."""

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.notifications.models import Notification
from labgov.retention import services
from labgov.retention.deletion import Outcome, case_delete_carry_out
from labgov.retention.models import Approval, Hold, RetentionCase, State
from labgov.runpod.models import Assignment
from labgov.usage.models import ClosedPeriod
from tests.factories import AllocationFactory, FundingSourceFactory
from tests.retention.conftest import make_volume, open_case

TOMORROW = dt.timedelta(days=1)


@pytest.fixture
def case(world, account, ending_grant, policy):
    _, allocation = ending_grant
    volume = make_volume(
        account,
        allocation,
        name="grant-data",
        size_gb=500,
        created_at_runpod=timezone.now() - dt.timedelta(days=10),
    )
    Assignment.objects.create(
        resource=volume,
        allocation=allocation,
        starts_at=timezone.now() - dt.timedelta(days=60),
        source=Assignment.Source.MANUAL,
    )
    return open_case(volume)


@pytest.fixture
def payer(world):
    source = FundingSourceFactory(lab=world.lab, name="Thesis money")
    return AllocationFactory(funding_source=source, user=world.member)


def _at(case, state, **fields):
    RetentionCase.objects.filter(pk=case.pk).update(state=state, **fields)
    case.refresh_from_db()
    return case


def _request(world, case):
    return services.deletion_request(actor=world.lab_admin, case=case, reason="saved elsewhere")


def test_opened_case_says_what_why_and_when(world, case, ending_grant):
    source, allocation = ending_grant
    assert case.state == State.OPEN
    assert case.reason == "funding_ended"
    assert case.due_date == source.end_date
    assert case.owner == world.member and case.payer == allocation and case.lab == world.lab
    assert case.size_gb == 500 and case.monthly_cost_usd == 35  # 500 GB × $0.07
    assert AuditEvent.objects.filter(action="retention.open", target_id=str(case.pk)).exists()


def test_keep_then_reopen(world, case):
    today = timezone.now().date()
    with pytest.raises(DomainError, match="future"):
        services.case_keep(actor=world.lab_admin, case=case, reason="x", review_date=today)
    case = services.case_keep(
        actor=world.lab_admin, case=case, reason="still analysed", review_date=today + TOMORROW
    )
    assert case.state == State.KEPT
    case = services.case_reopen(actor=world.lab_admin, case=case)
    assert case.state == State.OPEN


def test_hold_names_who_pays_and_reattributes_from_now(world, case, payer):
    hold = services.case_hold(
        actor=world.lab_admin, case=case, kind="thesis", reason="Kim's thesis", payer=payer
    )
    case.refresh_from_db()
    assert case.state == State.HOLD and hold.payer == payer
    latest = Assignment.objects.filter(resource=case.resource).latest("starts_at", "id")
    assert latest.allocation == payer and latest.starts_at <= timezone.now()
    case.resource.refresh_from_db()
    assert case.resource.current_allocation == payer
    event = AuditEvent.objects.get(action="retention.hold", target_id=str(case.pk))
    assert event.actor == world.lab_admin and event.after["payer_allocation_id"] == payer.pk


def test_hold_payer_outside_the_rules_is_refused(world, case):
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    with pytest.raises(DomainError, match="case's lab"):
        services.case_hold(actor=world.lab_admin, case=case, kind="legal", reason="r", payer=other)
    ended = FundingSourceFactory(
        lab=world.lab,
        start_date=timezone.now().date() - dt.timedelta(days=90),
        end_date=timezone.now().date() - dt.timedelta(days=1),
    )
    stale = AllocationFactory(funding_source=ended, user=world.member)
    with pytest.raises(DomainError, match="not active"):
        services.case_hold(actor=world.lab_admin, case=case, kind="legal", reason="r", payer=stale)
    assert not Hold.objects.exists()


def test_move_never_into_a_closed_period(world, case, payer):
    ClosedPeriod.objects.create(
        institution=world.institution, month=dt.date(2000, 1, 1), closed_by=world.finance
    )
    closed = ClosedPeriod.objects.get()
    # Close up to last month: a move dated inside it is refused.
    today = timezone.now().date()
    last_month = (today.replace(day=1) - TOMORROW).replace(day=1)
    ClosedPeriod.objects.filter(pk=closed.pk).update(month=last_month)
    with pytest.raises(DomainError, match="closed"):
        services.case_move(actor=world.lab_admin, case=case, allocation=payer, starts_on=last_month)
    case = services.case_move(actor=world.lab_admin, case=case, allocation=payer, starts_on=today)
    assert case.state == State.MOVED and case.moved_to == payer
    case.resource.refresh_from_db()
    assert case.resource.current_allocation == payer


def test_one_person_rule_and_the_self_approval_attack(world, case, second_admin):
    case = _request(world, case)
    assert case.state == State.DELETION_REQUESTED
    assert case.last_known["runpod_id"] == case.resource.runpod_id
    with pytest.raises(DomainError, match="another person"):
        services.deletion_approve(actor=world.lab_admin, case=case)
    assert not Approval.objects.exists()
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case.state == State.DELETION_APPROVED


def test_two_person_rule_needs_two_approvers_besides_the_requester(
    world, case, second_admin, policy
):
    policy.approvers_required = 2
    policy.save()
    case = _request(world, case)
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case.state == State.DELETION_REQUESTED
    with pytest.raises(DomainError, match="already"):
        services.deletion_approve(actor=second_admin, case=case)
    with pytest.raises(DomainError, match="another person"):
        services.deletion_approve(actor=world.lab_admin, case=case)
    case = services.deletion_approve(actor=world.inst_admin, case=case)
    assert case.state == State.DELETION_APPROVED
    assert Approval.objects.filter(case=case).count() == 2


@pytest.mark.parametrize("who", ["member", "finance", "other_member", "outsider"])
def test_only_deciders_act(world, case, who):
    with pytest.raises(PermissionDenied):
        services.deletion_request(actor=getattr(world, who), case=case)


def test_a_hold_blocks_a_request_and_an_approval(world, case, payer, second_admin):
    case = _request(world, case)
    services.case_hold(actor=second_admin, case=case, kind="legal", reason="lawsuit", payer=payer)
    case.refresh_from_db()
    with pytest.raises(DomainError, match="cannot be approved"):
        services.deletion_approve(actor=second_admin, case=case)
    with pytest.raises(DomainError, match="cannot be put up"):
        services.deletion_request(actor=world.lab_admin, case=case)


def test_a_hold_placed_after_approval_wins(world, case, payer, second_admin):
    case = services.deletion_approve(actor=second_admin, case=_request(world, case))
    services.case_hold(actor=world.inst_admin, case=case, kind="audit", reason="audit", payer=payer)

    def never(account):
        raise AssertionError("a held volume must not reach Runpod")

    assert case_delete_carry_out(case_id=case.pk, client_factory=never) == Outcome.NOT_APPROVED
    # Even with its state forced back to approved, the hold row stops the deletion.
    _at(case, State.DELETION_APPROVED)
    assert case_delete_carry_out(case_id=case.pk, client_factory=never) == Outcome.HELD
    case.refresh_from_db()
    assert case.state == State.HOLD and case.resource.gone_at is None


def test_lifting_a_hold_opens_the_case_and_needs_a_fresh_request(world, case, payer, second_admin):
    case = services.deletion_approve(actor=second_admin, case=_request(world, case))
    services.case_hold(actor=world.lab_admin, case=case, kind="thesis", reason="t", payer=payer)
    case = services.hold_lift(actor=world.lab_admin, case=case)
    assert case.state == State.OPEN
    assert not Hold.objects.active().exists()
    with pytest.raises(DomainError, match="cannot be approved"):
        services.deletion_approve(actor=second_admin, case=case)


ALL_ACTIONS = ["keep", "reopen", "hold", "lift", "move", "request", "approve", "withdraw", "cancel"]


def _try(world, case, action, payer, second_admin):
    today = timezone.now().date()
    calls = {
        "keep": lambda: services.case_keep(
            actor=world.lab_admin, case=case, reason="r", review_date=today + TOMORROW
        ),
        "reopen": lambda: services.case_reopen(actor=world.lab_admin, case=case),
        "hold": lambda: services.case_hold(
            actor=world.lab_admin, case=case, kind="thesis", reason="r", payer=payer
        ),
        "lift": lambda: services.hold_lift(actor=world.lab_admin, case=case),
        "move": lambda: services.case_move(
            actor=world.lab_admin, case=case, allocation=payer, starts_on=today
        ),
        "request": lambda: services.deletion_request(actor=world.lab_admin, case=case),
        "approve": lambda: services.deletion_approve(actor=second_admin, case=case),
        "withdraw": lambda: services.deletion_withdraw(actor=world.lab_admin, case=case),
        "cancel": lambda: services.case_cancel(actor=world.lab_admin, case=case, note="cleared"),
    }
    return calls[action]()


@pytest.mark.parametrize("state", [s.value for s in State])
def test_every_transition_allowed_or_refused(world, case, payer, second_admin, state):
    """From each state, each action either succeeds (ALLOWED) or is refused in words, and a
    refused one changes nothing."""
    from django.db import transaction

    fields = {}
    if state in (State.DELETION_REQUESTED, State.DELETION_APPROVED):
        fields = {"deletion_requested_by": world.lab_admin, "deletion_requested_at": timezone.now()}
    for action in ALL_ACTIONS:
        _at(case, state, **fields)
        if state == State.HOLD:
            Hold.objects.get_or_create(
                resource=case.resource,
                case=case,
                defaults={
                    "kind": "thesis",
                    "reason": "r",
                    "payer": payer,
                    "placed_by": world.lab_admin,
                },
            )
        allowed = state in services.ALLOWED[action]
        try:
            with transaction.atomic():
                _try(world, case, action, payer, second_admin)
                transaction.set_rollback(True)
        except DomainError as exc:
            assert not allowed, f"{action} from {state} refused: {exc}"
            case.refresh_from_db()
            assert case.state == state
        else:
            assert allowed, f"{action} from {state} was allowed"
        Hold.objects.filter(case=case).delete()


def test_every_transition_is_audited_and_told(world, case, payer):
    services.case_keep(
        actor=world.lab_admin,
        case=case,
        reason="analysis",
        review_date=timezone.now().date() + TOMORROW,
    )
    events = AuditEvent.objects.filter(
        target_type="retention.retentioncase", target_id=str(case.pk)
    )
    assert list(events.order_by("id").values_list("action", flat=True)) == [
        "retention.open",
        "retention.keep",
    ]
    keep = events.get(action="retention.keep")
    assert keep.actor == world.lab_admin and keep.before == {"state": "open"}
    # The owner is told their volume is kept; the lab admin who kept it is not told of it.
    told = Notification.objects.filter(kind="retention.transition").values_list(
        "recipient_id", flat=True
    )
    assert set(told) == {world.member.pk}


def test_only_the_last_approval_queues_the_deletion_after_commit(
    world, case, second_admin, policy, django_capture_on_commit_callbacks, monkeypatch
):
    queued = []
    monkeypatch.setattr("labgov.retention.tasks.delete_case.delay", queued.append)
    policy.approvers_required = 2
    policy.save()
    case = _request(world, case)
    with django_capture_on_commit_callbacks(execute=True):
        case = services.deletion_approve(actor=second_admin, case=case)
    assert queued == []
    with django_capture_on_commit_callbacks(execute=True):
        services.deletion_approve(actor=world.inst_admin, case=case)
    assert queued == [case.pk]
