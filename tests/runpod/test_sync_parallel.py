"""On PostgreSQL, whole-day slices are written by several threads at once; the result must be
exactly what one writer produces."""

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection

from labgov.accounts.models import Role
from labgov.funding.models import LedgerEntry
from labgov.runpod import billing_store
from labgov.runpod.models import BillingRecord, Resource
from labgov.runpod.removal import account_removal_request, account_remove
from labgov.runpod.services import account_connect
from labgov.runpod.sync import account_sync
from labgov.usage.models import DailySpend, MonthlySpend
from tests.factories import MembershipFactory

pytestmark = [pytest.mark.usefixtures("at_sim_now", "postgres")]


def _unattributed(account) -> dict:
    """{(kind, Runpod id): the resource's unattributed spend}, after checking each figure is
    what its unattributed records add up to now."""
    kept, counted = {}, {}
    for resource in Resource.objects.filter(account=account):
        key = (resource.kind, resource.runpod_id)
        kept[key] = resource.unattributed_usd
        counted[key] = sum(
            resource.billing_records.filter(allocation__isnull=True).values_list(
                "total_usd", flat=True
            ),
            Decimal(0),
        )
    assert kept == counted
    return kept


def _totals(account):
    def total(values):
        return sum(values, Decimal(0))

    return {
        "unattributed": _unattributed(account),
        "records": total(
            BillingRecord.objects.filter(resource__account=account).values_list(
                "total_usd", flat=True
            )
        ),
        "count": BillingRecord.objects.filter(resource__account=account).count(),
        "daily": total(
            DailySpend.objects.filter(account=account).values_list("amount_usd", flat=True)
        ),
        "monthly": total(
            MonthlySpend.objects.filter(account=account).values_list("amount_usd", flat=True)
        ),
        "usage": total(
            LedgerEntry.objects.filter(source=f"runpod-account:{account.pk}").values_list(
                "amount_usd", flat=True
            )
        ),
    }


@pytest.mark.django_db(transaction=True)
def _still_connected(pids: set[int]) -> set[int]:
    """Which of these backends are still there (a closed connection's goes within moments)."""
    deadline = time.monotonic() + 5
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)])
            left = {pid for (pid,) in cursor.fetchall()}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_several_writers_give_what_one_writer_gives(
    sim, world, fast_clients, settings, monkeypatch
):
    settings.LABGOV_SYNC_SLICE_HOURS = 24
    backends: list[int] = []  # the backend that wrote each slice's records
    write_slice = billing_store.write_slice

    def recording(**kwargs):
        backends.append(connection.connection.info.backend_pid)
        return write_slice(**kwargs)

    monkeypatch.setattr(billing_store, "write_slice", recording)
    # Removing each round's connection needs a second institution admin.
    second_admin = MembershipFactory(
        role=Role.INSTITUTION_ADMIN, lab=None, institution=world.institution
    ).user
    results = {}
    for writers in (1, 3):
        settings.LABGOV_SYNC_WRITERS = writers
        backends.clear()
        account = account_connect(
            actor=world.inst_admin,
            institution=world.institution,
            name=f"Sim {writers}",
            api_key=sim.api_key,
            base_url=sim.base_url,
        )
        run = account_sync(account_id=account.pk, client_factory=fast_clients)
        assert run.status == "succeeded", run.error
        assert run.progress_done == run.progress_total
        results[writers] = _totals(account)
        if writers > 1:
            # Each writer thread keeps its connection from slice to slice (a new backend
            # loads its caches again), and all are closed once billing is written.
            assert len(backends) == run.progress_total - 1 > writers
            assert len(set(backends)) <= writers
            assert connection.connection.info.backend_pid not in backends
            assert _still_connected(set(backends)) == set()
        # The same Runpod account may be connected only once: the next round's connection
        # would be refused while this one exists.
        account_removal_request(actor=world.inst_admin, account=account)
        account_remove(actor=second_admin, account=account)
    assert results[1] == results[3]
    assert results[3]["records"] == results[3]["daily"] == results[3]["monthly"]


@pytest.mark.django_db(transaction=True)
def test_a_writer_that_is_done_takes_the_next_slice_while_a_held_one_is_written(
    sim_account, fast_clients, settings, monkeypatch
):
    """Two writers, the first slice held until three others are written: the other writer goes
    on with the slices after it meanwhile, not idle until the held one is done. Held by an
    event rather than a pause, so a loaded machine cannot make the other writer look idle;
    with the slices collected in order nothing would set it, and the held slice would go on
    after 10 s with the assertion below failing."""
    settings.LABGOV_SYNC_SLICE_HOURS = 24
    settings.LABGOV_SYNC_WRITERS = 2
    events: list[tuple[str, object]] = []  # ("start" or "end", the slice's start), in order
    lock = threading.Lock()
    others_written = threading.Event()
    write_slice = billing_store.write_slice

    def recording(*, account, payload):
        with lock:
            held = not events
            events.append(("start", payload.start))
        if held:
            others_written.wait(timeout=10)
        try:
            return write_slice(account=account, payload=payload)
        finally:
            with lock:
                events.append(("end", payload.start))
                if sum(1 for kind, _ in events if kind == "end") >= 3:
                    others_written.set()

    monkeypatch.setattr(billing_store, "write_slice", recording)
    run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    assert run.progress_done == run.progress_total
    held = events[0][1]
    until_done = events[: events.index(("end", held))]
    meanwhile = [start for kind, start in until_done if kind == "start" and start != held]
    assert len([kind for kind, _ in events if kind == "start"]) >= 5
    # The other writer's first slice, then more: waiting for the slices in order, it had
    # written its one and sat idle until the held one was done.
    assert len(meanwhile) >= 3, events
