"""Objects the API tests act on, made only when a test asks for them."""

import itertools
from decimal import Decimal

import pytest
from django.utils import timezone

from labgov.alerts.models import Alert, Kind
from labgov.notifications.models import Notification
from labgov.retention.models import Hold, RetentionCase
from tests.factories import ResourceFactory, RunpodAccountFactory

_SUBJECTS = itertools.count()


def make_alert(world, **fields) -> Alert:
    values = {
        "institution": world.institution,
        "lab": world.lab,
        "kind": Kind.BUDGET_THRESHOLD,
        "subject_key": f"allocation:{world.allocation.pk}:{next(_SUBJECTS)}",
        "subject_label": "Allocation",
        "allocation": world.allocation,
        "owner": world.member,
        "severity": "warning",
        "title": "80 % of the allocation is used",
        "level": 80,
    }
    values.update(fields)
    return Alert.objects.create(**values)


_NUMBERS = itertools.count(1)


def make_invoice(world, source=None, *, status="issued", allocation=None):
    """An invoice of October 2026 with a usage line and a credit, charged to the member's
    allocation on the member's lab's source (on another source to `allocation`, or nobody's)."""
    from tests.exports.conftest import make_invoice as build

    source = source or world.funding_source
    if source == world.funding_source:
        allocation = world.allocation
    return build(
        source,
        status=status,
        number_seq=next(_NUMBERS) if status != "draft" else None,
        allocation=allocation,
        lines=[
            ("gpu_compute", "pod train", Decimal("2"), Decimal("1.5"), "3.0049999", True),
            ("credit", "goodwill", None, None, "-1.00", False),
        ],
    )


def make_retention_case(world, account, **fields) -> RetentionCase:
    volume = ResourceFactory(
        account=account,
        kind="network_volume",
        status="",
        size_gb=100,
        current_allocation=world.allocation,
    )
    values = {
        "institution": world.institution,
        "lab": world.lab,
        "resource": volume,
        "reason": "idle",
        "owner": world.member,
        "payer": world.allocation,
        "funding_source": world.funding_source,
        "size_gb": 100,
        "monthly_cost_usd": Decimal("7.0000000001"),
        "due_date": timezone.now().date(),
    }
    values.update(fields)
    case = RetentionCase.objects.create(**values)
    Hold.objects.create(
        resource=volume,
        case=case,
        kind="thesis",
        reason="Thesis due in spring",
        payer=world.allocation,
        placed_by=world.lab_admin,
    )
    return case


@pytest.fixture
def objects(world, draft, submitted):
    def account():
        return RunpodAccountFactory(institution=world.institution)

    makers = {
        "draft": draft,
        "submitted": submitted,
        "alert": lambda: make_alert(world),
        "account": account,
        "paid_pod": lambda: ResourceFactory(
            account=get("account"), current_allocation=world.allocation
        ),
        "unattributed_pod": lambda: ResourceFactory(account=get("account")),
        "notification": lambda: Notification.objects.create(
            recipient=world.member, kind="test", subject="Hello", dedupe_key="t1"
        ),
        "membership": lambda: world.member.memberships.get(),
        "invoice": lambda: make_invoice(world),
        "other_invoice": lambda: make_invoice(world, world.other_funding_source),
        "line": lambda: get("invoice").lines.get(kind="usage"),
        "retention_case": lambda: make_retention_case(world, get("account")),
        "now": timezone.now,
    }
    made = {}

    def get(name):
        if name not in made:
            made[name] = makers[name]()
        return made[name]

    get.fresh = made.clear
    return get
