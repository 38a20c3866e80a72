"""How often each person is told through journeys 3 and 4 of DOMAIN.md, played through the
services against the simulator (the browser tests play the pages): at most 3 notifications
(and at most 3 times told) per person per case, nothing for people it does not concern, no
two notifications with the same words, and no text reading ".." or "word ."."""

import datetime as dt
import re
from collections import Counter

import pytest
from django.db import transaction
from django.utils import timezone

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert, Kind
from labgov.notifications.models import Notification
from labgov.retention import services
from labgov.retention.deletion import Outcome, case_delete_carry_out
from labgov.retention.evaluation import retention_evaluate
from labgov.retention.models import RetentionCase, State
from tests.alerts.conftest import bill
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    MembershipFactory,
    ResourceFactory,
)

pytestmark = pytest.mark.django_db

STOPPED_POD = "a4n8d2r6t0w5y1"  # vision-annotate: stopped, 100 GB volume disk (default scenario)
DELETED, HELD = "th5d8r2y7e", "nv4lpd7x2k"  # 300 GB and 500 GB network volumes
DOUBLE_STOP = re.compile(r"(?<!\.)\.\.(?!\.)")
SPACE_BEFORE_PUNCTUATION = re.compile(r"\s[.,;:!?](\s|$)")


@pytest.fixture
def bystanders(world):
    """A member of the same lab whose data none of it is, and someone of no lab at all."""
    return [MembershipFactory(role="member", lab=world.lab).user, world.outsider]


def _told(*threads):
    """{person id: (notifications, times told)} over the threads of a case or an alert."""
    rows = Notification.objects.filter(thread_key__in=threads)
    counts: dict[int, list[int]] = {}
    for recipient, times in rows.values_list("recipient_id", "times_told"):
        entry = counts.setdefault(recipient, [0, 0])
        entry[0] += 1
        entry[1] += times
    return {person: tuple(entry) for person, entry in counts.items()}


def _assert_readable_and_unrepeated():
    rows = list(Notification.objects.values_list("recipient_id", "subject", "body"))
    same = [key for key, n in Counter(rows).items() if n > 1]
    assert not same, f"identical notifications: {same}"
    for _, subject, body in rows:
        for text in (subject, body):
            assert not DOUBLE_STOP.search(text), text
            assert not SPACE_BEFORE_PUNCTUATION.search(text), text


def _volume(account, allocation, runpod_id, name, size_gb, data_center):
    return ResourceFactory(
        account=account,
        kind="network_volume",
        runpod_id=runpod_id,
        name=name,
        status="",
        size_gb=size_gb,
        volume_type="STANDARD",
        data_center_id=data_center,
        current_allocation=allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )


def test_journey_3_a_stopped_pods_deletion_tells_each_person_at_most_three_times(
    clock, world, sim, sim_account, policy, second_admin, fast_clients, bystanders
):
    pod = ResourceFactory(
        account=sim_account,
        kind="pod",
        runpod_id=STOPPED_POD,
        name="vision-annotate",
        status="EXITED",
        volume_disk_gb=100,
        data_center_id="CA-MTL-1",
        current_allocation=world.allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )
    bill(pod, timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1))
    alerts_evaluate(institution_id=world.institution.pk)
    alerts_evaluate(institution_id=world.institution.pk)  # seen again: nobody told again
    alert = Alert.objects.get(kind=Kind.STOPPED_POD_DISK)

    with transaction.atomic():
        case = services.case_open_for_resource(actor=world.lab_admin, resource=pod)
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="results copied")
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED
    assert RetentionCase.objects.get(pk=case.pk).state == State.DELETED

    told = _told(f"alert:{alert.pk}", f"retention:{case.pk}")
    # The owner: the alert, and the case's one notification (opened, then deleted).
    assert told[world.member.pk] == (2, 3)
    # The requester: the alert, and the deletion carried out.
    assert told[world.lab_admin.pk] == (2, 2)
    # The approver: the alert; the case opened, its deletion to approve (what asks them to
    # act; that it was done shows on the same notification, quietly).
    assert told[second_admin.pk] == (2, 3)
    assert all(n <= 3 for n, _ in told.values())
    case_told = _told(f"retention:{case.pk}")
    assert all(times <= 3 for _, times in case_told.values())
    assert not set(told) & {u.pk for u in bystanders}
    assert set(told) == {world.member.pk, world.lab_admin.pk, second_admin.pk}
    mine = Notification.objects.get(recipient=world.member, thread_key=f"retention:{case.pk}")
    assert mine.subject.startswith("Deleted: the pod volume disk of vision-annotate")
    _assert_readable_and_unrepeated()


def test_journey_4_a_hold_and_a_deletion_tell_each_person_at_most_three_times_per_case(
    clock, world, sim, sim_account, ending_grant, policy, second_admin, fast_clients, bystanders
):
    _, on_grant = ending_grant
    thesis_money = AllocationFactory(
        funding_source=FundingSourceFactory(lab=world.lab, name="Department thesis fund"),
        user=world.member,
    )
    _volume(sim_account, on_grant, DELETED, "old-thesis-data", 300, "US-KS-2")
    _volume(sim_account, on_grant, HELD, "nlp-datasets", 500, "EU-RO-1")

    retention_evaluate(institution_id=world.institution.pk)
    retention_evaluate(institution_id=world.institution.pk)  # again: nobody told again
    cases = {c.resource.runpod_id: c for c in RetentionCase.objects.select_related("resource")}

    services.case_hold(
        actor=world.lab_admin,
        case=cases[HELD],
        kind="thesis",
        reason="Kim's thesis data until the defence",
        payer=thesis_money,
    )
    case = services.deletion_request(
        actor=world.lab_admin, case=cases[DELETED], reason="copied to the archive."
    )
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED

    held = _told(f"retention:{cases[HELD].pk}")
    # Warned once each; the owner hears of the hold (and who pays now), the admin who placed
    # it does not, the other admin only sees the words change.
    assert held == {world.member.pk: (1, 2), world.lab_admin.pk: (1, 1), second_admin.pk: (1, 1)}
    approver_row = Notification.objects.get(
        recipient=second_admin, thread_key=f"retention:{cases[HELD].pk}"
    )
    assert "put on hold" in approver_row.subject

    deleted = _told(f"retention:{case.pk}")
    # The owner: warned, and told of the deletion. The requester: warned, told it is done.
    # The approver: warned, asked to approve; that it was done shows on that notification.
    assert deleted == {
        world.member.pk: (1, 2),
        world.lab_admin.pk: (1, 2),
        second_admin.pk: (1, 2),
    }
    approver_row = Notification.objects.get(
        recipient=second_admin, thread_key=f"retention:{case.pk}"
    )
    assert approver_row.subject.startswith("Deleted: the network volume old-thesis-data")
    assert not Notification.objects.filter(recipient__in=bystanders).exists()
    _assert_readable_and_unrepeated()


BLOCKED, BLOCKING_POD = "vc8h2m5q1z", "h6g5f4d3s2a1p0"  # vision-checkpoints; vision-data-sync


def test_journey_4_blocked_by_a_stopped_pod_refused_and_finished_tells_at_most_three_times(
    clock, world, sim, sim_account, ending_grant, policy, second_admin, fast_clients, bystanders
):
    """The blocked path of journey 4 (the browser test plays its pages): a stopped pod mounts
    the volume, so approval is refused; the pod is included; Runpod refuses once (409); the
    deletion is asked for and approved again, and done. The approver is told only what asks
    them to act: warned, asked, asked again (naming the refusal)."""
    from labgov.core.errors import DomainError

    _, on_grant = ending_grant
    _volume(sim_account, on_grant, BLOCKED, "vision-checkpoints", 750, "US-KS-2")
    pod = ResourceFactory(
        account=sim_account,
        kind="pod",
        runpod_id=BLOCKING_POD,
        name="vision-data-sync",
        status="EXITED",
        container_disk_gb=10,
        network_volume_id=BLOCKED,
        data_center_id="US-KS-2",
        current_allocation=on_grant,
    )
    retention_evaluate(institution_id=world.institution.pk)
    retention_evaluate(institution_id=world.institution.pk)  # again: nobody told again
    case = RetentionCase.objects.get(resource__runpod_id=BLOCKED)
    thread = f"retention:{case.pk}"

    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    with pytest.raises(DomainError, match="Deleting is not possible now"):
        services.deletion_approve(actor=second_admin, case=case)
    services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)
    sim.inject_fault("/v2/network-volumes/", "409", method="DELETE")
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.REFUSED
    clock.shift(dt.timedelta(minutes=10))
    assert _told(thread)[world.lab_admin.pk] == (1, 2)  # the requester hears of the refusal
    approver_row = Notification.objects.get(recipient=second_admin, thread_key=thread)
    assert approver_row.subject.startswith("Not deleted")  # the approver sees it, in place
    assert approver_row.times_told == 2

    case = services.deletion_request(
        actor=world.lab_admin, case=RetentionCase.objects.get(pk=case.pk), reason="pod gone"
    )
    approver_row.refresh_from_db()
    assert approver_row.times_told == 3 and approver_row.read_at is None
    assert approver_row.subject.startswith("Approve or withdraw")
    assert "last attempt failed: Runpod refused to delete it (HTTP 409)" in approver_row.body
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED
    assert BLOCKED not in {v["id"] for v in sim.state.list_volumes()}

    told = _told(thread)
    # The owner (of the volume and the pod): warned, told the pod goes too, told it is done.
    # The requester: warned, told of the refusal, told it is done. The approver: warned,
    # asked, asked again; the outcome shows on their notification.
    assert told == {
        world.member.pk: (1, 3),
        world.lab_admin.pk: (1, 3),
        second_admin.pk: (1, 3),
    }
    approver_row.refresh_from_db()
    assert approver_row.subject.startswith("Deleted: the network volume vision-checkpoints")
    assert not Notification.objects.filter(recipient__in=bystanders).exists()
    _assert_readable_and_unrepeated()


def test_after_a_case_moves_labs_the_first_labs_people_are_told_once_and_nothing_after(
    clock, world, sim, sim_account, ending_grant, policy, second_admin, fast_clients, bystanders
):
    """The first lab asked and approved a deletion; an institution admin re-attributes the
    volume to NLP (its deletion no longer counts); NLP's admins take the case on and advance
    it to the end. The first lab's people are told once that it moved and who decides now;
    their notification never changes again."""
    from labgov.runpod.models import Resource
    from labgov.runpod.services import resource_assign

    _, on_grant = ending_grant
    volume = _volume(sim_account, on_grant, DELETED, "old-thesis-data", 300, "US-KS-2")
    nlp_admin = MembershipFactory(role="lab_admin", lab=world.other_lab).user
    nlp_second = MembershipFactory(role="lab_admin", lab=world.other_lab).user
    nlp_grant, _ = ending_grant
    nlp_money = AllocationFactory(  # ending as the first lab's grant does: the case stays
        funding_source=FundingSourceFactory(
            lab=world.other_lab, name="NLP money", end_date=nlp_grant.end_date
        ),
        user=world.other_member,
    )
    retention_evaluate(institution_id=world.institution.pk)
    case = RetentionCase.objects.get(resource=volume)
    thread = f"retention:{case.pk}"
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    services.deletion_approve(actor=world.inst_admin, case=case)  # its task not run yet

    first_lab = [world.member, world.lab_admin, second_admin, world.inst_admin]
    before = {
        row.recipient_id: row.times_told
        for row in Notification.objects.filter(thread_key=thread, recipient__in=first_lab)
    }
    resource_assign(
        actor=world.inst_admin,
        resource=Resource.objects.get(pk=volume.pk),
        allocation=nlp_money,
        note="NLP's data",
    )
    moved = {
        row.recipient_id: row
        for row in Notification.objects.filter(thread_key=thread, recipient__in=first_lab)
    }
    # Told once each that it moved, and who decides now (not the admin who moved it).
    for person in (world.member, world.lab_admin, second_admin):
        row = moved[person.pk]
        assert row.times_told == before[person.pk] + 1, person
        assert row.subject.endswith("is another lab's now")
        assert "NLP's lab admins decide it now" in row.body
        assert nlp_admin.get_full_name() in row.body
    assert world.inst_admin.pk not in moved  # approved, but moved it: they know
    case.refresh_from_db()
    assert case.lab_id == world.other_lab.pk and case.state == State.OPEN
    assert _told(thread)[nlp_admin.pk][0] == 1  # the paying lab's admins get the case

    # NLP advances it: kept for a while (an event every follower of the case would see),
    # then its deletion asked for, approved and done.
    clock.shift(dt.timedelta(hours=2))
    case = services.case_keep(
        actor=nlp_admin,
        case=RetentionCase.objects.get(pk=case.pk),
        reason="NLP checks what is in it",
        review_date=timezone.now().date() + dt.timedelta(days=3),
    )
    case = services.deletion_request(actor=nlp_admin, case=case, reason="NLP archived it")
    case = services.deletion_approve(actor=nlp_second, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED

    after = {
        row.recipient_id: row
        for row in Notification.objects.filter(thread_key=thread, recipient__in=first_lab)
    }
    for person_id, row in moved.items():
        now = after[person_id]
        assert (now.subject, now.body, now.times_told, now.created_at) == (
            row.subject,
            row.body,
            row.times_told,
            row.created_at,
        ), person_id
    assert set(after) == set(moved)
    told = _told(thread)
    # NLP's people: handed the case; then the requester told it is done, the approver asked,
    # the new owner told it is kept and done.
    assert (told[nlp_admin.pk], told[nlp_second.pk], told[world.other_member.pk]) == (
        (1, 2),
        (1, 2),
        (1, 3),
    )
    assert not Notification.objects.filter(recipient__in=bystanders).exists()
    _assert_readable_and_unrepeated()
