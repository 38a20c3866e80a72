import datetime as dt

import pytest
from django.utils import timezone

from labgov.retention.models import RetentionPolicy
from labgov.retention.policies import Resolver
from labgov.retention.services import case_open
from labgov.retention.triggers import candidates
from tests.alerts.conftest import T0, make_pod, make_volume  # noqa: F401 - re-exported
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    MembershipFactory,
    RunpodAccountFactory,
)


@pytest.fixture
def clock():
    import time_machine

    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution, name="Lab Runpod")


@pytest.fixture
def ending_grant(world):
    """A grant of the lab ending in 20 days, with the member's allocation on it."""
    today = timezone.now().date()
    source = FundingSourceFactory(
        lab=world.lab, name="Ending grant", end_date=today + dt.timedelta(days=20)
    )
    allocation = AllocationFactory(funding_source=source, user=world.member)
    return source, allocation


@pytest.fixture
def policy(world):
    return RetentionPolicy.objects.create(
        institution=world.institution,
        is_active=True,
        funding_grace_days=0,
        membership_grace_days=14,
        idle_grace_days=60,
        warning_days="30,7,1",
        approvers_required=1,
    )


@pytest.fixture
def second_admin(world):
    return MembershipFactory(role="lab_admin", lab=world.lab).user


def open_case(resource):
    institution_id = resource.account.institution_id
    found = candidates(
        institution_id, resolver=Resolver(institution_id), resource_ids=[resource.pk]
    )
    assert found, "the resource is no candidate"
    from django.db import transaction

    with transaction.atomic():
        return case_open(actor=None, candidate=found[0])
