"""One connection per Runpod account (issue 10, item 1): two keys (sync reads, write
provisions), a second connection of the same account refused at its first sync, and
connections that can be deactivated or, when made by mistake, removed with what they synced."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.funding.models import LedgerEntry
from labgov.runpod.errors import RunpodAuthError
from labgov.runpod.models import (
    AccountBillingRecord,
    BillingRecord,
    Resource,
    RunpodAccount,
    SyncRun,
)
from labgov.runpod.removal import account_removal_summary, account_remove
from labgov.runpod.services import (
    account_connect,
    account_set_active,
    account_test_connection,
    client_for_account,
    rule_create,
    sync_request,
    write_client_for_account,
)
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from labgov.usage.models import DailySpend, LabDailySpend, SourceMonthlySpend
from labgov.usage.periods import period_close
from tests.factories import InstitutionFactory, ResourceFactory, RunpodAccountFactory

READ_ONLY = "rpa_READONLY_key_0000RDON"


def _second_admin(world):
    """Another institution admin of the world's institution: removal needs two."""
    from labgov.accounts.models import Role
    from tests.factories import MembershipFactory

    return MembershipFactory(
        role=Role.INSTITUTION_ADMIN, lab=None, institution=world.institution
    ).user


WRITE = "rpa_WRITE_key_000000WRIT"


def _sums() -> dict:
    """Everything a doubled account would double."""

    def total(queryset, field):
        return sum(queryset.values_list(field, flat=True), Decimal(0))

    return {
        "resources": Resource.objects.count(),
        "billing_records": BillingRecord.objects.count(),
        "billed": total(BillingRecord.objects.all(), "total_usd"),
        "runpod_totals": total(AccountBillingRecord.objects.all(), "total_usd"),
        "ledger": total(LedgerEntry.objects.filter(kind="usage"), "amount_usd"),
        "daily": total(DailySpend.objects.all(), "amount_usd"),
    }


def _connect(world, sim, name, **keys):
    keys.setdefault("api_key", sim.api_key)
    return account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name=name,
        base_url=sim.base_url,
        **keys,
    )


def _sync(account):
    return account_sync(account_id=account.pk)


# -- Two keys --------------------------------------------------------------------------------


@pytest.fixture
def two_key_sim():
    with SimulatorServer(
        scenario=load_scenario("default"), api_key=WRITE, read_only_keys=(READ_ONLY,)
    ) as server:
        yield server


def test_the_sync_key_reads_and_the_write_key_writes(world, two_key_sim, at_sim_now):
    sim = two_key_sim
    account = _connect(world, sim, "Main", api_key=READ_ONLY, write_key=WRITE)
    assert (account.api_key_last4, account.write_key_last4) == ("RDON", "WRIT")

    run = _sync(account)  # the default client: the sync key, which is read-only
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    pod = Resource.objects.filter(account=account, kind="pod", status="RUNNING").first()

    with client_for_account(account) as reader, pytest.raises(RunpodAuthError, match="403"):
        reader.pod_action(pod.runpod_id, "stop")
    with write_client_for_account(account) as writer:
        assert writer.pod_action(pod.runpod_id, "stop").status == "EXITED"


def test_without_a_write_key_nothing_is_written(world, sim):
    account = _connect(world, sim, "Read only")
    assert account.write_key_encrypted == ""
    with pytest.raises(RunpodAuthError, match="has no write key"):
        write_client_for_account(account)


def test_each_key_is_tested_and_shown_by_its_last_four(world, two_key_sim, client_for):
    sim = two_key_sim
    account = _connect(world, sim, "Main", api_key=READ_ONLY, write_key="rpa_revoked_key_BADD")
    checks = account_test_connection(account=account)
    assert [c.ok for c in checks] == [True, False]
    assert checks[0].message.startswith("Sync key …RDON: Connected")
    assert checks[1].message.startswith("Write key …BADD: Runpod refused the API key (401)")

    client = client_for(world.inst_admin)
    page = client.get(reverse("runpod:account_detail", args=[account.pk])).content.decode()
    assert "sync key …RDON" in page and "write key …BADD" in page
    assert READ_ONLY not in page and "rpa_revoked_key_BADD" not in page
    response = client.post(reverse("runpod:account_test", args=[account.pk]), follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 2 and "Sync key …RDON" in shown[0] and "Write key …BADD" in shown[1]


# -- The same Runpod account connected twice -------------------------------------------------


def test_connecting_the_same_account_twice_is_refused_at_the_second_sync(
    world, sim, at_sim_now, client_for
):
    first = _connect(world, sim, "Runpod main")
    assert _sync(first).status == SyncRun.Status.SUCCEEDED
    before = _sums()
    assert before["resources"] and before["billed"] > 0

    second = _connect(world, sim, "Runpod again")
    run = _sync(second)

    assert run.status == SyncRun.Status.FAILED
    assert "already synced by the connection “Runpod main”" in run.error
    assert "nothing was recorded" in run.error
    assert _sums() == before
    assert not Resource.objects.filter(account=second).exists()
    page = client_for(world.inst_admin).get(reverse("runpod:account_detail", args=[second.pk]))
    assert "Runpod main" in page.content.decode()
    # The first connection keeps syncing as before.
    assert _sync(first).status == SyncRun.Status.SUCCEEDED
    assert _sums()["billed"] == before["billed"]


def test_doubles_recorded_before_the_check_stop_the_younger_connection(world, sim, at_sim_now):
    older = _connect(world, sim, "Older")
    assert _sync(older).status == SyncRun.Status.SUCCEEDED
    younger = _connect(world, sim, "Younger")
    # As an earlier labgov recorded them: every resource twice.
    Resource.objects.bulk_create(
        Resource(account=younger, kind=r.kind, runpod_id=r.runpod_id, name=r.name)
        for r in Resource.objects.filter(account=older)
    )
    run = _sync(younger)
    assert run.status == SyncRun.Status.FAILED and "“Older”" in run.error
    assert _sync(older).status == SyncRun.Status.SUCCEEDED


def test_a_connection_of_another_institution_is_not_named(world, sim, at_sim_now):
    other = InstitutionFactory()
    theirs = account_connect(
        actor=None,
        institution=other,
        name="Their secret project",
        api_key=sim.api_key,
        base_url=sim.base_url,
    )
    assert _sync(theirs).status == SyncRun.Status.SUCCEEDED
    run = _sync(_connect(world, sim, "Ours"))
    assert run.status == SyncRun.Status.FAILED
    assert "a connection of another institution" in run.error
    assert "secret" not in run.error


def test_billed_but_never_listed_resources_of_another_connection_are_refused_too(world):
    from labgov.core.errors import DomainError
    from labgov.runpod.billing_store import _ensure_resources

    first = RunpodAccountFactory(institution=world.institution, name="First")
    ResourceFactory(
        account=first, runpod_id="gone-pod-1", gone_at=dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    )
    second = RunpodAccountFactory(institution=world.institution, name="Second")
    with pytest.raises(DomainError, match="“First”"):
        _ensure_resources(second, {("pod", "gone-pod-1")}, {})
    assert not Resource.objects.filter(account=second).exists()


# -- Deactivate ------------------------------------------------------------------------------


def test_a_deactivated_connection_is_not_synced_nor_used_and_keeps_its_history(
    world, sim, at_sim_now, client_for, monkeypatch
):
    account = _connect(world, sim, "Main", write_key=sim.api_key)
    assert _sync(account).status == SyncRun.Status.SUCCEEDED
    before = _sums()
    client = client_for(world.inst_admin)
    response = client.post(reverse("runpod:account_active", args=[account.pk]), {"active": "0"})
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.is_active is False
    assert AuditEvent.objects.filter(action="runpod_account.deactivate").count() == 1

    from labgov.runpod import tasks

    queued = []
    monkeypatch.setattr(tasks.sync_account, "delay", lambda *args: queued.append(args))
    tasks.sync_all_accounts()
    assert queued == []  # beat skips it
    sim.advance(hours=6)
    run = _sync(account)
    assert run.status == SyncRun.Status.SKIPPED and "deactivated" in run.error
    with pytest.raises(Exception, match="deactivated"):
        sync_request(actor=world.inst_admin, account=account)
    with pytest.raises(RunpodAuthError, match="deactivated"):
        write_client_for_account(account)
    assert _sums() == before  # history kept, nothing new
    page = client.get(reverse("runpod:account_detail", args=[account.pk])).content.decode()
    assert "deactivated" in page and "Sync now" not in page

    account_set_active(actor=world.inst_admin, account=account, active=True)
    assert _sync(account).status == SyncRun.Status.SUCCEEDED


# -- Remove ----------------------------------------------------------------------------------


def test_removing_a_mistaken_connection_takes_its_data_and_reverses_its_ledger_usage(
    world, sim, at_sim_now, client_for
):
    keep = RunpodAccountFactory(institution=world.institution, name="Right one")
    kept_pod = ResourceFactory(account=keep)
    mistaken = _connect(world, sim, "Mistaken")
    rule_create(  # a shared account's rule, from before its history: an institution admin's
        actor=world.inst_admin,
        account=mistaken,
        kind="account",
        pattern="",
        allocation=world.allocation,
        starts_at=at_sim_now - dt.timedelta(days=60),
    )
    assert _sync(mistaken).status == SyncRun.Status.SUCCEEDED
    billed = sum(
        BillingRecord.objects.filter(resource__account=mistaken).values_list(
            "total_usd", flat=True
        ),
        Decimal(0),
    )
    spent = sum(
        LedgerEntry.objects.filter(allocation=world.allocation, kind="usage").values_list(
            "amount_usd", flat=True
        ),
        Decimal(0),
    )
    assert billed > 0 and spent > 0
    resources = Resource.objects.filter(account=mistaken).count()
    summed = (LabDailySpend.objects.filter(account=mistaken), SourceMonthlySpend.objects.all())
    assert all(rows.exists() for rows in summed)  # the rollups summed from the rollups

    url = reverse("runpod:account_remove", args=[mistaken.pk])
    client = client_for(world.inst_admin)
    page = client.get(url).content.decode()
    assert f'data-count="resources">{resources}<' in page
    assert f"${billed.quantize(Decimal('0.01')):,}" in page
    assert f"${spent.quantize(Decimal('0.01')):,}" in page
    assert "Ask for the removal of Mistaken" in page
    assert client.post(url, {"action": "request"}).status_code == 302

    second = client_for(_second_admin(world))
    assert "Remove Mistaken and its data" in second.get(url).content.decode()
    response = second.post(url, {"action": "remove"})
    assert response.status_code == 302

    assert not RunpodAccount.objects.filter(pk=mistaken.pk).exists()
    assert list(Resource.objects.all()) == [kept_pod]
    assert not BillingRecord.objects.exists() and not DailySpend.objects.exists()
    assert not any(rows.exists() for rows in summed)
    entries = LedgerEntry.objects.filter(source=f"runpod-account:{mistaken.pk}")
    assert entries.filter(amount_usd__lt=0).exists()  # reversals, the originals stay
    assert sum(entries.values_list("amount_usd", flat=True), Decimal(0)) == 0
    by_day = {}
    for entry in entries:
        key = (entry.allocation_id, entry.occurred_at)
        by_day[key] = by_day.get(key, Decimal(0)) + entry.amount_usd
    assert set(by_day.values()) == {Decimal(0)}  # each day nets to zero, in its own day
    event = AuditEvent.objects.get(action="runpod_account.remove")
    assert event.before["resources"] == resources
    assert Decimal(event.before["billed_usd"]) == billed
    assert Decimal(event.before["ledger_usage_reversed_usd"]) == spent
    assert event.before["removal_requested_by"] == world.inst_admin.pk
    assert AuditEvent.objects.filter(action="runpod_account.removal_request").exists()


def test_removal_is_refused_when_its_data_reaches_into_a_closed_period(world, client_for):
    account = RunpodAccountFactory(institution=world.institution, name="Old")
    pod = ResourceFactory(account=account)
    october = dt.datetime(2026, 10, 15, tzinfo=dt.UTC)
    BillingRecord.objects.create(
        resource=pod,
        kind="pod",
        bucket_start=october,
        bucket_end=october + dt.timedelta(hours=1),
        total_usd=Decimal("3.50"),
    )
    period_close(actor=world.finance, institution=world.institution, year=2026, month=10)

    summary = account_removal_summary(account)
    assert not summary.allowed and "closed" in summary.blockers[0]
    client = client_for(world.inst_admin)
    page = client.get(reverse("runpod:account_remove", args=[account.pk])).content.decode()
    assert "It cannot be removed" in page and "Remove Old and its data" not in page
    response = client.post(reverse("runpod:account_remove", args=[account.pk]), follow=True)
    assert any("period finance has closed" in str(m) for m in response.context["messages"])
    assert RunpodAccount.objects.filter(pk=account.pk).exists()
    assert BillingRecord.objects.filter(resource=pod).count() == 1


def test_removal_is_refused_for_a_connection_labgov_provisioned_through(world):
    from labgov.core.errors import DomainError
    from labgov.provisioning.models import ProvisioningRequest

    account = RunpodAccountFactory(institution=world.institution, name="Used")
    assert account_removal_summary(account).allowed
    ProvisioningRequest.objects.create(
        lab=world.lab,
        requester=world.member,
        allocation=world.allocation,
        title="Fine-tune",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        runpod_account=account,
    )
    with pytest.raises(DomainError, match="1 provisioning request went through it"):
        account_remove(actor=world.inst_admin, account=account)
    assert RunpodAccount.objects.filter(pk=account.pk).exists()


@pytest.mark.parametrize("role", ["finance", "lab_admin", "member", "outsider"])
def test_only_institution_admins_deactivate_or_remove(world, client_for, role):
    account = RunpodAccountFactory(institution=world.institution)
    client = client_for(getattr(world, role))
    expected = 403 if role in ("finance", "lab_admin") else 404
    assert client.get(reverse("runpod:account_remove", args=[account.pk])).status_code == expected
    assert client.post(reverse("runpod:account_remove", args=[account.pk])).status_code == expected
    assert (
        client.post(
            reverse("runpod:account_active", args=[account.pk]), {"active": "0"}
        ).status_code
        == expected
    )
    account.refresh_from_db()
    assert account.is_active


def test_deactivate_refuses_get(world, client_for):
    account = RunpodAccountFactory(institution=world.institution)
    url = reverse("runpod:account_active", args=[account.pk])
    assert client_for(world.inst_admin).get(url).status_code == 405


def test_keys_of_two_different_runpod_accounts_are_pointed_out(world, sim, monkeypatch):
    from labgov.runpod import services
    from labgov.runpod.client import RunpodClient

    account = _connect(world, sim, "Mixed", write_key=sim.api_key)
    assert [c.ok for c in account_test_connection(account=account)] == [True, True]

    other_scenario = load_scenario("generated:pods=3,volumes=0,endpoints=0,clusters=0,days=2")
    with SimulatorServer(scenario=other_scenario, api_key=WRITE) as other_runpod_account:
        monkeypatch.setattr(
            services,
            "_write_key_client",
            lambda acct: RunpodClient(base_url=other_runpod_account.base_url, api_key=WRITE),
        )
        checks = account_test_connection(account=account)
    assert [c.ok for c in checks] == [True, True, False]
    assert "seem to belong to different Runpod accounts" in checks[2].message


def test_one_admin_alone_cannot_remove_a_connection(world, client_for):
    """The attack: one institution admin takes a connection's spend off the ledger alone,
    straight away or by asking and then carrying out their own request."""
    from labgov.core.errors import DomainError
    from labgov.runpod.removal import account_removal_request, account_removal_withdraw

    account = RunpodAccountFactory(institution=world.institution, name="Alone")
    url = reverse("runpod:account_remove", args=[account.pk])
    client = client_for(world.inst_admin)
    response = client.post(url, {"action": "remove"}, follow=True)
    assert any("needs two people" in str(m) for m in response.context["messages"])
    with pytest.raises(DomainError, match="needs two people"):
        account_remove(actor=world.inst_admin, account=account)

    client.post(url, {"action": "request"})
    account.refresh_from_db()
    assert account.removal_requested_by == world.inst_admin
    assert 'data-state="waiting"' in client.get(url).content.decode()
    response = client.post(url, {"action": "remove"}, follow=True)
    assert any("another institution admin" in str(m) for m in response.context["messages"])
    assert RunpodAccount.objects.filter(pk=account.pk).exists()

    account_removal_withdraw(actor=world.inst_admin, account=account)
    account.refresh_from_db()
    assert account.removal_requested_by is None
    second = _second_admin(world)
    with pytest.raises(DomainError, match="needs two people"):
        account_remove(actor=second, account=account)  # the withdrawn request counts no more
    account_removal_request(actor=world.inst_admin, account=account)
    account_remove(actor=second, account=account)
    assert not RunpodAccount.objects.filter(pk=account.pk).exists()
