import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.db import connection

from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.runpod.attribution import (
    BEGINNING,
    UNKNOWN_TAG,
    Timeline,
    allocation_at_sql,
    rule_for,
    rules_apply,
    timeline_sql,
    usage_reconcile,
)
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
    """An account the institution's labs share (no lab of its own)."""
    return RunpodAccountFactory(institution=world.institution)


@pytest.fixture
def vision_account(world):
    """The Vision lab's own account, where its allocations' tags count at once."""
    return RunpodAccountFactory(institution=world.institution, lab=world.lab)


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


def test_the_sql_timeline_answers_as_timeline_does(postgres, world, account):
    """The writers' SQL (billing_store, focus) reads each bucket's allocation from the
    resource's timeline arrays: the same answer as Timeline.allocation_at at every moment,
    before the first assignment, at a start, between, for assignments starting at the same
    moment (the later one made wins), for one to nobody, and for a resource without any."""
    pod, bare = ResourceFactory(account=account), ResourceFactory(account=account)
    other = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    third = AllocationFactory(funding_source=world.funding_source, user=world.member)
    hour = dt.timedelta(hours=1)
    for starts_at, allocation in [
        (T0, world.allocation),
        (T0 + 3 * hour, other),
        (T0 + 3 * hour, third),  # the same moment, made later: it decides from then on
        (T0 + 5 * hour, None),  # to nobody
        (T0 + 7 * hour, other),
    ]:
        Assignment.objects.create(
            resource=pod, allocation=allocation, starts_at=starts_at, source="manual"
        )
    moments = [T0 + k * hour / 2 for k in range(-2, 20)]
    timeline = Timeline.for_resources([pod.pk, bare.pk])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT r.id, m, {allocation_at_sql("t", "m")}
            FROM runpod_resource r LEFT JOIN LATERAL {timeline_sql("r")} t ON true
            CROSS JOIN unnest(%s::timestamptz[]) m
            WHERE r.id IN (%s, %s)
            """,
            [moments, pod.pk, bare.pk],
        )
        rows = cursor.fetchall()
    assert len(rows) == 2 * len(moments)
    answers = {(resource_id, moment): allocation for resource_id, moment, allocation in rows}
    expected = {
        (resource_id, moment): timeline.allocation_at(resource_id, moment)
        for resource_id in (pod.pk, bare.pk)
        for moment in moments
    }
    assert answers == expected
    # The timeline above, spelled out at a few moments.
    assert answers[(pod.pk, T0 - hour)] is None
    assert answers[(pod.pk, T0)] == world.allocation.pk
    assert answers[(pod.pk, T0 + 3 * hour)] == third.pk
    assert answers[(pod.pk, T0 + 5 * hour)] is None
    assert answers[(pod.pk, T0 + 9 * hour)] == other.pk
    assert {answers[(bare.pk, m)] for m in moments} == {None}


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


def test_allocation_tag_assigns_from_the_resources_creation(world, vision_account):
    account = vision_account
    pod = ResourceFactory(
        account=account,
        env={"LABGOV_ALLOCATION": world.allocation.tag_code},
        created_at_runpod=T0 + dt.timedelta(minutes=90),
    )
    _hours(pod, T0 + dt.timedelta(hours=1), 3)
    assert rules_apply(account=account) == [pod.pk]
    assignment = pod.assignments.get()
    assert assignment.starts_at == T0 + dt.timedelta(hours=1)
    assert assignment.allocation == world.allocation
    pod.refresh_from_db()
    assert pod.current_allocation == world.allocation and pod.tag_refusal == ""


def test_tag_codes_are_random_and_distinct(world):
    other = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    assert other.tag_code != world.allocation.tag_code
    assert len(world.allocation.tag_code) == len("lga-") + 24


@pytest.mark.parametrize("tag", ["number", "foreign code", "unknown code"])
def test_a_tag_that_is_no_allocations_code_here_is_refused(world, account, tag):
    value = {
        "number": str(world.allocation.pk),
        "foreign code": AllocationFactory().tag_code,
        "unknown code": "lga-000000000000000000000000",
    }[tag]
    pod = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": value})
    AttributionRule.objects.create(
        lab=world.lab, account=account, kind="account", allocation=world.allocation
    )
    assert rules_apply(account=account) == []
    assert not pod.assignments.exists()  # not even the account-wide rule takes it
    pod.refresh_from_db()
    assert pod.tag_refusal == UNKNOWN_TAG


def test_without_rules_tags_still_assign_and_refusals_still_clear(
    world, vision_account, monkeypatch
):
    """With no rule only resources carrying a tag, or a refusal to clear, are read (an
    account keeps every resource it ever had): the tagged one is assigned, the one whose tag
    went is cleared, the untagged ones stay as they are, whatever the batch they fall in."""
    plain = [ResourceFactory(account=vision_account) for _ in range(3)]
    tagged = ResourceFactory(
        account=vision_account, env={"LABGOV_ALLOCATION": world.allocation.tag_code}
    )
    untagged_now = ResourceFactory(account=vision_account, tag_refusal=UNKNOWN_TAG)
    monkeypatch.setattr("labgov.runpod.attribution.RULES_APPLY_BATCH", 1)
    assert rules_apply(account=vision_account) == [tagged.pk]
    untagged_now.refresh_from_db()
    assert untagged_now.tag_refusal == ""
    assert list(Assignment.objects.values_list("resource_id", "allocation_id")) == [
        (tagged.pk, world.allocation.pk)
    ]
    for resource in plain:
        resource.refresh_from_db()
        assert resource.tag_refusal == "" and resource.current_allocation is None


def test_another_labs_tag_is_a_claim_on_a_shared_account_and_refused_on_a_labs_own(
    world, account, vision_account
):
    nlp = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    shared = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": nlp.tag_code})
    own = ResourceFactory(account=vision_account, env={"LABGOV_ALLOCATION": nlp.tag_code})
    assert rules_apply(account=account) == []
    assert shared.tag_claims.get().allocation == nlp
    assert rules_apply(account=vision_account) == []
    own.refresh_from_db()
    assert "may not use this Runpod account" in own.tag_refusal


def test_an_inactive_allocations_tag_is_refused(world, account):
    from labgov.funding.models import FundingSource as FS

    ended = AllocationFactory(
        funding_source=world.funding_source,
        user=world.lab_admin,
        start_date=world.funding_source.start_date,
        end_date=world.funding_source.start_date,
    )
    pod = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": ended.tag_code})
    assert rules_apply(account=account) == []
    pod.refresh_from_db()
    assert "not active" in pod.tag_refusal
    FS.objects.filter(pk=world.funding_source.pk).update(status=FS.Status.CLOSED)
    live = ResourceFactory(account=account, env={"LABGOV_ALLOCATION": world.allocation.tag_code})
    assert rules_apply(account=account) == []
    live.refresh_from_db()
    assert "funding source is closed" in live.tag_refusal


def test_a_tag_never_reaches_into_a_closed_period(world, vision_account):
    account = vision_account
    pod = ResourceFactory(
        account=account,
        env={"LABGOV_ALLOCATION": world.allocation.tag_code},
        created_at_runpod=T0 - dt.timedelta(days=2),
    )
    _hours(pod, T0 - dt.timedelta(hours=5), 10, amount="2")
    _close_october(world)
    assert rules_apply(account=account) == [pod.pk]
    assert pod.assignments.get().starts_at == T0


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


def _close_october(world):
    from labgov.usage.periods import period_close

    period_close(actor=world.finance, institution=world.institution, year=2026, month=10)


def test_rule_create_applies_from_when_it_is_made(world, account):
    pod = ResourceFactory(account=account, name="vision-train-1")
    _hours(pod, T0, 20, amount="3")
    with time_machine.travel(T0 + dt.timedelta(hours=15), tick=False):
        rule_create(
            actor=world.inst_admin,
            account=account,
            kind="name_prefix",
            pattern="vision-",
            allocation=world.allocation,
        )
    assert BillingRecord.objects.filter(allocation=world.allocation).count() == 5
    assert _spent(world.allocation) == Decimal(15)


def test_an_institution_admin_may_start_a_rule_earlier_audited(world, account):
    from labgov.audit.models import AuditEvent

    pod = ResourceFactory(account=account, name="vision-train-1")
    _hours(pod, T0, 5, amount="3")
    rule = rule_create(
        actor=world.inst_admin,
        account=account,
        kind="name_prefix",
        pattern="vision-",
        allocation=world.allocation,
        starts_at=T0,
    )
    assert rule.starts_at == T0
    assert _spent(world.allocation) == Decimal(15)
    event = AuditEvent.objects.get(action="attribution_rule.create")
    assert event.after["starts_at"] == T0.isoformat()
    assert event.note == "starts before it was made"


def test_a_lab_admin_claims_nothing_on_the_shared_account(world, account):
    """Issue 9, attack 4: an account-wide rule on the institution's shared account used to
    claim every unassigned resource, other labs' included, from 1970."""
    nlp_cluster = ResourceFactory(account=account, kind="cluster", name="nlp-cluster")
    nlp_volume = ResourceFactory(account=account, kind="network_volume", name="nlp-data")
    _hours(nlp_cluster, T0, 5, amount="7")
    with pytest.raises(DomainError, match="made by an institution admin"):
        rule_create(
            actor=world.lab_admin,
            account=account,
            kind="account",
            pattern="",
            allocation=world.allocation,
        )
    assert not AttributionRule.objects.exists()
    assert not Assignment.objects.filter(resource__in=[nlp_cluster, nlp_volume]).exists()
    assert _spent(world.allocation) == 0


def test_a_lab_admin_makes_rules_on_the_labs_own_account_from_now_only(world):
    own = RunpodAccountFactory(institution=world.institution, lab=world.lab)
    pod = ResourceFactory(account=own, name="x")
    _hours(pod, T0, 5, amount="3")
    with pytest.raises(DomainError, match="only an institution admin may start it earlier"):
        rule_create(
            actor=world.lab_admin,
            account=own,
            kind="account",
            pattern="",
            allocation=world.allocation,
            starts_at=T0,
        )
    rule_create(
        actor=world.lab_admin, account=own, kind="account", pattern="", allocation=world.allocation
    )
    assert _spent(world.allocation) == 0  # its past stays where it was
    assert pod.assignments.get().allocation == world.allocation


def test_no_rule_starts_in_a_closed_period(world, account):
    _close_october(world)
    with pytest.raises(DomainError, match=r"finance has\s+closed"):
        rule_create(
            actor=world.inst_admin,
            account=account,
            kind="account",
            pattern="",
            allocation=world.allocation,
            starts_at=T0 - dt.timedelta(days=3),
        )


def test_manual_assignment_respects_closed_periods(world, account):
    pod = ResourceFactory(account=account)
    _hours(pod, T0 - dt.timedelta(hours=4), 8, amount="2")
    _close_october(world)
    with pytest.raises(DomainError, match=r"finance has\s+closed"):
        resource_assign(
            actor=world.lab_admin,
            resource=pod,
            allocation=world.allocation,
            starts_at=T0 - dt.timedelta(hours=4),
        )
    first = resource_assign(actor=world.lab_admin, resource=pod, allocation=world.allocation)
    assert first.starts_at == T0  # the open part of its history only
    assert _spent(world.allocation) == Decimal(8)
    october = BillingRecord.objects.filter(resource=pod, bucket_start__lt=T0)
    assert october.count() == 4 and not october.filter(allocation__isnull=False).exists()
    assert not LedgerEntry.objects.filter(occurred_at__lt=T0).exists()


@pytest.mark.parametrize(
    ("kind", "pattern", "message"),
    [
        ("name_prefix", "", "needs a pattern"),
        ("env_var", "NOEQUALS", "NAME=value"),
        ("bogus", "x", "Unknown"),
    ],
)
def test_rule_create_validation(world, account, kind, pattern, message):
    with pytest.raises(DomainError, match=message):
        rule_create(
            actor=world.inst_admin,
            account=account,
            kind=kind,
            pattern=pattern,
            allocation=world.allocation,
        )


def test_rule_for_another_labs_account_is_refused(world):
    lab_account = RunpodAccountFactory(institution=world.institution, lab=world.other_lab)
    with pytest.raises(DomainError, match="another lab"):
        rule_create(
            actor=world.lab_admin,
            account=lab_account,
            kind="account",
            pattern="",
            allocation=world.allocation,
        )
