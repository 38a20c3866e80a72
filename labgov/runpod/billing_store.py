"""Writing billing records: upserted on (resource, bucket start), so re-syncing a window, or
overlapping windows, replaces records instead of adding them."""

import datetime as dt
from decimal import Decimal

from django.db.models import Max

from labgov.core.periods import UTC
from labgov.runpod.attribution import Timeline, rules_apply
from labgov.runpod.models import AccountBillingRecord, BillingRecord, Resource, ResourceKind
from labgov.runpod.types import AccountBillingRecord as AccountRecord
from labgov.runpod.types import BillingKind
from labgov.runpod.types import BillingRecord as Record

KIND_OF = {
    BillingKind.POD: ResourceKind.POD,
    BillingKind.NETWORK_VOLUME: ResourceKind.NETWORK_VOLUME,
    BillingKind.SERVERLESS: ResourceKind.SERVERLESS,
    BillingKind.CLUSTER: ResourceKind.CLUSTER,
    BillingKind.ENDPOINT: ResourceKind.ENDPOINT,
}
# API component name -> BillingRecord column.
COMPONENT_COLUMNS = {
    "gpuAmount": "gpu_usd",
    "cpuAmount": "cpu_usd",
    "diskAmount": "disk_usd",
    "standardAmount": "storage_standard_usd",
    "highPerformanceAmount": "storage_high_performance_usd",
    "feeAmount": "fee_usd",
    "networkingAmount": "networking_usd",
}
AMOUNT_COLUMNS = ["total_usd", *COMPONENT_COLUMNS.values()]
ZERO = Decimal(0)


def _resource_ids(account, fetched: dict[BillingKind, list[Record]]) -> dict[tuple[str, str], int]:
    """Map (kind, runpod id) to Resource pk, creating rows for resources billed but never seen
    in a list (terminated before the first sync): their spend must not be dropped."""
    wanted = {(KIND_OF[kind], r.resource_id) for kind, records in fetched.items() for r in records}
    if not wanted:
        return {}
    kinds = {k for k, _ in wanted}
    known = {
        (kind, rid): pk
        for pk, kind, rid in Resource.objects.filter(account=account, kind__in=kinds).values_list(
            "pk", "kind", "runpod_id"
        )
    }
    missing = wanted - set(known)
    if missing:
        last_bucket = {}
        for kind, records in fetched.items():
            for r in records:
                key = (KIND_OF[kind], r.resource_id)
                if key in missing:
                    last_bucket[key] = max(last_bucket.get(key, r.end), r.end)
        stubs = [
            Resource(
                account=account,
                kind=kind,
                runpod_id=rid,
                name="Account-wide endpoints" if kind == ResourceKind.ENDPOINT else "",
                # The endpoint aggregate never vanishes; anything else was gone before we saw it.
                gone_at=None if kind == ResourceKind.ENDPOINT else last_bucket[(kind, rid)],
                status="" if kind == ResourceKind.ENDPOINT else "UNSEEN",
            )
            for kind, rid in missing
        ]
        Resource.objects.bulk_create(stubs, ignore_conflicts=True)
        # An account-wide rule covers these too, from their first record on.
        rules_apply(account=account)
        known.update(
            {
                (kind, rid): pk
                for pk, kind, rid in Resource.objects.filter(
                    account=account,
                    kind__in={k for k, _ in missing},
                    runpod_id__in={rid for _, rid in missing},
                ).values_list("pk", "kind", "runpod_id")
            }
        )
    return known


def records_upsert(*, account, fetched: dict[BillingKind, list[Record]]) -> set[dt.date]:
    """Upsert the records and attribute each to its allocation. Returns the UTC days touched."""
    ids = _resource_ids(account, fetched)
    timeline = Timeline.for_resources(set(ids.values()))
    now = dt.datetime.now(UTC)
    rows = []
    days: set[dt.date] = set()
    for kind, records in fetched.items():
        resource_kind = KIND_OF[kind]
        for r in records:
            resource_id = ids[(resource_kind, r.resource_id)]
            amounts = {column: ZERO for column in COMPONENT_COLUMNS.values()}
            for name, value in r.components.items():
                column = COMPONENT_COLUMNS.get(name)
                if column is not None:
                    amounts[column] = value
            rows.append(
                BillingRecord(
                    resource_id=resource_id,
                    account_id=account.pk,
                    kind=resource_kind,
                    bucket_start=r.start,
                    bucket_end=r.end,
                    total_usd=r.total_usd,
                    allocation_id=timeline.allocation_at(resource_id, r.start),
                    synced_at=now,
                    **amounts,
                )
            )
            days.add(r.start.astimezone(UTC).date())
    BillingRecord.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["resource", "bucket_start"],
        update_fields=[*AMOUNT_COLUMNS, "bucket_end", "allocation", "synced_at"],
    )
    return days


def account_records_upsert(*, account, records: list[AccountRecord]) -> None:
    now = dt.datetime.now(UTC)
    AccountBillingRecord.objects.bulk_create(
        [
            AccountBillingRecord(
                account=account,
                bucket_start=r.start,
                bucket_end=r.end,
                total_usd=r.total_usd,
                components={k: str(v) for k, v in r.components.items()},
                synced_at=now,
            )
            for r in records
        ],
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["account", "bucket_start"],
        update_fields=["bucket_end", "total_usd", "components", "synced_at"],
    )


def latest_bucket(account) -> dt.datetime | None:
    return BillingRecord.objects.filter(account=account).aggregate(m=Max("bucket_end"))["m"]
