"""Objects the API tests act on, made only when a test asks for them."""

import itertools

import pytest
from django.utils import timezone

from labgov.alerts.models import Alert, Kind
from labgov.notifications.models import Notification
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
        "now": timezone.now,
    }
    made = {}

    def get(name):
        if name not in made:
            made[name] = makers[name]()
        return made[name]

    get.fresh = made.clear
    return get
