"""Concurrent approvals against the same money never commit more than is left.

PostgreSQL only: each thread has its own connection and transaction, and the approval locks
the allocation row before it reads what is left.
"""

import threading
from decimal import Decimal as D

import pytest
from django.db import connection

from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, LedgerEntry
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import commitments_reconcile, request_approve
from tests.provisioning.conftest import CLUSTER_CHECKLIST

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# A cluster is $351.20 too (2 nodes x 8 H100 x 5 h) and, unlike a Pod, stays approved after
# approval (nobody creates it on Runpod in these tests).
CLUSTER = {
    "deployment_model": "cluster",
    "node_count": 2,
    "expected_hours": D(5),
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
}


def _in_parallel(functions):
    """Run each function in its own thread, released together; return their outcomes."""
    barrier = threading.Barrier(len(functions))
    outcomes = [None] * len(functions)

    def run(index, fn):
        try:
            barrier.wait(timeout=10)
            outcomes[index] = fn()
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


def test_parallel_approvals_commit_no_more_than_is_left(postgres, world, submitted):
    # Cap $1,000: two of the $351.20 requests fit, the third does not.
    requests = [submitted(**CLUSTER) for _ in range(6)]
    outcomes = _in_parallel(
        [lambda r=r: request_approve(actor=world.lab_admin, req=r) for r in requests]
    )
    approved = [o for o in outcomes if isinstance(o, ProvisioningRequest)]
    refused = [o for o in outcomes if isinstance(o, DomainError)]
    assert len(approved) == 2, outcomes
    assert len(refused) == 4
    assert all("more than the allocation has left" in str(e) for e in refused)
    figures = Allocation.objects.with_figures().get(pk=world.allocation.pk)
    assert figures.committed_usd == D("702.40")
    assert figures.remaining_usd >= 0
    assert LedgerEntry.objects.filter(kind="commitment").count() == 2


def test_the_same_request_approved_twice_at_once_commits_once(postgres, world, submitted):
    req = submitted(**CLUSTER)
    second_admin = world.inst_admin
    outcomes = _in_parallel(
        [
            lambda: request_approve(actor=world.lab_admin, req=req),
            lambda: request_approve(actor=second_admin, req=req),
        ]
    )
    assert sum(isinstance(o, ProvisioningRequest) for o in outcomes) == 1, outcomes
    assert LedgerEntry.objects.filter(kind="commitment").count() == 1


def test_reconcile_racing_itself_posts_each_release_once(postgres, world, submitted):
    reqs = [request_approve(actor=world.lab_admin, req=submitted(**CLUSTER)) for _ in range(2)]
    # End them without releasing, as if the release were still to come.
    ProvisioningRequest.objects.filter(pk__in=[r.pk for r in reqs]).update(state="cancelled")
    outcomes = _in_parallel([commitments_reconcile for _ in range(4)])
    assert sum(o for o in outcomes if isinstance(o, int)) == 2, outcomes
    assert LedgerEntry.objects.filter(kind="release").count() == 2
    figures = Allocation.objects.with_figures().get(pk=world.allocation.pk)
    assert figures.committed_usd == 0
