"""labgov itself (actor None: a command, a scheduled job) calls services as people do: where
the others accept the system it is accepted, and a power only a person has is refused in
words, never with an AttributeError. A scope kept on a user is read again after a lab or a
membership changes in the same process."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from labgov.accounts import access
from labgov.accounts.models import Role
from labgov.accounts.services import lab_create, membership_grant
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.funding.services import allocation_create, funding_source_create
from labgov.runpod.models import AttributionRule
from labgov.runpod.services import rule_create
from tests.factories import ResourceFactory, RunpodAccountFactory, UserFactory


def test_the_system_has_no_roles():
    assert access.scope_for(None) is access.ANONYMOUS
    assert not access.can_manage_lab(None, 1)


def test_the_system_makes_an_attribution_rule_from_now_on(world):
    account = RunpodAccountFactory(institution=world.institution)
    rule = rule_create(
        actor=None,
        account=account,
        kind="name_prefix",
        pattern="vision-",
        allocation=world.allocation,
    )
    assert AttributionRule.objects.get(pk=rule.pk).is_active
    event = AuditEvent.objects.get(action="attribution_rule.create")
    assert event.actor is None


def test_the_system_may_not_start_a_rule_in_the_past(world):
    """Starting earlier moves spend already incurred: that takes a person."""
    account = RunpodAccountFactory(institution=world.institution)
    with pytest.raises(DomainError, match="only an institution admin may start it earlier"):
        rule_create(
            actor=None,
            account=account,
            kind="name_prefix",
            pattern="vision-",
            allocation=world.allocation,
            starts_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        )


def _person_only_calls(world):
    from labgov.api.services import token_create, token_revoke
    from labgov.funding.proposals import funding_proposal_create
    from labgov.idle.services import owner_allows_stop
    from labgov.provisioning.services.requests import request_save
    from labgov.runpod.removal import account_removal_request, account_remove

    account = RunpodAccountFactory(institution=world.institution)
    pod = ResourceFactory(account=account)
    return {
        "token_create": lambda: token_create(actor=None, name="x", scope="read", days=1),
        "token_revoke": lambda: token_revoke(actor=None, token=None),
        "request_save": lambda: request_save(actor=None, allocation=world.allocation, values={}),
        "owner_allows_stop": lambda: owner_allows_stop(actor=None, resource=pod, allowed=True),
        "account_removal_request": lambda: account_removal_request(actor=None, account=account),
        "account_remove": lambda: account_remove(actor=None, account=account),
        "funding_proposal_create": lambda: funding_proposal_create(
            actor=None, lab=world.lab, values={}
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "token_create",
        "token_revoke",
        "request_save",
        "owner_allows_stop",
        "account_removal_request",
        "account_remove",
        "funding_proposal_create",
    ],
)
def test_a_power_only_a_person_has_is_refused_to_the_system_in_words(world, name):
    call = _person_only_calls(world)[name]
    with pytest.raises(DomainError) as refused:
        call()
    assert str(refused.value)


@time_machine.travel(dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC), tick=False)
def test_a_new_lab_is_seen_by_the_same_admin_object_at_once(world):
    """A command creates a lab and then allocates in it, as one institution admin object: the
    scope kept on that object is read again after the lab is made."""
    admin = world.inst_admin
    assert world.lab.pk in access.scope_for(admin).managed_labs  # the scope is kept now
    lab = lab_create(actor=admin, institution=world.institution, name="Robotics")
    assert lab.pk in access.scope_for(admin).managed_labs
    student = UserFactory()
    membership_grant(
        actor=admin, user=student, role=Role.MEMBER, institution=world.institution, lab=lab
    )
    source = funding_source_create(
        actor=world.finance,
        lab=lab,
        name="Robotics grant",
        start_date=dt.date(2026, 1, 1),
        end_date=dt.date(2028, 12, 31),
        amount_usd=Decimal("1000"),
    )
    allocation = allocation_create(
        actor=admin,
        funding_source=source,
        cap_usd=Decimal("100"),
        start_date=dt.date(2026, 1, 1),
        end_date=dt.date(2028, 12, 31),
        user=student,
    )
    assert allocation.funding_source.lab_id == lab.pk


def test_a_role_granted_in_the_same_process_is_seen_on_the_same_user_object(world):
    person = UserFactory()
    assert world.lab.pk not in access.scope_for(person).managed_labs
    membership_grant(
        actor=world.inst_admin,
        user=person,
        role=Role.LAB_ADMIN,
        institution=world.institution,
        lab=world.lab,
    )
    assert world.lab.pk in access.scope_for(person).managed_labs
