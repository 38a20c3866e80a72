import datetime as dt
from decimal import Decimal

import pytest

from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.runpod.attribution import BEGINNING, Timeline, rule_for, rules_apply, usage_reconcile
from labgov.runpod.models import Assignment, AttributionRule, BillingRecord
from labgov.runpod.services import resource_assign, rule_create
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

UTC = dt.UTC
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)


def _hours(resource, start, n, amount="1.0000000001"):
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind=resource.kind,
            bucket_start=start + dt.timedelta(hours=i),
            bucket_end=start + dt.timedelta(hours=i + 1),
            total_usd=Decimal(amount),
            gpu_usd=Decimal(amount),
        )
        for i in range(n)
    )


def _spent(allocation) -> Decimal:
    return Allocation.objects.with_figures().get(pk=allocation.pk).spent_usd


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution)


def test_timeline_picks_latest_assignment_at_or_before_the_bucket(world, account):
    pod = ResourceFactory(account=account)
    other = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    Assignment.objects.create(
        resource=pod, allocation=world.allocation, starts_at=BEGINNING, source="rule"
    )
    Assignment.objects.create(resource=pod, allocation=other, starts_at=T0, source="manual")
    timeline = Timeline.for_resources([pod.pk])
    assert timeline.allocation_at(pod.pk, T0 - dt.timedelta(hours=1)) == world.allocation.pk
    assert timeline.allocation_at(pod.pk, T0) == other.pk
    assert timeline.allocation_at(12345, T0) is None


@pytest.mark.parametrize(
    ("kind", "pattern", "fields", "matches"),
    [
        ("name_prefix", "vision-", {"name": "vision-train"}, True),
        ("name_prefix", "vision-", {"name": "nlp-train"}, False),
        ("env_var", "PROJECT=eval", {"env": {"PROJECT": "eval"}}, True),
        ("env_var", "PROJECT=eval", {"env": {"PROJECT": "train"}}, False),
        ("template", "tpl-123", {"template_id": "tpl-123"}, True),
        ("template", "tpl-123", {"template_id": ""}, False),
        ("account", "", {}, True),
    ],
)
def test_each_rule_kind(world, account, kind, pattern, fields, matches):
    rule = AttributionRule.objects.create(
        lab=world.lab, account=account, kind=kind, pattern=pattern, allocation=world.allocation
    )
    resource = ResourceFactory.build(account=account, **fields)
    assert (rule_for(resource, [rule]) == rule) is matches


def test_rule_precedence_env_then_template_then_longest_prefix_then_account(world, account):
    def rule(kind, pattern):
        return AttributionRule.objects.create(
            lab=world.lab, account=account, kind=kind, pattern=pattern, allocation=world.allocation
        )

    whole = rule("account", "")
    short = rule("name_prefix", "vis")
    long = rule("name_prefix", "vision-")
    template = rule("template", "tpl")
    env = rule("env_var", "P=1")
    rules = [whole, short, long, template, env]
    pod = ResourceFactory.build(account=account, name="vision-x", template_id="tpl", env={"P": "1"})
    assert rule_for(pod, rules) == env
    pod.env = {}
    assert rule_for(pod, rules) == template
    pod.template_id = ""
    assert rule_for(pod, rules) == long
    pod.name = "other"
    assert rule_for(pod, rules) == whole


def test_env_allocation_variable_assigns_from_the_beginning(world, account):
    pod = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": str(world.allocation.pk)})
    _hours(pod, T0, 3)
    assert rules_apply(account=account) == [pod.pk]
    assignment = pod.assignments.get()
    assert assignment.starts_at == BEGINNING and assignment.allocation == world.allocation
    pod.refresh_from_db()
    assert pod.current_allocation == world.allocation


def test_env_naming_another_institutions_allocation_is_ignored(world, account):
    foreign = AllocationFactory()
    pod = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": str(foreign.pk)})
    assert rules_apply(account=account) == []
    assert not pod.assignments.exists()


def test_usage_reconcile_posts_differences_only(world, account):
    pod = ResourceFactory(account=account)
    Assignment.objects.create(
        resource=pod, allocation=world.allocation, starts_at=BEGINNING, source="rule"
    )
    _hours(pod, T0, 30, amount="0.000137")  # crosses into the next UTC day
    BillingRecord.objects.update(allocation=world.allocation)
    days = {T0.date(), (T0 + dt.timedelta(days=1)).date()}
    assert usage_reconcile(account=account, days=days) == 2
    assert _spent(world.allocation) == Decimal("0.000137") * 30
    assert usage_reconcile(account=account, days=days) == 0  # nothing changed, nothing posted
    BillingRecord.objects.filter(bucket_start=T0).update(total_usd=Decimal("1"))
    assert usage_reconcile(account=account, days=days) == 1
    assert _spent(world.allocation) == Decimal("0.000137") * 29 + 1
    assert LedgerEntry.objects.filter(kind="usage").count() == 3


def test_manual_assignment_claims_history_and_reassignment_keeps_past(world, account):
    pod = ResourceFactory(account=account)
    _hours(pod, T0, 48, amount="2")
    first = resource_assign(actor=world.lab_admin, resource=pod, allocation=world.allocation)
    assert first.starts_at == BEGINNING
    assert _spent(world.allocation) == Decimal(96)
    other = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    switch = T0 + dt.timedelta(hours=40)
    resource_assign(actor=world.lab_admin, resource=pod, allocation=other, starts_at=switch)
    assert _spent(world.allocation) == Decimal(80)  # hours 0..39
    assert _spent(other) == Decimal(16)  # hours 40..47
    fs = FundingSource.objects.with_figures().get(pk=world.funding_source.pk)
    assert fs.spent_usd == Decimal(96)
    with pytest.raises(Exception, match="cannot start before"):
        resource_assign(
            actor=world.lab_admin, resource=pod, allocation=world.allocation, starts_at=T0
        )


def test_rule_create_applies_to_existing_unassigned_resources(world, account):
    pod = ResourceFactory(account=account, name="vision-train-1")
    _hours(pod, T0, 5, amount="3")
    rule_create(
        actor=world.lab_admin,
        account=account,
        kind="name_prefix",
        pattern="vision-",
        allocation=world.allocation,
    )
    assert BillingRecord.objects.filter(allocation=world.allocation).count() == 5
    assert _spent(world.allocation) == Decimal(15)


@pytest.mark.parametrize(
    ("kind", "pattern", "message"),
    [
        ("name_prefix", "", "needs a pattern"),
        ("env_var", "NOEQUALS", "NAME=value"),
        ("bogus", "x", "Unknown"),
    ],
)
def test_rule_create_validation(world, account, kind, pattern, message):
    from labgov.core.errors import DomainError

    with pytest.raises(DomainError, match=message):
        rule_create(
            actor=world.lab_admin,
            account=account,
            kind=kind,
            pattern=pattern,
            allocation=world.allocation,
        )


def test_rule_for_another_labs_account_is_refused(world):
    from labgov.core.errors import DomainError

    lab_account = RunpodAccountFactory(institution=world.institution, lab=world.other_lab)
    with pytest.raises(DomainError, match="another lab"):
        rule_create(
            actor=world.lab_admin,
            account=lab_account,
            kind="account",
            pattern="",
            allocation=world.allocation,
        )
