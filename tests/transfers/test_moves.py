"""Back-dated re-assignments move spend already incurred: the attacks of issue 22 performed
(a lab admin's back-dated split or retention move alone, past an issued invoice, below zero),
and the legitimate path (a second person approves, the spend moves to the cent, audited)."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.money import ZERO
from labgov.invoicing.services import invoice_issue, invoices_generate
from labgov.retention.models import State
from labgov.runpod.models import Assignment
from labgov.transfers.models import SpendMove
from labgov.transfers.services import Refused, available_to_move, cost_transfer_create
from labgov.transfers.splits import resource_split_set, spend_move_approve, spend_move_reject
from tests.transfers.conftest import NOV, NOW, T0, hours

OCT = dt.date(2026, 10, 1)
DAY = Decimal("24.0000000024")  # a day of the pod (24 hours of 1.0000000001)
ALL_OF_NOV = 2 * DAY  # 2 and 3 November


def _on_pod(account, pod, allocation, month=NOV) -> Decimal:
    return available_to_move(account=account, allocation=allocation, month=month, resource=pod)


def _split_all_to(world, pod, target, *, actor, starts_at=T0):
    return resource_split_set(
        actor=actor, resource=pod, shares=[(target, Decimal(100))], starts_at=starts_at
    )


def test_a_lab_admin_alone_moves_no_incurred_spend_a_second_person_does(world, spent):
    account, pod, second, _ = spent
    # The attack: a back-dated split, one share at 100 %, from inside November.
    move = _split_all_to(world, pod, second, actor=world.lab_admin)
    assert isinstance(move, SpendMove) and move.state == SpendMove.State.PENDING
    # Nothing moved: the member's allocation still pays, the timeline is as it was.
    assert _on_pod(account, pod, world.allocation) == ALL_OF_NOV
    assert _on_pod(account, pod, second) == ZERO
    assert Assignment.objects.filter(resource=pod).count() == 1
    assert move.moves == {
        f"{world.allocation.pk}:2026-11": str(-ALL_OF_NOV),
        f"{second.pk}:2026-11": str(ALL_OF_NOV),
    }
    assert AuditEvent.objects.filter(action="spend_move.propose", target_id=str(move.pk)).exists()
    # The proposer does not approve it; a member neither.
    for actor in (world.lab_admin, world.member):
        with pytest.raises(DomainError, match="Only finance"):
            spend_move_approve(actor=actor, move=move)
    # Finance approves: the spend moves, exactly, and the approval is audited.
    move = spend_move_approve(actor=world.finance, move=move, note="Eval belongs there")
    assert move.state == SpendMove.State.APPLIED and move.decided_by == world.finance
    assert _on_pod(account, pod, world.allocation) == ZERO
    assert _on_pod(account, pod, second) == ALL_OF_NOV
    assert _on_pod(account, pod, world.allocation, OCT) == DAY  # before the split: unchanged
    assert move.assignment.starts_at == T0 and move.assignment.allocation == second
    event = AuditEvent.objects.get(action="spend_move.apply", target_id=str(move.pk))
    assert event.actor == world.finance
    assert event.after["moves"][f"{second.pk}:2026-11"] == "48.0000000048"
    with pytest.raises(DomainError, match="applied"):
        spend_move_reject(actor=world.inst_admin, move=move, note="late")


def test_a_rejected_move_moves_nothing(world, spent):
    account, pod, second, _ = spent
    move = _split_all_to(world, pod, second, actor=world.lab_admin)
    with pytest.raises(DomainError, match="why"):
        spend_move_reject(actor=world.finance, move=move, note=" ")
    move = spend_move_reject(actor=world.finance, move=move, note="Not that grant")
    assert move.state == SpendMove.State.REJECTED
    assert _on_pod(account, pod, world.allocation) == ALL_OF_NOV
    assert AuditEvent.objects.filter(action="spend_move.reject", target_id=str(move.pk)).exists()
    with pytest.raises(DomainError, match="rejected"):
        spend_move_approve(actor=world.inst_admin, move=move)


def test_from_today_on_a_split_stays_one_persons(world, spent):
    account, pod, second, _ = spent
    today = dt.datetime.combine(NOW.date(), dt.time(), dt.UTC)
    assignment = _split_all_to(world, pod, second, actor=world.lab_admin, starts_at=today)
    assert isinstance(assignment, Assignment) and not SpendMove.objects.exists()
    # A back-dated one that moves no spend (none billed since) stays one person's too.
    assert _on_pod(account, pod, world.allocation) == ALL_OF_NOV


def test_no_move_past_an_issued_invoice(world, spent):
    account, pod, second, _ = spent
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    (october,) = world.funding_source.invoices.filter(month=OCT)
    invoice_issue(actor=world.finance, invoice=october)
    october_day = dt.datetime(2026, 10, 23, tzinfo=dt.UTC)
    # The attack: a back-dated split into October, whose invoice charges the member's
    # allocation already; neither the lab admin's proposal nor an institution admin's move.
    for actor in (world.lab_admin, world.inst_admin):
        with pytest.raises(Refused, match="is issued") as refused:
            _split_all_to(world, pod, second, actor=actor, starts_at=october_day)
        assert refused.value.problems[0][0] == "month"
    assert not SpendMove.objects.exists()
    assert Assignment.objects.filter(resource=pod).count() == 1
    assert _on_pod(account, pod, world.allocation, OCT) == DAY
    # Approved after the invoice was issued: refused then, and nothing moves.
    move = _split_all_to(world, pod, second, actor=world.lab_admin)
    invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    from labgov.invoicing.models import Invoice

    Invoice.objects.filter(funding_source=world.funding_source, month=NOV).update(
        status=Invoice.Status.ISSUED,
        number_year=2026,
        number_seq=99,
        number="2026-00099",
        issued_at=NOW,
        issued_by=world.finance,
    )
    with pytest.raises(Refused, match="is issued"):
        spend_move_approve(actor=world.finance, move=move)
    move.refresh_from_db()
    assert move.state == SpendMove.State.PENDING
    assert _on_pod(account, pod, world.allocation) == ALL_OF_NOV


def test_no_allocation_left_below_zero(world, spent):
    account, pod, second, _ = spent
    # Finance moves all of the pod's November spend to the second allocation...
    cost_transfer_create(
        actor=world.finance,
        account=account,
        resource=pod,
        from_allocation=world.allocation,
        to_allocation=second,
        month=NOV,
        amount_usd=ALL_OF_NOV,
        justification="Eval runs",
    )
    # ...then the attack: the same spend moved again by a back-dated split, which would
    # leave the member's allocation at -48.0000000048 on the pod.
    for actor in (world.lab_admin, world.inst_admin):
        with pytest.raises(Refused, match="left with") as refused:
            _split_all_to(world, pod, second, actor=actor)
        assert "−" in refused.value.message or "-" in refused.value.message
    assert _on_pod(account, pod, world.allocation) == ZERO
    assert _on_pod(account, pod, second) == ALL_OF_NOV
    assert not SpendMove.objects.exists()


def test_the_split_attack_through_the_web_and_finance_approving_it(world, spent, client_for):
    account, pod, second, _ = spent
    url = reverse("transfers:resource_funding", args=[pod.pk])
    attack = {"starts_on": "2026-11-02", "allocation_1": second.pk, "share_1": "100"}
    client = client_for(world.lab_admin)
    response = client.post(url, attack, follow=True)
    assert "Shares proposed" in response.content.decode()
    assert _on_pod(account, pod, world.allocation) == ALL_OF_NOV
    move = SpendMove.objects.get()
    # The proposer cannot decide it through the web either.
    assert client.post(reverse("transfers:move_approve", args=[move.pk])).status_code == 403
    assert SpendMove.objects.get().state == SpendMove.State.PENDING
    finance = client_for(world.finance)
    page = finance.get(reverse("transfers:list")).content.decode()
    assert f'id="move-{move.pk}"' in page and "$48.00" in page
    finance.post(reverse("transfers:move_approve", args=[move.pk]), {"note": "ok"})
    assert SpendMove.objects.get().state == SpendMove.State.APPLIED
    assert _on_pod(account, pod, second) == ALL_OF_NOV


def test_pending_moves_keep_the_list_query_count(
    world, spent, client_for, django_assert_num_queries
):
    account, pod, second, _ = spent
    _split_all_to(world, pod, second, actor=world.lab_admin)
    client = client_for(world.finance)
    with django_assert_num_queries(10):
        assert client.get(reverse("transfers:list")).status_code == 200
    other_pod = type(pod).objects.create(
        account=account, kind=pod.kind, runpod_id="pod-x", name="x", current_allocation=None
    )
    hours(other_pod, T0, 2)
    from labgov.runpod.services import resource_assign

    resource_assign(actor=None, resource=other_pod, allocation=world.allocation)
    _split_all_to(world, other_pod, second, actor=world.lab_admin)
    assert SpendMove.objects.count() == 2
    with django_assert_num_queries(10):
        assert client.get(reverse("transfers:list")).status_code == 200


# The retention case's "move to other funding" -------------------------------------------


@pytest.fixture
def volume_case(world, spent):
    from labgov.retention.policies import Resolver
    from labgov.retention.services import case_open
    from labgov.retention.triggers import candidates
    from tests.alerts.conftest import make_volume

    account, _, second, _ = spent
    volume = make_volume(account, world.allocation)
    hours(volume, T0, 10, amount="0.0137000001")
    from labgov.runpod.services import resource_assign

    resource_assign(actor=None, resource=volume, allocation=world.allocation)
    found = candidates(
        world.institution.pk, resolver=Resolver(world.institution.pk), resource_ids=[volume.pk]
    )
    return case_open(actor=None, candidate=found[0]), volume, second


def test_a_back_dated_case_move_waits_for_a_second_person(world, spent, volume_case):
    from labgov.retention.services import case_move

    account = spent[0]
    case, volume, second = volume_case
    ten_hours = Decimal("0.137000001")
    case = case_move(actor=world.lab_admin, case=case, allocation=second, starts_on=T0.date())
    assert case.state == State.OPEN  # the attack: nothing moved by one person
    volume.refresh_from_db()
    assert volume.current_allocation == world.allocation
    assert _on_pod(account, volume, world.allocation) == ten_hours
    move = SpendMove.objects.get(origin=f"retention-case:{case.pk}")
    assert AuditEvent.objects.filter(action="retention.move_propose").exists()
    move = spend_move_approve(actor=world.inst_admin, move=move)
    case.refresh_from_db()
    assert case.state == State.MOVED and case.moved_to == second
    assert case.moved_from == T0
    assert _on_pod(account, volume, second) == ten_hours
    assert _on_pod(account, volume, world.allocation) == ZERO
    assert AuditEvent.objects.filter(action="retention.move", target_id=str(case.pk)).exists()


def test_the_case_move_attack_through_the_web(world, spent, volume_case, client_for):
    case, volume, second = volume_case
    client = client_for(world.lab_admin)
    url = reverse("retention:action", args=[case.pk, "move"])
    page = client.post(
        url, {"allocation": second.pk, "starts_on": "2026-11-02"}, follow=True
    ).content.decode()
    assert "until finance or an institution admin approves" in page
    case.refresh_from_db()
    volume.refresh_from_db()
    assert case.state == State.OPEN and volume.current_allocation == world.allocation
    assert SpendMove.objects.get().proposed_by == world.lab_admin
