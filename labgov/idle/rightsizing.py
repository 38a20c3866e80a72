"""Right-sizing: for each GPU pod of a lab with utilization samples over the last 30 days (and
the provisioning request it came from, if any), what was asked for against what its GPUs did,
and whether fewer or smaller GPUs would have done, with the monthly saving at the synced
catalog's prices.

The rules, kept simple and stated on the page:
- fewer GPUs: the most GPUs ever busy at once (a GPU counts as busy from 10 % utilization)
  is below the count; suggest that many (at least one);
- a smaller GPU: the peak GPU memory used (percent × the GPU's memory) fits, with 20 %
  headroom, in a cheaper catalog GPU available in the pod's cloud; suggest the cheapest such;
- the saving per month = (price now − suggested price) × the hours it ran in the last 30 days,
  scaled to a month of LABGOV_HOURS_PER_MONTH hours;
- each suggestion says how many days of samples it rests on (the hours with samples ÷ 24),
  and a pod with less than a day of them gets no saving: "not enough data yet: N hours of
  samples" (an afternoon's quiet is no reason to give up GPUs).
"""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import Sum
from django.db.models.functions import Coalesce

from labgov.core.money import ZERO
from labgov.dashboard.tables import MONEY, NUMBER, PERCENT, Column, Row, Table
from labgov.provisioning.models import DeploymentModel, ProvisioningRequest
from labgov.runpod.models import BillingRecord, GpuType, Resource, ResourceKind
from labgov.utilization.selectors import UsageSummary, usage_summaries

WINDOW_DAYS = 30
HEADROOM = Decimal("1.2")
# Less than a day of samples suggests nothing yet.
MIN_SAMPLED_HOURS = 24


@dataclass
class Suggestion:
    pod: Resource
    request: ProvisioningRequest | None
    usage: UsageSummary
    billed_usd: Decimal
    gpu_type_id: str
    gpu_count: int
    rate_now_usd: Decimal
    rate_suggested_usd: Decimal
    memory_peak_gb: Decimal | None

    @property
    def changes(self) -> bool:
        return self.rate_suggested_usd < self.rate_now_usd

    @property
    def enough_data(self) -> bool:
        return self.usage.hours >= MIN_SAMPLED_HOURS

    @property
    def sampled_days(self) -> Decimal:
        return (Decimal(self.usage.hours) / 24).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)

    @property
    def basis_words(self) -> str:
        hours = self.usage.hours
        if not self.enough_data:
            return f"not enough data yet: {hours} hour{'s' if hours != 1 else ''} of samples"
        return f"{self.sampled_days} days of samples ({hours} hours)"

    @property
    def monthly_saving_usd(self) -> Decimal | None:
        if not self.enough_data:
            return None
        hours = Decimal(self.usage.hours)
        month = Decimal(settings.LABGOV_HOURS_PER_MONTH)
        return (self.rate_now_usd - self.rate_suggested_usd) * hours * month / (WINDOW_DAYS * 24)

    @property
    def words(self) -> str:
        parts = []
        if self.gpu_count < self.pod.gpu_count:
            parts.append(f"{self.gpu_count} GPU{'s' if self.gpu_count > 1 else ''}")
        if self.gpu_type_id != self.pod.gpu_type_id:
            parts.append(f"{self.gpu_type_id}")
        return "; ".join(parts)


def _price(gpu: GpuType, cloud: str) -> Decimal:
    return gpu.community_price_per_hr_usd if cloud == "COMMUNITY" else gpu.secure_price_per_hr_usd


def _available(gpu: GpuType, cloud: str) -> bool:
    return gpu.community_available if cloud == "COMMUNITY" else gpu.secure_available


def lab_pods(lab):
    return (
        Resource.objects.filter(
            kind=ResourceKind.POD,
            gpu_count__gt=0,
            current_allocation__funding_source__lab=lab,
        )
        .select_related("current_allocation__user")
        .defer("env")
    )


def suggestions(lab, *, now: dt.datetime) -> list[Suggestion]:
    pods = {p.pk: p for p in lab_pods(lab)}
    usage = usage_summaries(pods, start=now - dt.timedelta(days=WINDOW_DAYS), end=now)
    if not usage:
        return []
    catalog = {g.gpu_id: g for g in GpuType.objects.all()}
    requests = {}
    for request in ProvisioningRequest.objects.filter(
        lab=lab, deployment_model=DeploymentModel.POD, resources__in=list(usage)
    ).prefetch_related("resources"):
        for resource in request.resources.all():
            requests[resource.pk] = request
    billed = dict(
        BillingRecord.objects.filter(resource_id__in=list(usage))
        .values("resource_id")
        .annotate(total=Coalesce(Sum("total_usd"), ZERO))
        .values_list("resource_id", "total")
    )
    found = []
    for rid, summary in usage.items():
        pod = pods[rid]
        gpu = catalog.get(pod.gpu_type_id)
        if gpu is None:
            continue
        count = max(1, min(pod.gpu_count, summary.busy_gpus_max))
        peak_gb = Decimal(summary.memory_util_max) * gpu.memory_gb / 100
        best, best_rate = gpu, _price(gpu, pod.cloud) * count
        for other in catalog.values():
            if not _available(other, pod.cloud) or other.memory_gb * 1 < peak_gb * HEADROOM:
                continue
            rate = _price(other, pod.cloud) * count
            if Decimal(0) < rate < best_rate:
                best, best_rate = other, rate
        found.append(
            Suggestion(
                pod=pod,
                request=requests.get(rid),
                usage=summary,
                billed_usd=billed.get(rid, ZERO),
                gpu_type_id=best.gpu_id,
                gpu_count=count,
                rate_now_usd=_price(gpu, pod.cloud) * pod.gpu_count,
                rate_suggested_usd=best_rate,
                memory_peak_gb=peak_gb,
            )
        )
    found = [s for s in found if s.changes]
    # The suggestions with a saving first, largest first; those waiting for data after them.
    found.sort(key=lambda s: (s.enough_data, s.monthly_saving_usd or ZERO), reverse=True)
    return found


def suggestions_table(found: list[Suggestion]) -> Table:
    columns = [
        Column("pod", "Pod"),
        Column("request", "Request"),
        Column("owner", "Owner"),
        Column("requested", "Requested GPUs"),
        Column("hours_requested", "Hours requested", NUMBER),
        Column("hours_run", "Hours sampled (30 days)", NUMBER),
        Column("busy_mean", "Busy GPUs (mean)", NUMBER),
        Column("busy_max", "Busy GPUs (max)", NUMBER),
        Column("util", "Mean GPU utilization", PERCENT),
        Column("memory_peak", "GPU memory peak", PERCENT),
        Column("billed", "Billed (USD)", MONEY),
        Column("suggested", "Suggested"),
        Column("basis", "Rests on"),
        Column("saving", "Saving per month (USD)", MONEY),
    ]
    rows = []
    for s in found:
        owner = s.pod.current_allocation.user if s.pod.current_allocation else None
        rows.append(
            Row(
                [
                    s.pod.label,
                    f"#{s.request.pk} {s.request.title}" if s.request else "",
                    str(owner) if owner else "",  # the full name (the username if none)
                    f"{s.pod.gpu_count}× {s.pod.gpu_type_id}",
                    s.request.expected_hours if s.request else None,
                    s.usage.hours,
                    f"{s.usage.busy_gpus_mean:.1f}",
                    s.usage.busy_gpus_max,
                    Decimal(f"{s.usage.util_mean:.1f}"),
                    Decimal(s.usage.memory_util_max),
                    s.billed_usd,
                    f"{s.gpu_count}× {s.gpu_type_id}" if s.enough_data else "",
                    s.basis_words,
                    s.monthly_saving_usd,
                ]
            )
        )
    total = sum((s.monthly_saving_usd for s in found if s.enough_data), ZERO)
    return Table(
        name="rightsizing",
        title="Pods that could use fewer or smaller GPUs",
        columns=columns,
        rows=rows,
        footer=["Total", "", "", "", None, None, "", None, None, None, None, "", "", total]
        if rows
        else None,
        default_sort="-saving",
        empty="No pod's utilization over the last 30 days suggests fewer or smaller GPUs.",
    )
