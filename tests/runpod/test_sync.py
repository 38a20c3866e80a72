"""The sync, over real HTTP against the simulator, with the real client."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from labgov.funding.models import Allocation, LedgerEntry
from labgov.runpod.attribution import BEGINNING
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import (
    AccountBillingRecord,
    BillingRecord,
    Resource,
    ResourceKind,
    SyncRun,
)
from labgov.runpod.services import resource_assign, rule_create
from labgov.runpod.sync import BILLING_KINDS, account_sync, lock_claim
from tests.fixtures_sim import SIM_KEY, hour
from tests.runpod.test_sync_parallel import _unattributed

pytestmark = pytest.mark.usefixtures("at_sim_now")


def _sync(account, clients, **kwargs) -> SyncRun:
    return account_sync(account_id=account.pk, client_factory=clients, **kwargs)


def _stored_total(account, **filters) -> Decimal:
    # Summed in Python: exact on SQLite too.
    values = BillingRecord.objects.filter(resource__account=account, **filters).values_list(
        "total_usd", flat=True
    )
    return sum(values, Decimal(0))


def _ledger_usage(**filters) -> Decimal:
    values = LedgerEntry.objects.filter(kind="usage", **filters).values_list(
        "amount_usd", flat=True
    )
    return sum(values, Decimal(0))


def _api_total(sim, start, end) -> Decimal:
    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        return sum(
            (
                r.total_usd
                for kind in BILLING_KINDS
                for r in client.billing_records(kind, start=start, end=end)
            ),
            Decimal(0),
        )


def _runpod_account_total(sim, start, end) -> Decimal:
    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        return sum((r.total_usd for r in client.account_billing(start=start, end=end)), Decimal(0))


def test_full_sync_stores_inventory_and_every_record_exactly(
    sim, sim_account, fast_clients, settings
):
    run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.finished_at and run.window_start and run.window_end
    now = sim.state.now
    # Whole UTC days: from the midnight of the first day, so that day is held whole.
    first_day = (now - dt.timedelta(days=settings.LABGOV_SYNC_FIRST_DAYS)).date()
    assert run.window_start == dt.datetime.combine(first_day, dt.time(), tzinfo=dt.UTC)

    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        pods = client.list_pods(include_cluster_pods=True)
        volumes = client.list_network_volumes()
    present_pods = Resource.objects.filter(
        account=sim_account, kind=ResourceKind.POD, gone_at__isnull=True
    )
    assert set(present_pods.values_list("runpod_id", flat=True)) == {p.id for p in pods}
    assert Resource.objects.filter(
        kind=ResourceKind.NETWORK_VOLUME, gone_at__isnull=True
    ).count() == len(volumes)

    api = _api_total(sim, run.window_start, now)
    assert _stored_total(sim_account) == api  # exactly, to the last stored digit
    runpod_total = _runpod_account_total(sim, run.window_start, now)
    assert round(_stored_total(sim_account), 2) == round(runpod_total, 2)
    stored_runpod = sum(
        AccountBillingRecord.objects.filter(account=sim_account).values_list(
            "total_usd", flat=True
        ),
        Decimal(0),
    )
    assert stored_runpod == runpod_total
    # A stopped pod's volume disk is billed while it is stopped: the sync must have it.
    assert BillingRecord.objects.filter(kind=ResourceKind.POD, disk_usd__gt=0).exists()
    # Attributed spend reached the ledger; each resource's unattributed spend is its records'.
    attributed = _stored_total(sim_account, allocation__isnull=False)
    assert _ledger_usage() == attributed
    assert sum(_unattributed(sim_account).values()) == api - attributed > 0


def test_resync_changes_nothing(sim, sim_account, fast_clients):
    _sync(sim_account, fast_clients)
    first = (_stored_total(sim_account), BillingRecord.objects.count(), LedgerEntry.objects.count())
    run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED
    assert (
        _stored_total(sim_account),
        BillingRecord.objects.count(),
        LedgerEntry.objects.count(),
    ) == first


def test_second_sync_starts_at_complete_bucket_minus_overlap(
    sim, sim_account, fast_clients, settings
):
    _sync(sim_account, fast_clients)
    sim_account.refresh_from_db()
    assert sim_account.billing_complete_through == hour(sim.state.now)
    sim.advance(hours=5)
    with time_machine.travel(sim.state.now, tick=True):
        run = _sync(sim_account, fast_clients)
    overlap_from = hour(sim.state.now) - dt.timedelta(hours=5 + settings.LABGOV_SYNC_OVERLAP_HOURS)
    assert run.window_start == overlap_from.replace(hour=0)  # from that day's UTC midnight
    start = BillingRecord.objects.order_by("bucket_start").first().bucket_start
    assert _stored_total(sim_account) == _api_total(sim, start, sim.state.now)


def test_the_growing_current_hour_is_updated_not_duplicated(sim, sim_account, fast_clients):
    _sync(sim_account, fast_clients)
    partial = BillingRecord.objects.filter(bucket_start=hour(sim.state.now)).count()
    assert partial > 0
    before = _stored_total(sim_account, bucket_start=hour(sim.state.now))
    sim.advance(minutes=20)  # still the same hour, more of it billed
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
    assert BillingRecord.objects.filter(bucket_start=hour(sim.state.now)).count() == partial
    assert _stored_total(sim_account, bucket_start=hour(sim.state.now)) > before
    # The hour's grown records moved each resource's unattributed spend by what they grew.
    _unattributed(sim_account)


def test_explicit_window_from_the_command(sim, sim_account, fast_clients):
    now = sim.state.now
    start, end = hour(now) - dt.timedelta(days=3), hour(now) - dt.timedelta(days=1)
    run = _sync(sim_account, fast_clients, start=start, end=end, trigger=SyncRun.Trigger.COMMAND)
    assert run.status == SyncRun.Status.SUCCEEDED
    assert BillingRecord.objects.filter(bucket_start__lt=start).count() == 0
    assert BillingRecord.objects.filter(bucket_start__gte=end).count() == 0
    assert _stored_total(sim_account) == _api_total(sim, start, end)


def test_terminated_pod_keeps_its_history(sim, sim_account, fast_clients):
    _sync(sim_account, fast_clients)
    running = Resource.objects.filter(kind=ResourceKind.POD, status="RUNNING").first()
    records_before = BillingRecord.objects.filter(resource=running).count()
    assert records_before > 0
    seen = Resource.objects.get(pk=running.pk).last_seen_at
    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        assert client.pod_action(running.runpod_id, "terminate") is None
    sim.advance(hours=2)
    with time_machine.travel(sim.state.now, tick=True):
        run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED
    running.refresh_from_db()
    assert running.status == "TERMINATED"
    assert running.gone_at == seen  # the last time it was seen
    assert BillingRecord.objects.filter(resource=running).count() >= records_before


def test_pod_terminated_before_the_first_sync_still_counts(sim, sim_account, fast_clients):
    # The scenario's month: the pod that only billing remembers ran in its first weeks.
    _sync(sim_account, fast_clients, start=hour(sim.state.now) - dt.timedelta(days=30))
    unseen = Resource.objects.filter(kind=ResourceKind.POD, status="")
    assert unseen.exists(), "the scenario has a pod that only billing remembers"
    assert BillingRecord.objects.filter(resource__in=unseen).exists()


def test_busy_account_is_skipped(sim, sim_account, fast_clients):
    from django.utils import timezone

    assert lock_claim(sim_account.pk, timezone.now()) is not None
    run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.SKIPPED
    assert not BillingRecord.objects.exists()


def test_expired_lock_is_taken_over(sim, sim_account, fast_clients, settings):
    from django.utils import timezone

    lock_claim(
        sim_account.pk, timezone.now() - dt.timedelta(seconds=settings.LABGOV_SYNC_LOCK_SECONDS + 1)
    )
    assert _sync(sim_account, fast_clients).status == SyncRun.Status.SUCCEEDED


@pytest.mark.parametrize("kind", ["429", "500", "503", "truncate", "malformed", "disconnect"])
def test_transient_faults_are_retried_to_success(sim, sim_account, fast_clients, kind):
    sim.inject_fault(path_prefix="/v2/billing/pods", kind=kind, times=2, retry_after=0)
    sim.inject_fault(path_prefix="/v2/pods", kind=kind, times=1, retry_after=0)
    run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert _stored_total(sim_account) == _api_total(sim, run.window_start, sim.state.now)


def test_slow_answer_times_out_and_is_retried(sim, sim_account):
    sim.inject_fault(path_prefix="/v2/network-volumes", kind="slow", delay=2, times=1)

    def clients(account):
        import httpx

        return RunpodClient(
            base_url=sim.base_url,
            api_key=SIM_KEY,
            sleep=lambda s: None,
            timeout=httpx.Timeout(0.5, connect=0.5),
        )

    run = _sync(sim_account, clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error


@pytest.mark.parametrize(
    ("path", "kind", "words"),
    [
        ("/v2/billing/clusters", "500", "Runpod"),
        ("/v2/pods", "503", "Runpod"),
        ("/v2/billing/pods", "malformed", ""),
    ],
)
def test_persistent_fault_fails_cleanly_and_keeps_earlier_data(
    sim, sim_account, fast_clients, path, kind, words
):
    assert _sync(sim_account, fast_clients).status == SyncRun.Status.SUCCEEDED
    before = (
        _stored_total(sim_account),
        BillingRecord.objects.count(),
        LedgerEntry.objects.count(),
        list(Resource.objects.order_by("pk").values_list("pk", "status", "gone_at")),
    )
    sim.advance(hours=3)
    sim.inject_fault(path_prefix=path, kind=kind, times=1000, retry_after=0)
    with time_machine.travel(sim.state.now, tick=True):
        run = _sync(sim_account, fast_clients)
    assert run.status == SyncRun.Status.FAILED
    assert run.error and words in run.error
    assert run.finished_at is not None
    if path.startswith("/v2/billing/clusters"):
        # Fetched before anything was written: nothing changed at all.
        assert (
            _stored_total(sim_account),
            BillingRecord.objects.count(),
            LedgerEntry.objects.count(),
        ) == before[:3]
    sim_account.refresh_from_db()
    assert sim_account.sync_locked_until is None  # the lock is released
    # A later sync without the fault completes the job.
    sim.clear_faults()
    with time_machine.travel(sim.state.now, tick=True):
        assert _sync(sim_account, fast_clients).status == SyncRun.Status.SUCCEEDED


def test_bad_key_fails_in_words(sim, world, fast_clients):
    from labgov.runpod.services import account_connect

    account = account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Wrong",
        api_key="wrong-key-123",
        base_url=sim.base_url,
    )
    run = account_sync(account_id=account.pk)  # the real client, built from the stored key
    assert run.status == SyncRun.Status.FAILED
    assert "401" in run.error or "key" in run.error.lower()


def test_attribution_by_rules_and_by_hand(sim, world, sim_account, fast_clients):
    second = Allocation.objects.create(
        funding_source=world.funding_source,
        user=world.lab_admin,
        cap_usd=Decimal("100"),
        start_date=world.funding_source.start_date,
        end_date=world.funding_source.end_date,
    )
    # The account is shared by the institution's labs: its rules are an institution admin's,
    # who may start them before they are made (here: over the whole history).
    for kind, pattern, allocation in [
        ("name_prefix", "vision-", world.allocation),
        ("template", "nf-dl101-2026f", second),
    ]:
        rule_create(
            actor=world.inst_admin,
            account=sim_account,
            kind=kind,
            pattern=pattern,
            allocation=allocation,
            starts_at=BEGINNING,
        )
    _sync(sim_account, fast_clients)
    vision = Resource.objects.filter(name__startswith="vision-", kind=ResourceKind.POD)
    assert vision.exists()
    for resource in vision:
        # The scenario's LABGOV_ALLOCATION values are the demo institution's tag codes, which
        # no allocation here has: such a pod is refused, stays unattributed with the reason,
        # and no rule claims it.
        if "LABGOV_ALLOCATION" in resource.env:
            assert resource.current_allocation is None, resource.name
            assert "no allocation has this tag" in resource.tag_refusal
        else:
            assert resource.current_allocation == world.allocation, resource.name
    # The course template tags its pods LABGOV_ALLOCATION=lga-demo-6: refused, so its rule waits.
    course = Resource.objects.get(name="dl101-lab4-tara")
    assert course.current_allocation is None and course.tag_refusal
    assert _stored_total(sim_account, resource=course, allocation=second) == 0

    stray = Resource.objects.filter(
        kind=ResourceKind.POD, current_allocation__isnull=True, gone_at__isnull=True
    ).first()
    assert stray is not None
    stray_total = _stored_total(sim_account, resource=stray)
    spent_before = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
    resource_assign(actor=world.lab_admin, resource=stray, allocation=world.allocation)
    spent_after = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
    assert spent_after - spent_before == stray_total


def _tagged_pod(sim, name, tag):
    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        return client.create_pod(
            {
                "name": name,
                "image": "pytorch/pytorch:2.8.0",
                "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
                "cloud": "COMMUNITY",
                "env": {"LABGOV_ALLOCATION": tag},
            }
        )


def test_allocation_tag_attribution_from_a_created_pod_on_a_labs_own_account(
    sim, world, sim_account, fast_clients
):
    sim_account.lab = world.lab  # the Vision lab's own Runpod team: its tags count at once
    sim_account.save(update_fields=["lab"])
    pod = _tagged_pod(sim, "adhoc-run", world.allocation.tag_code)
    sim.advance(hours=3)
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
    resource = Resource.objects.get(runpod_id=pod.id)
    assert resource.current_allocation == world.allocation
    assert resource.assignments.get().starts_at == hour(pod.created_at)
    assert _stored_total(sim_account, resource=resource) > 0
    assert _stored_total(sim_account, resource=resource, allocation__isnull=True) == 0


def test_a_copied_tag_on_a_shared_account_charges_nothing_until_its_holder_confirms(
    sim, world, sim_account, fast_clients, client_for
):
    """Issue 22 (attacker review): tag codes are readable by the whole Runpod team (a pod's
    env is listed by GET /v2/pods). Someone else starts an 8×H100 pod carrying the student's
    code on the account the labs share: it stays unattributed, a claim waits, and only the
    student (or a lab admin) charges it, audited."""
    from labgov.audit.models import AuditEvent
    from labgov.runpod.models import TagClaim

    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        pod = client.create_pod(
            {
                "name": "not-mine",
                "image": "pytorch/pytorch:2.8.0",
                "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 8},
                "cloud": "SECURE",
                "env": {"LABGOV_ALLOCATION": world.allocation.tag_code},
            }
        )
    sim.advance(hours=3)
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
        resource = Resource.objects.get(runpod_id=pod.id)
        assert resource.current_allocation is None and not resource.assignments.exists()
        billed = _stored_total(sim_account, resource=resource)
        assert billed > 0
        assert _stored_total(sim_account, resource=resource, allocation__isnull=True) == billed
        spent = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
        assert "waits for the allocation's holder" in resource.tag_refusal
        claim = TagClaim.objects.get(resource=resource)
        assert claim.allocation == world.allocation and claim.status == "pending"

        # A second sync neither charges it nor claims it twice.
        sim.advance(hours=1)
        _sync(sim_account, fast_clients)
        assert TagClaim.objects.filter(resource=resource).count() == 1
        assert Resource.objects.get(pk=resource.pk).current_allocation is None

        # Nobody but the holder or a lab admin of the lab decides it.
        url = reverse("runpod:tag_claim_decide", args=[claim.pk, "confirm"])
        for someone in (world.other_member, world.finance, world.outsider):
            assert client_for(someone).post(url).status_code in (403, 404)
        assert client_for(world.member).get(url).status_code == 405
        page = client_for(world.member).get(reverse("runpod:tag_claims")).content.decode()
        assert "not-mine" in page
        assert TagClaim.objects.get(pk=claim.pk).status == "pending"

        response = client_for(world.member).post(url)
        assert response.status_code == 302
        resource.refresh_from_db()
        assert resource.current_allocation == world.allocation and resource.tag_refusal == ""
        assert resource.assignments.get().starts_at <= hour(pod.created_at) + dt.timedelta(hours=1)
        assert _stored_total(sim_account, resource=resource, allocation__isnull=True) == 0
        after = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
        assert after - spent == _stored_total(sim_account, resource=resource)
    claim.refresh_from_db()
    assert claim.status == "confirmed" and claim.decided_by == world.member
    event = AuditEvent.objects.get(action="tag_claim.confirm", target_id=str(claim.pk))
    assert event.actor == world.member


def test_a_rejected_tag_claim_stays_unattributed_and_is_not_claimed_again(
    sim, world, sim_account, fast_clients
):
    from labgov.core.errors import DomainError
    from labgov.runpod.models import TagClaim
    from labgov.runpod.tag_claims import tag_claim_confirm, tag_claim_reject

    pod = _tagged_pod(sim, "copied-tag", world.allocation.tag_code)
    sim.advance(hours=2)
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
        claim = TagClaim.objects.get(resource__runpod_id=pod.id)
        tag_claim_reject(actor=world.lab_admin, claim=claim)
        with pytest.raises(DomainError, match="rejected already"):
            tag_claim_confirm(actor=world.member, claim=claim)
        sim.advance(hours=1)
        _sync(sim_account, fast_clients)
    resource = Resource.objects.get(runpod_id=pod.id)
    assert resource.current_allocation is None
    assert "rejected" in resource.tag_refusal
    assert TagClaim.objects.filter(resource=resource).count() == 1


def test_a_team_member_cannot_bill_an_allocation_by_its_number(
    sim, world, sim_account, fast_clients, client_for
):
    """Issue 9, attack 3: LABGOV_ALLOCATION=<id> used to make any allocation pay. A number is
    no tag; another lab's tag is refused on that lab's own account; so is an ended
    allocation's. The refused pods wait in the unattributed queue with the reason."""
    from labgov.runpod.models import RunpodAccount

    other = Allocation.objects.create(
        funding_source=world.other_funding_source,
        project_name="NLP evals",
        cap_usd=Decimal("100"),
        start_date=world.other_funding_source.start_date,
        end_date=world.other_funding_source.end_date,
    )
    ended = Allocation.objects.create(
        funding_source=world.funding_source,
        project_name="Last term",
        cap_usd=Decimal("100"),
        start_date=world.funding_source.start_date,
        end_date=world.funding_source.start_date,
    )
    # The account is Vision's own team account.
    RunpodAccount.objects.filter(pk=sim_account.pk).update(lab=world.lab)
    sim_account.refresh_from_db()
    by_number = _tagged_pod(sim, "bill-by-number", str(world.allocation.pk))
    foreign = _tagged_pod(sim, "bill-nlp", other.tag_code)
    stale = _tagged_pod(sim, "bill-ended", ended.tag_code)
    sim.advance(hours=3)
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
    reasons = {}
    for pod in (by_number, foreign, stale):
        resource = Resource.objects.get(runpod_id=pod.id)
        assert resource.current_allocation is None
        assert not resource.assignments.exists()
        assert _stored_total(sim_account, resource=resource, allocation__isnull=False) == 0
        reasons[pod.name] = resource.tag_refusal
    assert "no allocation has this tag" in reasons["bill-by-number"]
    assert "may not use this Runpod account" in reasons["bill-nlp"]
    assert "not active" in reasons["bill-ended"]
    for allocation in (world.allocation, other, ended):
        assert Allocation.objects.with_figures().get(pk=allocation.pk).spent_usd == 0
    page = client_for(world.lab_admin).get(reverse("runpod:unattributed")).content.decode()
    assert page.count("Tag not accepted") >= 3
    assert "lab may not use this Runpod account" in page


def test_reassignment_does_not_change_past_spend(sim, world, sim_account, fast_clients):
    _sync(sim_account, fast_clients)
    pod = Resource.objects.filter(
        kind=ResourceKind.POD, status="RUNNING", current_allocation__isnull=True
    ).first()
    resource_assign(actor=world.lab_admin, resource=pod, allocation=world.allocation)
    past = _stored_total(sim_account, resource=pod)
    other = Allocation.objects.create(
        funding_source=world.funding_source,
        user=world.lab_admin,
        cap_usd=Decimal("100"),
        start_date=world.funding_source.start_date,
        end_date=world.funding_source.end_date,
    )
    resource_assign(actor=world.lab_admin, resource=pod, allocation=other, starts_at=sim.state.now)
    assert _stored_total(
        sim_account, resource=pod, allocation=world.allocation
    ) == past - _stored_total(sim_account, resource=pod, bucket_start__gte=sim.state.now)
    sim.advance(hours=4)
    with time_machine.travel(sim.state.now, tick=True):
        _sync(sim_account, fast_clients)
    # Past hours stay with the first allocation; new hours go to the second.
    assert (
        _stored_total(
            sim_account,
            resource=pod,
            allocation=world.allocation,
            bucket_start__lt=hour(sim.state.now) - dt.timedelta(hours=4),
        )
        > 0
    )
    assert _stored_total(sim_account, resource=pod, allocation=other) > 0
    assert _ledger_usage(allocation=other) == _stored_total(sim_account, allocation=other)


def test_a_window_after_a_gap_does_not_mark_the_gap_complete(sim, sim_account, fast_clients):
    now = hour(sim.state.now)
    _sync(
        sim_account, fast_clients, start=now - dt.timedelta(days=10), end=now - dt.timedelta(days=8)
    )
    sim_account.refresh_from_db()
    assert sim_account.billing_complete_through == now - dt.timedelta(days=8)
    _sync(sim_account, fast_clients, start=now - dt.timedelta(days=2))
    sim_account.refresh_from_db()
    assert sim_account.billing_complete_through == now - dt.timedelta(days=8)
    # The default window then starts before the gap, so nothing is skipped.
    run = _sync(sim_account, fast_clients)
    assert run.window_start < now - dt.timedelta(days=8)
    sim_account.refresh_from_db()
    assert sim_account.billing_complete_through == now
