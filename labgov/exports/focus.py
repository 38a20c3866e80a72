"""One institution's month as a FOCUS 1.2 cost-and-usage dataset (the FinOps Foundation's open
format that AWS, Azure, Google Cloud and others export), for the institution's FinOps tools.

One row per resource, charge period (the bucket as Runpod bills it: an hour) and charge: each
non-zero component of a billing record (GPU, CPU, pod disk, network storage standard or
high-performance, serverless GPU/CPU/disk/fee, cluster GPU/disk/networking) is a row, and
whatever a record's total holds beyond its components (a public endpoint's whole amount,
normally nothing else) is a row of its own. So the rows of a record add up to its total to
the last stored digit, and the dataset's Runpod rows to the month's billing records: the
figure the reconciliation compares with Runpod's own account total (runpod/reconcile.py,
invoicing/bridge.py).

- BilledCost = EffectiveCost = ListCost = ContractedCost: Runpod bills at its list prices,
  with no commitments or negotiated rates labgov knows of; every stored digit is written
  (amounts derived from Runpod keep ten decimal places), nothing is rounded.
- ChargeCategory "Usage"; ChargeClass "Correction" on the rows of a closed month whose record
  arrived or changed after finance closed it (late usage: labgov's invoices charge it in the
  first open month as a correction of that month), else empty.
- Credits and manual adjustments on the month's live invoices are rows of ChargeCategory
  "Adjustment", issued by the institution (InvoiceIssuerName), apart from Runpod's bill.
- PricingQuantity = ConsumedQuantity = the charge period in hours (unit "Hours"): Runpod's
  billing API gives amounts per bucket, not quantities.
- Tags: a JSON object of labgov's attribution under the `labgov/` prefix (institution, lab,
  funding source, award number, cost center, allocation, person), or `labgov/unattributed`.
  Columns labgov adds carry the `x_` prefix FOCUS reserves for them.

On PostgreSQL the CSV is written by PostgreSQL itself (COPY of one SELECT that expands each
record into its charges, with the formula guard of core/csv_export in SQL): a million rows at
the speed of COPY, in bounded memory. Elsewhere (SQLite) the same rows come from Python;
tests/exports/test_focus.py checks that both agree.
"""

import datetime as dt
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import connections

from labgov.accounts.models import Lab
from labgov.core.csv_export import copy_sql_csv_stream, csv_stream
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, FundingSource
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.runpod.models import (
    BillingRecord,
    BillingSource,
    Resource,
    ResourceKind,
    RunpodAccount,
)
from labgov.runpod.partitions import detached_within
from labgov.usage.models import ClosedPeriod
from labgov.usage.periods import billing_period

FOCUS_VERSION = "1.2"
PROVIDER = "Runpod"
CURRENCY = "USD"
TAG_PREFIX = "labgov/"
EOL = "\n"  # COPY's line end: every line of the file ends alike

COLUMNS = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountId",
    "CommitmentDiscountStatus",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "Tags",
    "x_LabgovAccount",
    "x_RunpodResourceKind",
    "x_Component",
    "x_Source",
]

# The record columns a charge comes from, in row order; "other" is the total's remainder.
COMPONENTS = [
    ("gpu", "gpu_usd"),
    ("cpu", "cpu_usd"),
    ("disk", "disk_usd"),
    ("storage_standard", "storage_standard_usd"),
    ("storage_high_performance", "storage_high_performance_usd"),
    ("fee", "fee_usd"),
    ("networking", "networking_usd"),
    ("other", None),
]


@dataclass(frozen=True)
class Charge:
    label: str  # ChargeDescription's first words
    service: str  # ServiceName
    category: str  # ServiceCategory
    subcategory: str  # ServiceSubcategory (one of FOCUS's, under `category`)
    sku: str  # SkuId (GPU charges: the GPU type, when the resource names one)


CHARGES: dict[tuple[str, str], Charge] = {
    ("pod", "gpu"): Charge("GPU compute", "Runpod Pods", "Compute", "Virtual Machines", "pod-gpu"),
    ("pod", "cpu"): Charge("CPU compute", "Runpod Pods", "Compute", "Virtual Machines", "pod-cpu"),
    ("pod", "disk"): Charge(
        "Pod disk (container + volume)", "Runpod Pod Disk", "Storage", "Block Storage", "pod-disk"
    ),
    ("network_volume", "storage_standard"): Charge(
        "Network storage (standard)",
        "Runpod Network Volumes",
        "Storage",
        "File Storage",
        "network-volume-standard",
    ),
    ("network_volume", "storage_high_performance"): Charge(
        "Network storage (high-performance)",
        "Runpod Network Volumes",
        "Storage",
        "File Storage",
        "network-volume-high-performance",
    ),
    ("serverless", "gpu"): Charge(
        "Serverless GPU compute",
        "Runpod Serverless",
        "Compute",
        "Serverless Compute",
        "serverless-gpu",
    ),
    ("serverless", "cpu"): Charge(
        "Serverless CPU compute",
        "Runpod Serverless",
        "Compute",
        "Serverless Compute",
        "serverless-cpu",
    ),
    ("serverless", "disk"): Charge(
        "Serverless disk", "Runpod Serverless Disk", "Storage", "Block Storage", "serverless-disk"
    ),
    ("serverless", "fee"): Charge(
        "Serverless platform fee",
        "Runpod Serverless",
        "Compute",
        "Serverless Compute",
        "serverless-fee",
    ),
    ("cluster", "gpu"): Charge(
        "Cluster GPU compute",
        "Runpod Instant Clusters",
        "Compute",
        "Virtual Machines",
        "cluster-gpu",
    ),
    ("cluster", "disk"): Charge(
        "Cluster disk", "Runpod Instant Cluster Disk", "Storage", "Block Storage", "cluster-disk"
    ),
    ("cluster", "networking"): Charge(
        "Cluster networking",
        "Runpod Instant Cluster Networking",
        "Networking",
        "Network Connectivity",
        "cluster-networking",
    ),
    ("endpoint", "other"): Charge(
        "Public endpoint usage",
        "Runpod Public Endpoints",
        "AI and Machine Learning",
        "AI Platforms",
        "public-endpoint",
    ),
}
# FOCUS: one ServiceCategory (and subcategory) per ServiceName, so each name above is of one.
OTHER_SERVICE = "Runpod Other Charges"
CHARGEBACK_SERVICE = "labgov Chargeback Adjustments"


def charge_of(kind: str, component: str) -> Charge:
    """The charge of a record's component; a component the kind does not have (stored by
    mistake, or the remainder of a total beyond its components) is an "other" charge."""
    found = CHARGES.get((kind, component))
    if found is not None:
        return found
    return Charge(
        f"Other charges ({component.replace('_', ' ')})",
        OTHER_SERVICE,
        "Other",
        "Other (Other)",
        f"{kind.replace('_', '-')}-{component.replace('_', '-')}",
    )


RESOURCE_TYPES = {
    ResourceKind.POD: "Pod",
    ResourceKind.NETWORK_VOLUME: "Network volume",
    ResourceKind.SERVERLESS: "Serverless endpoint",
    ResourceKind.CLUSTER: "Instant cluster",
    ResourceKind.ENDPOINT: "Public endpoints (account-wide)",
}
GPU_COMPONENT = "gpu"
UNIT = "Hours"
SOURCE_RECORD = "Runpod billing record"


@dataclass(frozen=True)
class Period:
    """A month to export: its UTC span and, when finance closed it, when."""

    institution: object
    month: dt.date
    start: dt.datetime
    end: dt.datetime
    closed_at: dt.datetime | None


def period_of(institution, month: dt.date) -> Period:
    """The month's span; refused, in words, when its records are archived (a dataset missing
    a month's records would look whole)."""
    month = month.replace(day=1)
    start, end = billing_period(month.year, month.month, institution.time_zone)
    if archived := detached_within(start, end):
        raise DomainError(
            f"The billing records of {archived[0]:%B %Y} are archived (detached after the "
            "period was closed), so its FOCUS dataset cannot be written until an operator "
            f"attaches the month again (manage.py billing_partitions attach {archived[0]:%Y-%m})."
        )
    closed_at = (
        ClosedPeriod.objects.filter(institution=institution, month=month)
        .values_list("closed_at", flat=True)
        .first()
    )
    return Period(institution, month, start, end, closed_at)


def iso(moment: dt.datetime) -> str:
    """FOCUS's date/time format: ISO 8601 in UTC with a Z."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def billing_account_id(account_id: int) -> str:
    # labgov's connection: Runpod's API names no account id of its own.
    return f"runpod-connection-{account_id}"


def tags(
    institution_name: str,
    *,
    lab=None,
    funding_source=None,
    award=None,
    cost_center=None,
    allocation=None,
    person=None,
    unattributed=False,
) -> dict:
    """labgov's attribution as FOCUS tags (KeyValueFormat: a JSON object), empty values left
    out; a record nobody pays for says so."""
    pairs = {
        "institution": institution_name,
        "lab": lab,
        "funding_source": funding_source,
        "award_number": award,
        "cost_center": cost_center,
        "allocation": None if allocation is None else str(allocation),
        "person": person,
    }
    result = {TAG_PREFIX + k: v for k, v in pairs.items() if v not in (None, "")}
    if unattributed:
        result[TAG_PREFIX + "unattributed"] = True
    return result


def dataset(institution, month: dt.date, *, progress=None) -> Iterator[bytes]:
    """The month's FOCUS CSV in pieces of bytes: Runpod's charges (COPY on PostgreSQL), then
    the invoices' credits and adjustments."""
    period = period_of(institution, month)
    if connections[BillingRecord.objects.db].vendor == "postgresql":
        sql, params = _charges_sql(period)
        yield from copy_sql_csv_stream(
            sql,
            params,
            header=COLUMNS,
            using=BillingRecord.objects.db,
            progress=progress,
            lineterminator=EOL,
            guarded=GUARDED,
        )
        rows = adjustment_rows(period)
    else:
        yield (",".join(COLUMNS) + EOL).encode()
        rows = itertools.chain(charge_rows(period), adjustment_rows(period))
    for piece in csv_stream(rows, lineterminator=EOL):
        yield piece.encode()


def rows(institution, month: dt.date) -> Iterator[list]:
    """The dataset's rows from Python (any database): what `dataset` writes, as lists."""
    period = period_of(institution, month)
    return itertools.chain(charge_rows(period), adjustment_rows(period))


# Python ---------------------------------------------------------------------------------------

_RECORD_FIELDS = [
    "resource_id",
    "bucket_start",
    "bucket_end",
    "kind",
    "synced_at",
    "total_usd",
    *[column for _, column in COMPONENTS if column],
    "allocation_id",
]


HOUR_PLACES = Decimal("0.000001")


def _hours(start: dt.datetime, end: dt.datetime) -> str:
    """The charge period in hours, with six decimals (a decimal, never read as an integer)."""
    return format((Decimal((end - start).total_seconds()) / 3600).quantize(HOUR_PLACES), "f")


def charge_rows(period: Period) -> Iterator[list]:
    """The month's Runpod charges, row by row (what _charges_sql writes on PostgreSQL)."""
    institution = period.institution
    resources = {
        r.pk: r
        for r in Resource.objects.filter(
            account__institution=institution, account__billing_source=BillingSource.RUNPOD_API
        ).select_related("account")
    }
    owners = _owners(institution)
    records = (
        BillingRecord.objects.filter(
            resource__account__institution=institution,
            resource__account__billing_source=BillingSource.RUNPOD_API,
            bucket_start__gte=period.start,
            bucket_start__lt=period.end,
        )
        .order_by("resource_id", "bucket_start")
        .values_list(*_RECORD_FIELDS)
    )
    billing_start, billing_end = iso(period.start), iso(period.end)
    for resource_id, start, end, kind, synced, total, *amounts, allocation_id in records.iterator(
        chunk_size=2000
    ):
        resource = resources[resource_id]
        correction = period.closed_at is not None and synced > period.closed_at
        rest = total - sum(amounts, Decimal(0))
        hours = _hours(start, end)
        lab, source, award, cost_center, person = owners.get(allocation_id, (None,) * 5)
        tag_text = json.dumps(
            tags(
                institution.name,
                lab=lab,
                funding_source=source,
                award=award,
                cost_center=cost_center,
                allocation=allocation_id,
                person=person,
                unattributed=allocation_id is None,
            ),
            sort_keys=True,
        )
        for (component, _), amount in zip(COMPONENTS, [*amounts, rest], strict=True):
            if not amount:
                continue
            charge = charge_of(kind, component)
            sku = charge.sku
            if component == GPU_COMPONENT and resource.gpu_type_id:
                sku = resource.gpu_type_id
            cost = format(amount, "f")
            yield [
                cost,
                billing_account_id(resource.account_id),
                resource.account.name,
                CURRENCY,
                billing_end,
                billing_start,
                "Usage",
                "Correction" if correction else "",
                f"{charge.label}: {RESOURCE_TYPES.get(kind, kind)} {resource.label}"[:500],
                "Usage-Based",
                iso(end),
                iso(start),
                "",  # no commitment discounts: Runpod bills at its prices
                "",
                hours,
                UNIT,
                cost,
                cost,
                "",  # Runpod's own invoice: labgov is not told its id
                PROVIDER,
                cost,
                hours,
                UNIT,
                PROVIDER,
                PROVIDER,
                resource.data_center_id,
                resource.data_center_id,
                resource.runpod_id or f"endpoints-{resource.account_id}",
                resource.label,
                RESOURCE_TYPES.get(kind, kind),
                charge.category,
                charge.service,
                charge.subcategory,
                sku,
                tag_text,
                resource.account.name,
                kind,
                component,
                SOURCE_RECORD,
            ]


def _owners(institution) -> dict[int, tuple]:
    """allocation id → (lab, funding source, award number, cost center, person)."""
    return {
        pk: rest
        for pk, *rest in Allocation.objects.filter(
            funding_source__institution=institution
        ).values_list(
            "pk",
            "funding_source__lab__name",
            "funding_source__name",
            "funding_source__award_number",
            "funding_source__cost_center",
            "user__username",
        )
    }


ADJUSTMENT_KINDS = (InvoiceLine.Kind.CREDIT, InvoiceLine.Kind.MANUAL)


def adjustment_rows(period: Period) -> Iterator[list]:
    """Credits and manual adjustments on the month's live invoices: the institution's own
    charges beside Runpod's bill (a credit is negative)."""
    institution = period.institution
    lines = (
        InvoiceLine.objects.filter(
            invoice__institution=institution,
            invoice__month=period.month,
            kind__in=ADJUSTMENT_KINDS,
        )
        .exclude(invoice__status=Invoice.Status.VOID)
        .select_related("invoice", "resource", "resource__account", "allocation__user")
        .order_by("invoice_id", "position")
    )
    billing_start, billing_end = iso(period.start), iso(period.end)
    for line in lines:
        invoice, resource = line.invoice, line.resource
        cost = format(line.amount_usd, "f")
        label = invoice.number or f"draft #{invoice.pk}"
        allocation = line.allocation
        # An invoice is always a funding source's, whether or not the line names an allocation.
        tag_text = json.dumps(
            tags(
                invoice.shown_institution_name,
                lab=invoice.shown_lab_name,
                funding_source=invoice.shown_funding_source_name,
                award=invoice.award_number,
                cost_center=invoice.cost_center,
                allocation=allocation.pk if allocation else None,
                person=allocation.user.username if allocation else None,
            ),
            sort_keys=True,
        )
        what = InvoiceLine.Kind(line.kind).label
        yield [
            cost,
            billing_account_id(resource.account_id) if resource else f"labgov-{institution.slug}",
            resource.account.name if resource else institution.name,
            CURRENCY,
            billing_end,
            billing_start,
            "Adjustment",
            "",
            f"{what} on invoice {label}: {line.description}"[:500],
            "One-Time",
            billing_end,
            billing_start,
            "",
            "",
            "",
            "",
            cost,
            cost,
            "",  # InvoiceId: Runpod's invoices' ids only (labgov's invoice is in x_Source)
            institution.name,
            cost,
            "",
            "",
            institution.name,
            institution.name,
            "",
            "",
            resource.runpod_id if resource else "",
            resource.label if resource else "",
            RESOURCE_TYPES.get(resource.kind, resource.kind) if resource else "",
            "Other",
            CHARGEBACK_SERVICE,
            "Other (Other)",
            "",
            tag_text,
            resource.account.name if resource else "",
            resource.kind if resource else "",
            line.kind,
            f"labgov invoice {label}",
        ]


# PostgreSQL -----------------------------------------------------------------------------------


def _literal_table(rows: list[tuple]) -> tuple[str, list]:
    """A VALUES list of parameters."""
    width = len(rows[0])
    one = "(" + ", ".join(["%s::text"] * width) + ")"
    return ", ".join([one] * len(rows)), [value for row in rows for value in row]


def _charges_sql(period: Period) -> tuple[str, list]:
    """One SELECT that writes every charge row of the month, in the columns' order, as text
    (numeric::text keeps every stored digit; times in UTC, the session's zone).

    What is the same for many rows is worked out once: each allocation's tags and each
    resource's texts in small materialized tables, each charge's names in a VALUES table; each
    record's own figures once in an inner query (OFFSET 0 keeps it apart, so a column used
    four times is computed once). The rows come in no particular order (no sort of a million
    wide rows): a FOCUS dataset is a set of rows."""
    record = BillingRecord._meta.db_table
    resource = Resource._meta.db_table
    account = RunpodAccount._meta.db_table
    allocation = Allocation._meta.db_table
    source = FundingSource._meta.db_table
    lab = Lab._meta.db_table
    user = get_user_model()._meta.db_table
    known = " + ".join(f"b.{column}" for _, column in COMPONENTS if column)
    amounts = ", ".join(
        f"('{name}', {f'b.{column}' if column else f'b.total_usd - ({known})'})"
        for name, column in COMPONENTS
    )
    charge_rows = [
        (kind, name, *_charge_tuple(charge_of(kind, name)), RESOURCE_TYPES[kind])
        for kind in [str(k) for k in RESOURCE_TYPES]  # Runpod's kinds (a FOCUS source's stay out)
        for name, _ in COMPONENTS
    ]
    charges, charge_params = _literal_table(charge_rows)
    iso_format = '\'YYYY-MM-DD"T"HH24:MI:SS"Z"\''
    p = TAG_PREFIX
    tags_sql = f"""jsonb_strip_nulls(jsonb_build_object(
        '{p}institution', %s::text, '{p}lab', nullif(l.name, ''),
        '{p}funding_source', nullif(fs.name, ''), '{p}award_number', nullif(fs.award_number, ''),
        '{p}cost_center', nullif(fs.cost_center, ''), '{p}allocation', al.id::text,
        '{p}person', nullif(u.username, '')))::text"""
    # (column, expression over the inner query x, the resource r, the charge m, the owner o)
    select = [
        "x.cost",
        "r.account_id",
        "r.account_name",
        f"'{CURRENCY}'",
        "%s::text",
        "%s::text",
        "'Usage'",
        "x.class",
        "left(m.label || ': ' || m.type || ' ' || r.label, 500)",
        "'Usage-Based'",
        "x.end_text",
        "x.start_text",
        "NULL",
        "NULL",
        "x.hours",
        f"'{UNIT}'",
        "x.cost",
        "x.cost",
        "NULL",
        f"'{PROVIDER}'",
        "x.cost",
        "x.hours",
        f"'{UNIT}'",
        f"'{PROVIDER}'",
        f"'{PROVIDER}'",
        "r.region",
        "r.region",
        "r.resource_id",
        "r.label",
        "m.type",
        "m.category",
        "m.service",
        "m.subcategory",
        f"CASE WHEN x.name = '{GPU_COMPONENT}' AND r.gpu_type_id <> '' THEN r.gpu_type_id "
        "ELSE m.sku END",
        "coalesce(o.tags, %s::text)",
        "r.account_name",
        "x.kind",
        "x.name",
        f"'{SOURCE_RECORD}'",
    ]
    assert len(select) == len(COLUMNS)
    # Built from this module's constants and the models' table names; values are parameters.
    sql = f"""
        WITH owner AS MATERIALIZED (
            SELECT al.id, {tags_sql} AS tags
            FROM {allocation} al
            JOIN {source} fs ON fs.id = al.funding_source_id
            JOIN {lab} l ON l.id = fs.lab_id
            JOIN {user} u ON u.id = al.user_id
            WHERE fs.institution_id = %s
        ),
        res AS MATERIALIZED (
            SELECT r.id, 'runpod-connection-' || r.account_id AS account_id,
                   a.name AS account_name,
                   coalesce(nullif(r.requested_name, ''), nullif(r.name, ''), r.runpod_id)
                       AS label,
                   coalesce(nullif(r.runpod_id, ''), 'endpoints-' || r.account_id)
                       AS resource_id,
                   nullif(r.data_center_id, '') AS region, r.gpu_type_id
            FROM {resource} r JOIN {account} a ON a.id = r.account_id
            WHERE a.institution_id = %s AND a.billing_source = 'runpod_api'
        )
        SELECT {", ".join(select)}
        FROM (
            SELECT b.resource_id, b.kind, b.allocation_id, c.name, c.amount::text AS cost,
                   to_char(b.bucket_start, {iso_format}) AS start_text,
                   to_char(b.bucket_end, {iso_format}) AS end_text,
                   round(extract(epoch FROM b.bucket_end - b.bucket_start) / 3600, 6)::text
                       AS hours,
                   CASE WHEN %s::timestamptz IS NOT NULL AND b.synced_at > %s::timestamptz
                        THEN 'Correction' END AS class
            FROM {record} b
            CROSS JOIN LATERAL (VALUES {amounts}) AS c(name, amount)
            WHERE b.resource_id IN (SELECT id FROM res)
              AND b.bucket_start >= %s AND b.bucket_start < %s AND c.amount <> 0
            OFFSET 0
        ) x
        JOIN res r ON r.id = x.resource_id
        JOIN (VALUES {charges})
            AS m(kind, name, label, service, category, subcategory, sku, type)
          ON m.kind = x.kind AND m.name = x.name
        LEFT JOIN owner o ON o.id = x.allocation_id
    """  # noqa: S608
    institution = period.institution
    closed = period.closed_at
    unattributed = json.dumps(tags(institution.name, unattributed=True), sort_keys=True)
    params = [
        institution.name,
        institution.pk,
        institution.pk,
        iso(period.end),
        iso(period.start),
        unattributed,
        closed,
        closed,
        period.start,
        period.end,
        *charge_params,
    ]
    return sql, params


# Columns that may carry text from Runpod or from people (names, ids, regions, tags): the
# formula guard's work. The others are numbers, times and this module's constants.
GUARDED = frozenset(
    COLUMNS.index(name)
    for name in (
        "BillingAccountName",
        "ChargeDescription",
        "RegionId",
        "RegionName",
        "ResourceId",
        "ResourceName",
        "SkuId",
        "Tags",
        "x_LabgovAccount",
    )
)


def _charge_tuple(charge: Charge) -> tuple:
    return (charge.label, charge.service, charge.category, charge.subcategory, charge.sku)
