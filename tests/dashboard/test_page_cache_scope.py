"""The page cache's data versions are per institution: a write in institution B (a person of
B's request, a sync of B's account) retires none of institution A's cached pages, a write in A
retires them, and a write that concerns several institutions or none (a person of both, people
and memberships, GPU prices, a command's write) retires every page it might touch."""

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from labgov.accounts.models import Membership, Role
from labgov.accounts.services import membership_grant
from labgov.core import dataversion
from labgov.runpod.models import GpuType
from labgov.runpod.services import account_connect
from labgov.runpod.sync import account_sync
from tests.factories import LabFactory, MembershipFactory, UserFactory

ME = reverse("dashboard:me")
INSTITUTION = reverse("dashboard:institution")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _state(client, url) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response["X-Labgov-Cache"]


def _warm(client, url) -> None:
    assert _state(client, url) == "miss"
    assert _state(client, url) == "hit"


def _elsewhere(world):
    return Membership.objects.get(user=world.outsider).institution


def _new_lab(client, name: str) -> None:
    response = client.post(reverse("accounts:lab_new"), {"name": name, "kind": "research_group"})
    assert response.status_code == 302, response.content.decode()[:2000]


def test_a_write_in_another_institution_keeps_this_ones_pages(world, spend):
    member = _client(world.member)
    _warm(member, ME)
    # The outsider, institution admin of B, makes a lab in B through the page.
    _new_lab(_client(world.outsider), "B's new lab")
    assert _state(member, ME) == "hit"
    # A's own admin makes one in A: A's pages are computed again.
    _new_lab(_client(world.inst_admin), "A's new lab")
    assert _state(member, ME) == "miss"


def test_a_sync_of_another_institutions_account_moves_only_its_version(
    world, sim, sim_account, fast_clients
):
    with time_machine.travel(sim.state.now, tick=False):
        # The same Runpod account, connected in B: the sync writes B's records only.
        sim_account.is_active = False
        sim_account.save(update_fields=["is_active"])
        theirs = account_connect(
            actor=world.outsider,
            institution=_elsewhere(world),
            name="B's Runpod",
            api_key=sim.api_key,
            write_key=sim.api_key,
            base_url=sim.base_url.replace("127.0.0.1", "localhost"),
        )
        ours, others = _client(world.finance), _client(world.outsider)
        _warm(ours, INSTITUTION)
        _warm(others, INSTITUTION)
        run = account_sync(account_id=theirs.pk, client_factory=fast_clients)
        assert run.status == "succeeded", run.error
        assert run.counts["records"] > 0
        assert _state(ours, INSTITUTION) == "hit"  # A's page stands
        after = others.get(INSTITUTION)
        assert after["X-Labgov-Cache"] == "miss"  # B's is computed again, with the spend
        assert after.context["data"].total_usd > 0


def test_a_person_of_two_institutions_retires_both(world, spend):
    """Their writes are counted against every institution they belong to."""
    both = MembershipFactory(role=Role.INSTITUTION_ADMIN, lab=None, institution=_elsewhere(world))
    MembershipFactory(role=Role.MEMBER, lab=world.other_lab, user=both.user)
    member, outsider = _client(world.member), _client(world.outsider)
    _warm(member, ME)
    _warm(outsider, INSTITUTION)
    _new_lab(_client(both.user), "B's lab, made by a person of A and B")
    assert _state(member, ME) == "miss"
    assert _state(outsider, INSTITUTION) == "miss"


def _both_warm(world):
    member, outsider = _client(world.member), _client(world.outsider)
    _warm(member, ME)
    _warm(outsider, INSTITUTION)
    return member, outsider


def _both_retired(member, outsider) -> None:
    assert _state(member, ME) == "miss"
    assert _state(outsider, INSTITUTION) == "miss"


def test_a_membership_granted_in_b_retires_every_institutions_pages(world, spend):
    """A person's roles show wherever they belong (and decide who sees what): a membership is
    no one institution's, even when B's admin grants it in B's scope."""
    lab = LabFactory(institution=_elsewhere(world))
    member, outsider = _both_warm(world)
    with dataversion.scope([lab.institution_id]):
        newcomer = UserFactory(home_institution=lab.institution)
        membership_grant(actor=world.outsider, user=newcomer, role=Role.MEMBER, lab=lab)
    _both_retired(member, outsider)


def test_a_change_to_a_person_retires_every_institutions_pages(world, spend):
    member, outsider = _both_warm(world)
    with dataversion.scope([_elsewhere(world).pk]):
        world.member.first_name = "Renamed"
        world.member.save(update_fields=["first_name"])
    _both_retired(member, outsider)


def test_the_gpu_catalog_and_a_new_partition_retire_no_page(world, spend):
    """Every sync writes the GPU catalog again and may make a month's partition: no cached
    page shows either (the next test checks), so neither retires one."""
    member, outsider = _both_warm(world)
    GpuType.objects.create(gpu_id="NVIDIA B200", name="B200")
    assert not dataversion.is_page_write(
        'CREATE TABLE IF NOT EXISTS "runpod_billingrecord_p2030_01" PARTITION OF '
        '"runpod_billingrecord" FOR VALUES FROM (%s) TO (%s)'
    )
    assert _state(member, ME) == "hit"
    assert _state(outsider, INSTITUTION) == "hit"


@pytest.mark.parametrize(
    ("person", "url"),
    [
        ("member", lambda w: ME),
        ("member", lambda w: reverse("home")),
        ("lab_admin", lambda w: reverse("dashboard:lab", args=[w.lab.pk])),
        ("lab_admin", lambda w: reverse("dashboard:funding", args=[w.funding_source.pk])),
        ("finance", lambda w: INSTITUTION),
        ("inst_admin", lambda w: reverse("home")),
    ],
)
def test_no_cached_page_reads_a_pageless_table(world, spend, settings, person, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.LABGOV_PAGE_CACHE_SECONDS = 0
    client = _client(getattr(world, person))
    for extra in ({}, {"HTTP_HX_REQUEST": "true"}):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url(world), **extra).status_code == 200
        read = " ".join(q["sql"].lower() for q in queries.captured_queries)
        assert "select" in read
        assert not [t for t in dataversion.PAGELESS_TABLES if t in read]


def test_a_write_with_no_scope_retires_every_page(world, spend):
    """A command or a task names no institution: its writes may concern any."""
    member, outsider = _both_warm(world)
    world.funding_source.name = "Renamed by a command"
    world.funding_source.save(update_fields=["name"])
    _both_retired(member, outsider)


def test_staff_and_anonymous_writes_retire_every_page(world, spend):
    member, outsider = _both_warm(world)
    staff = UserFactory(is_staff=True, is_superuser=True)
    MembershipFactory(
        role=Role.INSTITUTION_ADMIN, lab=None, institution=_elsewhere(world), user=staff
    )
    _new_lab(_client(staff), "A lab made by staff")
    _both_retired(member, outsider)


def test_a_scope_that_cannot_be_told_retires_every_page(world, spend, caplog):
    member, outsider = _both_warm(world)

    def broken():
        raise RuntimeError("the database is gone")

    with dataversion.scope(broken):
        world.funding_source.name = "Renamed"
        world.funding_source.save(update_fields=["name"])
    _both_retired(member, outsider)
    assert "retiring all" in caplog.text


@pytest.mark.parametrize(
    ("sql", "scoped"),
    [
        ('INSERT INTO "funding_allocation" ("cap_usd") VALUES (%s)', True),
        ('UPDATE "runpod_resource" SET "name" = %s WHERE "id" = %s', True),
        ('DELETE FROM "usage_dailyspend" WHERE "day" = %s', True),
        (
            "INSERT INTO runpod_billingrecord_p2026_03 (id) VALUES (1) "
            "ON CONFLICT (id) DO UPDATE SET amount_usd = excluded.amount_usd",
            True,
        ),
        (
            "WITH gone AS (DELETE FROM usage_dailyspend RETURNING *) "
            "INSERT INTO usage_monthlyspend SELECT * FROM gone",
            True,
        ),
        ("COPY runpod_billingrecord FROM STDIN", True),
        ('UPDATE "accounts_user" SET "first_name" = %s', False),
        ('INSERT INTO "accounts_membership" ("role") VALUES (%s)', False),
        ('UPDATE "runpod_gputype" SET "display_name" = %s', False),
        ('INSERT INTO "api_apitoken" ("name") VALUES (%s)', False),
        (
            "WITH x AS (UPDATE accounts_user SET is_active = false) DELETE FROM usage_dailyspend",
            False,
        ),
        ("TRUNCATE usage_dailyspend", False),
        ("CREATE TABLE runpod_billingrecord_p2030_01 PARTITION OF runpod_billingrecord", False),
        ('INSERT INTO "somebody_new" ("x") VALUES (1)', False),
    ],
)
def test_which_writes_stay_in_their_scope(sql, scoped):
    with dataversion.scope([1]):
        assert (dataversion._write_scope(sql) is not dataversion.EVERYWHERE) is scoped
    assert dataversion._write_scope(sql) is dataversion.EVERYWHERE  # no scope: everywhere


def _path_to_institution(model, depth: int = 0) -> bool:
    """Whether the model's rows reach one institution through foreign keys (not through a
    person: people belong to several)."""
    from labgov.accounts.models import Institution, User

    if model is Institution:
        return True
    if depth > 4:
        return False
    return any(
        _path_to_institution(field.related_model, depth + 1)
        for field in model._meta.fields
        if field.is_relation and field.related_model not in (None, User, model)
    )


# Scoped tables whose rows reach no institution by a foreign key, and why they are one's.
ONE_INSTITUTIONS_WITHOUT_A_KEY = {
    # Kept by the ledger's trigger beside each entry, one row per funding source or
    # allocation (an id column, not a key): written with the entry, in its transaction.
    "funding_ledgertotal",
    # A person's notifications are written by what concerns one of their institutions (the
    # alert, request or sync it tells of); muted kinds by the person themselves.
    "notifications_notification",
    "notifications_mutedkind",
}


def test_every_scoped_table_is_one_institutions():
    """A table is scoped only when each of its rows belongs to one institution: a new model
    in a scoped app that is shared must be named in SHARED_TABLES."""
    from django.apps import apps

    wrong = []
    for model in apps.get_models():
        table = model._meta.db_table
        if not dataversion.is_scoped_table(table) or table in ONE_INSTITUTIONS_WITHOUT_A_KEY:
            continue
        if not _path_to_institution(model):
            wrong.append(table)
    assert wrong == []
    assert not dataversion.is_scoped_table("accounts_user")
    assert not dataversion.is_scoped_table("accounts_membership")
