"""Estimate against actual: what a provisioned request (pod, endpoint, cluster) has cost so far,
in the estimate's own lines, and how far a requester's and a lab's past estimates were off.

A request's actual spend is the billing records of its resources, attributed to its
allocation, from the hour it was approved on (as `selectors.actual_usd_by_request`). Each
record is split into the estimate's lines:
- storage: volume and container disk, network volume (standard and high performance);
- compute: everything else the record bills (GPU, CPU, serverless fees, cluster networking),
  so compute + storage is the record's total to the digit;
- storage counts as *while running* in an hour that also billed compute, else *after* (a
  stopped pod's volume disk, a network volume kept after the work);
- a *stop* is an hour of compute whose resource billed no compute the hour before, past its
  first: the work paused and started again, which the estimate priced as one unplanned stop.

One query for any number of requests; the accuracy of a requester and a lab adds two more.
"""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, DecimalField, Exists, F, OuterRef, Q, Sum, Value
from django.db.models.functions import Coalesce

from labgov.core.money import ZERO
from labgov.provisioning.models import ProvisioningRequest
from labgov.runpod.models import BillingRecord

HOUR = dt.timedelta(hours=1)
# How many of their latest provisioned requests a requester's and a lab's accuracy reads.
ACCURACY_REQUESTS = 10
# Within this fraction of the estimate an estimate counts as about right.
ABOUT_RIGHT = Decimal("0.05")

_MONEY = DecimalField(max_digits=30, decimal_places=10)


@dataclass(frozen=True)
class Actual:
    compute_usd: Decimal = ZERO
    storage_running_usd: Decimal = ZERO
    storage_after_usd: Decimal = ZERO
    stops: int = 0
    compute_hours: int = 0

    @property
    def total_usd(self) -> Decimal:
        return self.compute_usd + self.storage_running_usd + self.storage_after_usd


NOTHING = Actual()


def actual_by_request(request_ids) -> dict[int, Actual]:
    """Request id → what it has cost so far, line by line (requests without records absent)."""
    ids = list(request_ids)
    if not ids:
        return {}
    link = "resource__provisioning_requests"
    storage = F("disk_usd") + F("storage_standard_usd") + F("storage_high_performance_usd")
    compute = F("total_usd") - storage
    ran = Q(gpu_usd__gt=0) | Q(cpu_usd__gt=0)
    # The resource's record of the hour before, billing compute: an index probe on the
    # records' (resource, bucket_start) key.
    ran_before = BillingRecord.objects.filter(
        resource_id=OuterRef("resource_id"),
        bucket_start=OuterRef("bucket_start") - Value(HOUR),
    ).filter(ran)
    rows = (
        BillingRecord.objects.filter(
            **{
                f"{link}__in": ids,
                "allocation_id": F(f"{link}__allocation_id"),
                "bucket_start__gte": F(f"{link}__spend_counted_from"),
            }
        )
        .values(f"{link}__pk")
        .annotate(
            compute=Coalesce(Sum(compute, output_field=_MONEY), ZERO, output_field=_MONEY),
            storage_running=Coalesce(
                Sum(storage, filter=ran, output_field=_MONEY), ZERO, output_field=_MONEY
            ),
            storage_after=Coalesce(
                Sum(storage, filter=~ran, output_field=_MONEY), ZERO, output_field=_MONEY
            ),
            hours=Count("bucket_start", filter=ran),
            starts=Count("bucket_start", filter=ran & ~Exists(ran_before)),
            resources=Count("resource_id", filter=ran, distinct=True),
        )
    )
    return {
        row[f"{link}__pk"]: Actual(
            compute_usd=row["compute"],
            storage_running_usd=row["storage_running"],
            storage_after_usd=row["storage_after"],
            stops=max(0, row["starts"] - row["resources"]),
            compute_hours=row["hours"],
        )
        for row in rows
    }


@dataclass(frozen=True)
class Accuracy:
    """How the actual spend of `requests` compares with their estimates, together."""

    requests: int
    still_running: int
    estimate_usd: Decimal
    actual_usd: Decimal

    @property
    def ratio(self) -> Decimal | None:
        """Actual ÷ estimate (1.4: the estimates ran 1.4× low)."""
        if self.estimate_usd <= 0:
            return None
        return self.actual_usd / self.estimate_usd

    @property
    def words(self) -> str:
        if not self.requests:
            return "no provisioned request to compare with yet"
        n = f"the last {self.requests} request" + ("s" if self.requests != 1 else "")
        running = f" ({self.still_running} still running)" if self.still_running else ""
        ratio = self.ratio
        if ratio is None:
            return f"nothing was estimated for {n}{running}"
        if ratio == 0:
            return f"nothing was spent yet on {n}{running}"
        if abs(ratio - 1) <= ABOUT_RIGHT:
            return f"estimates were about right over {n}{running}"
        if ratio > 1:
            return f"estimates ran {ratio:.1f}× low over {n}{running}"
        return f"estimates ran {1 / ratio:.1f}× high over {n}{running}"


def _latest_provisioned(queryset, exclude_pk):
    return list(
        queryset.filter(state=ProvisioningRequest.State.PROVISIONED)
        .exclude(pk=exclude_pk)
        .order_by("-provisioned_at", "-pk")
        .values_list("pk", "estimate_total_usd", "ended_at")[:ACCURACY_REQUESTS]
    )


def _accuracy(rows, actual: dict[int, Actual]) -> Accuracy:
    return Accuracy(
        requests=len(rows),
        still_running=sum(1 for _, _, ended in rows if ended is None),
        estimate_usd=sum((estimate for _, estimate, _ in rows), ZERO),
        actual_usd=sum((actual.get(pk, NOTHING).total_usd for pk, _, _ in rows), ZERO),
    )


def past_accuracy(req: ProvisioningRequest) -> dict[str, Accuracy]:
    """The requester's and the lab's latest provisioned requests (this one aside), their
    estimates against what they cost: shown to whoever decides on `req`. Three queries."""
    mine = _latest_provisioned(
        ProvisioningRequest.objects.filter(requester_id=req.requester_id), req.pk
    )
    lab = _latest_provisioned(ProvisioningRequest.objects.filter(lab_id=req.lab_id), req.pk)
    actual = actual_by_request({pk for pk, _, _ in mine + lab})
    return {"requester": _accuracy(mine, actual), "lab": _accuracy(lab, actual)}


def accuracy_of(requests, actual: dict[int, Actual]) -> Accuracy:
    """The provisioned ones of `requests` (a page of a lab's table) together."""
    rows = [
        (r.pk, r.estimate_total_usd, r.ended_at)
        for r in requests
        if r.state == ProvisioningRequest.State.PROVISIONED
    ]
    return _accuracy(rows, actual)
