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
    # The approver: the alert; the case opened, its deletion to approve, and done.
    assert told[second_admin.pk] == (2, 4)
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
    # The approver: warned, asked to approve, told it is done.
    assert deleted == {
        world.member.pk: (1, 2),
        world.lab_admin.pk: (1, 2),
        second_admin.pk: (1, 3),
    }
    assert not Notification.objects.filter(recipient__in=bystanders).exists()
    _assert_readable_and_unrepeated()
