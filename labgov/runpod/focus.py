"""FOCUS billing sources: other clouds' FOCUS 1.0–1.2 cost-and-usage files, governed as Runpod.

The design. A FOCUS billing source is an account (`RunpodAccount` with `billing_source=focus`,
its `provider` the cloud's name, no API key): never synced, never provisioned on. Its file's
rows become that account's resources (kind `cloud`, keyed by ResourceId) and billing records,
its own totals the account's totals per UTC day, and the import a run whose window (the file's
billing period) is held. These are the tables Runpod's sync writes (labgov/runpod/providers.py:
the seam), so everything downstream is shared, not copied: rules on ResourceId, ResourceName
(name prefix), SubAccountId or a tag (Tags are the resource's env) with the same back-dating
rule; the unattributed queue; the ledger, rollups, budgets, alerts and forecasts; invoices per
funding source (categories cloud compute / storage / other, and the provider's credits and
adjustments each their own line); reconciliation per account against the file's own totals;
close and late usage.

A record is one resource's charges starting at one ChargePeriodStart: the file's rows of the
same resource and charge period (usage, tax, credit lines of one hour or day) are summed
exactly into it, as Runpod's buckets are one per resource and hour. It keeps its FOCUS
ChargeCategory and ChargeClass: the first of its rows' categories in FOCUS's order (Usage,
Purchase, Tax, Credit, Adjustment), Correction if any row is one, and the credits and
adjustments summed into it apart (`credit_usd`, `adjustment_usd`, and not into its compute or
storage part), so a usage row and its credit in one hour are one Usage record whose credit
still shows, and is its own (negative) line on the invoice. Amounts are the file's
BilledCost (Decimal, never float); a currency other than USD needs the source's exchange rate
(USD per unit), and is converted to 10 places.

A file is one billing period (BillingPeriodStart/End, the same on every row), and it replaces
what the source said of that period: records of the period the file does not hold are removed,
so a corrected file replaces the first. The same file again (same SHA-256 as the period's latest
file) changes nothing. A file of a closed month is refused unless the importer says it is a
correction (`late=True`): its records are then written as Runpod's late records are, and the
differences become late-usage lines on the first open month's invoices (invoicing/lines.py:
late_usage); the closed invoices never change.

Everything in a file is untrusted: each row is checked before anything is written (required
columns, types, the spec's non-negative quantities, one currency and one billing period per
file), and the first bad value is refused naming its row and column; the import runs in one
transaction, so a refused file writes nothing. On PostgreSQL the checked rows stream to the
database with COPY and are summed and upserted there in a few statements (bounded memory: only
the distinct resources are held in Python); elsewhere (SQLite) in Python.
"""

import contextlib
import csv
import datetime as dt
import hashlib
import io
import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from django.db import connection, transaction
from django.utils import timezone

from labgov.audit.services import audit_record
from labgov.core import dataversion
from labgov.core.errors import DomainError
from labgov.core.money import ZERO
from labgov.core.periods import UTC
from labgov.runpod import partitions
from labgov.runpod.attribution import (
    Timeline,
    allocation_at_sql,
    days_between,
    rules_apply,
    span_unattributed,
    timeline_sql,
)
from labgov.runpod.locks import account_lock
from labgov.runpod.models import (
    AccountBillingRecord,
    BillingRecord,
    BillingSource,
    ChargeCategory,
    FocusFile,
    Resource,
    ResourceKind,
    RunpodAccount,
    SyncRun,
)
from labgov.runpod.providers import span_written

PROVIDERS = ("AWS", "Microsoft Azure", "Google Cloud", "Oracle Cloud")
REQUIRED = (
    "BilledCost",
    "BillingAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ProviderName",
    "ServiceCategory",
    "ServiceName",
)
OPTIONAL = (
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SubAccountId",
    "SubAccountName",
    "RegionId",
    "Tags",
    "ConsumedQuantity",
    "PricingQuantity",
    "ChargeClass",
)
# The record's category is the first of its rows' in this order (labgov/runpod/models.py).
CATEGORY_ORDER = tuple(c.value for c in ChargeCategory)
CHARGE_CATEGORIES = {name: i for i, name in enumerate(CATEGORY_ORDER)}
CREDIT, ADJUSTMENT = CHARGE_CATEGORIES["Credit"], CHARGE_CATEGORIES["Adjustment"]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
# ServiceCategory -> the record's part: c compute (cpu_usd), s storage
# (storage_standard_usd), o the rest (labgov/usage/services.py: categories_of).
SERVICE_PART = {"Compute": "c", "AI and Machine Learning": "c", "Storage": "s"}
NAME_MAX = 300
ID_MAX = 400
FLUSH_BYTES = 4 << 20
AMOUNT_LIMIT = Decimal(10) ** 12
AMOUNT_FLOOR = -AMOUNT_LIMIT


class FocusRefused(DomainError):
    """A file labgov will not import, with the row and column that are wrong."""


@dataclass
class ImportResult:
    file: FocusFile
    unchanged: bool = False  # the period's latest file was this very file: nothing written


@dataclass
class _Resource:
    name: str
    details: dict
    tags_raw: str
    tags: dict
    index: int  # the file's resources are numbered as met (the PostgreSQL writer's key)


@dataclass
class _Parsed:
    """What a file holds, once every row is checked."""

    version: str
    currency: str = ""
    period_start: dt.datetime | None = None
    period_end: dt.datetime | None = None
    rows: int = 0
    first_row: int = 0  # the row whose currency and billing period every other row repeats
    billed_total: Decimal = ZERO
    categories: dict[str, Decimal] = field(default_factory=dict)
    resources: dict[str, _Resource] = field(default_factory=dict)
    # Generic writer only: (resource id, bucket start) -> [end, total, compute, storage].
    buckets: dict | None = None


# --- sources -----------------------------------------------------------------------------------


def _clean_currency(currency: str) -> str:
    currency = (currency or "").strip().upper()
    if len(currency) != 3 or not currency.isalpha():
        raise DomainError(
            "The currency is a three-letter ISO 4217 code (USD, EUR, …).", field="currency"
        )
    return currency


def _clean_rate(currency: str, usd_per_unit) -> Decimal | None:
    if usd_per_unit in (None, ""):
        return None
    try:
        rate = Decimal(str(usd_per_unit).strip())
    except InvalidOperation:
        raise DomainError(
            "The exchange rate is a number: USD per one unit.", field="usd_per_unit"
        ) from None
    if not rate.is_finite() or rate <= 0 or rate >= Decimal(10) ** 10:
        raise DomainError(
            "The exchange rate is a positive number of USD per unit.", field="usd_per_unit"
        )
    if currency == "USD" and rate != 1:
        raise DomainError("A USD source needs no exchange rate.", field="usd_per_unit")
    return rate


@transaction.atomic
def source_create(
    *,
    actor,
    institution,
    name: str,
    provider: str,
    currency: str = "USD",
    usd_per_unit=None,
    lab=None,
) -> RunpodAccount:
    """An institution admin adds a FOCUS billing source: an account whose bills are imported
    from FOCUS files (no API key; never synced or provisioned on)."""
    from labgov.accounts import access

    access.deny_unless(access.can_manage_runpod_account(actor, institution.pk))
    name, provider = (name or "").strip(), (provider or "").strip()
    if not name or len(name) > 120:
        raise DomainError("The source needs a name (at most 120 characters).", field="name")
    if not provider or len(provider) > 60:
        raise DomainError(
            "Name the provider (AWS, Microsoft Azure, …; at most 60).", field="provider"
        )
    if provider.lower() == "runpod":
        raise DomainError(
            "Runpod accounts are connected with an API key, not FOCUS files.", field="provider"
        )
    if lab is not None and lab.institution_id != institution.pk:
        raise DomainError("The lab belongs to another institution.", field="lab")
    if RunpodAccount.objects.filter(institution=institution, name=name).exists():
        raise DomainError(f"An account or source called {name} exists already.", field="name")
    currency = _clean_currency(currency)
    rate = _clean_rate(currency, usd_per_unit)
    account = RunpodAccount.objects.create(
        institution=institution,
        lab=lab,
        name=name,
        provider=provider,
        billing_source=BillingSource.FOCUS,
        currency=currency,
        usd_per_unit=rate,
        base_url="https://focus.invalid",
        api_key_encrypted="",
        api_key_last4="",
    )
    audit_record(
        actor=actor,
        action="focus_source.create",
        target=account,
        institution_id=institution.pk,
        after={
            "name": name,
            "provider": provider,
            "currency": currency,
            "usd_per_unit": str(rate) if rate is not None else None,
            "lab_id": lab.pk if lab else None,
        },
    )
    return account


# --- reading a file --------------------------------------------------------------------------


def _refuse(row: int, column: str, what: str) -> FocusRefused:
    where = f"Row {row}, column {column}" if row else f"Column {column}"
    return FocusRefused(f"{where}: {what}. Nothing was imported.")


def _shown(value: str) -> str:
    value = value if len(value) <= 40 else value[:40] + "…"
    return repr(value)


def _time(value: str, row: int, column: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _refuse(row, column, f"{_shown(value)} is not an ISO 8601 date and time") from None
    if moment.tzinfo is None:
        raise _refuse(row, column, f"{_shown(value)} has no time zone (FOCUS times are UTC)")
    return moment.astimezone(UTC)


def _instant(value: str, row: int, column: str) -> tuple[dt.datetime, int]:
    """The instant and its microseconds since 1970 (exact: the PostgreSQL writer's key)."""
    moment = _time(value, row, column)
    return moment, (moment - EPOCH) // dt.timedelta(microseconds=1)


def _decimal(value: str, row: int, column: str) -> Decimal:
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise _refuse(row, column, f"{_shown(value)} is not a decimal number") from None
    if not number.is_finite():
        raise _refuse(row, column, f"{_shown(value)} is not a finite number")
    if not -AMOUNT_LIMIT < number < AMOUNT_LIMIT:
        raise _refuse(row, column, f"{_shown(value)} is too large")
    return number


def _version(header: list[str]) -> str:
    names = set(header)
    if "ServiceSubcategory" in names or "InvoiceId" in names:
        return "1.2"
    if "CapacityReservationId" in names or "CommitmentDiscountQuantity" in names:
        return "1.1"
    return "1.0"


def _escape(value: str) -> str:
    """COPY's text format: backslash, tab and line ends escaped."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = (
            value.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return value


def _read(stream, sink) -> _Parsed:
    """Check every row of a FOCUS CSV (bytes) and hand each to `sink(rid, resource index,
    (start, µs), (end, µs), billed, part, category index, correction)`; returns what the file
    holds. Raises FocusRefused at the first bad value."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        raise FocusRefused("The file is empty: a FOCUS file starts with a header row.") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise FocusRefused(
            f"Row 1 is not CSV text in UTF-8 ({exc}). Nothing was imported."
        ) from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise FocusRefused(
            "The file lacks the FOCUS column"
            + ("s " if len(missing) > 1 else " ")
            + ", ".join(missing)
            + " (row 1, the header). Nothing was imported."
        )
    if len(set(header)) != len(header):
        twice = sorted({h for h in header if header.count(h) > 1})
        raise FocusRefused(
            f"Row 1 names the column {', '.join(twice)} twice. Nothing was imported."
        )
    at = {name: i for i, name in enumerate(header)}
    col = {name: at.get(name) for name in (*REQUIRED, *OPTIONAL)}
    i_billed, i_cur = col["BilledCost"], col["BillingCurrency"]
    i_bps, i_bpe = col["BillingPeriodStart"], col["BillingPeriodEnd"]
    i_cps, i_cpe = col["ChargePeriodStart"], col["ChargePeriodEnd"]
    i_cat, i_svc, i_scat = col["ChargeCategory"], col["ServiceName"], col["ServiceCategory"]
    i_rid, i_name, i_sub = col["ResourceId"], col["ResourceName"], col["SubAccountId"]
    i_tags, i_cq, i_pq, i_class = (
        col["Tags"],
        col["ConsumedQuantity"],
        col["PricingQuantity"],
        col["ChargeClass"],
    )
    i_region, i_type, i_subname = col["RegionId"], col["ResourceType"], col["SubAccountName"]
    width = len(header)
    parsed = _Parsed(version=_version(header))
    categories: dict[str, Decimal] = {}
    resources = parsed.resources
    first_bps = first_bpe = None
    times: dict[str, tuple[dt.datetime, int]] = {}
    # Quantities already seen valid and not negative (most files repeat a few: 1, 0.5, 24).
    quantities_seen: set[str] = set()
    quantity_columns = [
        (index, name)
        for index, name in ((i_cq, "ConsumedQuantity"), (i_pq, "PricingQuantity"))
        if index is not None
    ]
    n = 1
    try:
        for n, row in enumerate(reader, start=2):
            if len(row) != width:
                if not row:
                    continue
                raise _refuse(
                    n,
                    header[min(len(row), width - 1)],
                    f"the row has {len(row)} fields, the header {width}",
                )
            cur = row[i_cur]
            if cur != parsed.currency:
                if parsed.currency:
                    raise _refuse(
                        n,
                        "BillingCurrency",
                        f"{_shown(cur)} after {parsed.currency} on the rows before: a file "
                        "bills in one currency",
                    )
                if len(cur) != 3 or not cur.isalpha() or not cur.isupper():
                    raise _refuse(n, "BillingCurrency", f"{_shown(cur)} is not an ISO 4217 code")
                parsed.currency = cur
                parsed.first_row = n
            bps, bpe = row[i_bps], row[i_bpe]
            if bps != first_bps or bpe != first_bpe:
                if first_bps is not None:
                    # The same instant may be written another way; compare the instants.
                    if _time(bps, n, "BillingPeriodStart") != parsed.period_start:
                        raise _refuse(
                            n,
                            "BillingPeriodStart",
                            f"{_shown(bps)} differs from row 2's: a file holds one billing period",
                        )
                    if _time(bpe, n, "BillingPeriodEnd") != parsed.period_end:
                        raise _refuse(
                            n,
                            "BillingPeriodEnd",
                            f"{_shown(bpe)} differs from row 2's: a file holds one billing period",
                        )
                else:
                    parsed.period_start = _time(bps, n, "BillingPeriodStart")
                    parsed.period_end = _time(bpe, n, "BillingPeriodEnd")
                    if parsed.period_end <= parsed.period_start:
                        raise _refuse(
                            n, "BillingPeriodEnd", "the billing period ends before it starts"
                        )
                    if parsed.period_end - parsed.period_start > dt.timedelta(days=31):
                        raise _refuse(n, "BillingPeriodEnd", "a billing period is at most a month")
                    first_bps, first_bpe = bps, bpe
            cps_text, cpe_text = row[i_cps], row[i_cpe]
            # A month has few distinct charge periods: each is read once.
            cps = times.get(cps_text)
            if cps is None:
                cps = times[cps_text] = _instant(cps_text, n, "ChargePeriodStart")
            cpe = times.get(cpe_text)
            if cpe is None:
                cpe = times[cpe_text] = _instant(cpe_text, n, "ChargePeriodEnd")
            if len(times) > 200_000:
                times.clear()
            if cpe[0] <= cps[0]:
                raise _refuse(
                    n, "ChargePeriodEnd", f"{_shown(cpe_text)} is not after ChargePeriodStart"
                )
            if cps[0] < parsed.period_start or cps[0] >= parsed.period_end:
                raise _refuse(
                    n, "ChargePeriodStart", f"{_shown(cps_text)} lies outside the billing period"
                )
            # Inline, as _decimal checks it (this runs once a row): _decimal names the fault.
            cost = row[i_billed]
            try:
                billed = Decimal(cost)
                if not AMOUNT_FLOOR < billed < AMOUNT_LIMIT:  # a NaN raises here too
                    raise InvalidOperation
            except InvalidOperation:
                billed = _decimal(cost, n, "BilledCost")
            category = row[i_cat]
            cat = CHARGE_CATEGORIES.get(category)
            if cat is None:
                raise _refuse(
                    n,
                    "ChargeCategory",
                    f"{_shown(category)} is none of {', '.join(CATEGORY_ORDER)}",
                )
            correction = i_class is not None and row[i_class] == "Correction"
            for index, name in quantity_columns:
                value = row[index]
                if not value or value in quantities_seen:
                    continue
                quantity = _decimal(value, n, name)
                if quantity >= 0:
                    if len(quantities_seen) < 10_000:
                        quantities_seen.add(value)
                # FOCUS: quantities are not negative, but in corrections of earlier charges.
                elif not correction and not (name == "PricingQuantity" and category == "Credit"):
                    raise _refuse(
                        n,
                        name,
                        f"{_shown(value)} is negative, which FOCUS allows only on "
                        "a Correction (ChargeClass)",
                    )
            service = row[i_svc]
            if not service:
                raise _refuse(n, "ServiceName", "it is empty (FOCUS requires it)")
            rid = row[i_rid] if i_rid is not None else ""
            if not rid:
                # No resource (taxes, support, a purchase): one pseudo-resource per service
                # and sub-account holds them, so they are attributed like any other.
                sub = row[i_sub] if i_sub is not None else ""
                rid = f"{service} ({sub})" if sub else service
            if len(rid) > ID_MAX:
                raise _refuse(n, "ResourceId", f"it is longer than {ID_MAX} characters")
            tags_raw = row[i_tags] if i_tags is not None else ""
            known = resources.get(rid)
            if known is None or known.tags_raw != tags_raw:
                tags = _tags(tags_raw, n)
                if known is None:
                    name = (row[i_name] if i_name is not None else "")[:NAME_MAX]
                    details = {
                        "sub_account_id": row[i_sub] if i_sub is not None else "",
                        "service_name": service,
                        "service_category": row[i_scat],
                    }
                    for key, index in (
                        ("sub_account_name", i_subname),
                        ("region_id", i_region),
                        ("resource_type", i_type),
                    ):
                        if index is not None and row[index]:
                            details[key] = row[index][:200]
                    known = _Resource(name, details, tags_raw, tags, len(resources))
                    resources[rid] = known
                else:
                    known.tags_raw, known.tags = tags_raw, {**known.tags, **tags}
            categories[category] = categories.get(category, ZERO) + billed
            sink(
                rid,
                known.index,
                cps,
                cpe,
                billed,
                SERVICE_PART.get(row[i_scat], "o"),
                cat,
                correction,
            )
    except csv.Error as exc:
        raise FocusRefused(f"Row {n + 1} is not valid CSV ({exc}). Nothing was imported.") from None
    except UnicodeDecodeError:
        raise FocusRefused(f"Row {n + 1} is not UTF-8 text. Nothing was imported.") from None
    if parsed.period_start is None:
        raise FocusRefused("The file has a header but no rows. Nothing was imported.")
    text.detach()  # the caller's stream stays open
    parsed.rows = n - 1
    parsed.billed_total = sum(categories.values(), ZERO)
    parsed.categories = categories
    return parsed


def _tags(raw: str, row: int) -> dict[str, str]:
    if not raw:
        return {}
    try:
        tags = json.loads(raw)
    except ValueError:
        raise _refuse(row, "Tags", "it is not a JSON object") from None
    if not isinstance(tags, dict):
        raise _refuse(row, "Tags", "it is not a JSON object of keys and values")
    return {str(k)[:100]: ("" if v is None else str(v))[:300] for k, v in list(tags.items())[:100]}


# --- importing -------------------------------------------------------------------------------


def sha256_of(stream) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
    stream.seek(0)
    return digest.hexdigest()


def _rate_for(account: RunpodAccount, parsed: _Parsed) -> Decimal:
    currency = parsed.currency
    if currency == "USD":
        return Decimal(1)
    if account.currency == currency and account.usd_per_unit:
        return account.usd_per_unit
    raise FocusRefused(
        f"Row {parsed.first_row}, column BillingCurrency: the file bills in {currency}, and "
        f"labgov keeps spend in USD: set {account.name}'s "
        f"currency to {currency} and its exchange rate (USD per {currency}) to import it. "
        "Nothing was imported."
    )


@dataversion.scoped(lambda *, account, **_: [account.institution_id])
def focus_import(
    *,
    actor,
    account: RunpodAccount,
    stream,
    file_name: str = "",
    late: bool = False,
    check_access: bool = True,
) -> ImportResult:
    """Import one FOCUS file (a binary stream that can seek) into a FOCUS billing source, in
    one transaction: every row checked first, then the period's records replaced."""
    if check_access:
        from labgov.accounts import access

        access.deny_unless(access.can_manage_runpod_account(actor, account.institution_id))
    if not account.is_focus:
        raise DomainError(f"{account.name} is a Runpod connection: it is synced, not imported.")
    if not account.is_active:
        raise DomainError(f"{account.name} is deactivated: turn it on again to import into it.")
    sha = sha256_of(stream)
    with transaction.atomic():
        account_lock(account.pk)
        account = RunpodAccount.objects.get(pk=account.pk)
        # The same file as the latest of its month: nothing to do (it was checked then).
        same = FocusFile.objects.filter(account=account, sha256=sha).first()
        if same is not None and same == _latest(account, same.period_start):
            return ImportResult(file=same, unchanged=True)
        stage = _writer()
        try:
            parsed = _read(stream, stage.add)
        except BaseException:
            stage.abort()
            raise
        stage.flush(parsed)
        latest = _latest(account, parsed.period_start)
        rate = _rate_for(account, parsed)
        from labgov.usage.periods import closed_until

        closed = closed_until(account.institution_id)
        if closed is not None and parsed.period_start < closed and not late:
            raise FocusRefused(
                f"Row {parsed.first_row}, column BillingPeriodStart: the file is of "
                f"{parsed.period_start:%B %Y}, which finance has closed: its "
                "invoices are frozen. Import it as a correction of a closed month, and its "
                "differences become late-usage lines on the first open month's invoices. "
                "Nothing was imported."
            )
        # Rare (the schedule makes months ahead): a new month's partition locks billing for
        # its readers until this transaction commits.
        partitions.ensure_months(parsed.period_start, parsed.period_end, trust_cache=False)
        now = timezone.now()
        run = SyncRun.objects.create(
            account=account,
            trigger=SyncRun.Trigger.IMPORT,
            triggered_by=actor if actor is not None and actor.is_authenticated else None,
            status=SyncRun.Status.SUCCEEDED,
            started_at=now,
            window_start=parsed.period_start,
            window_end=parsed.period_end,
        )
        _resources_ensure(account, parsed.resources)
        rules_apply(account=account)
        days = days_between(parsed.period_start, parsed.period_end)
        before = span_unattributed(account=account, days=days)
        records = stage.write(account, parsed, rate)
        entries = span_written(account=account, days=days, unattributed_before=before)
        total_usd = _round(parsed.billed_total * rate)
        focus_file = FocusFile.objects.create(
            account=account,
            run=run,
            file_name=(file_name or "")[:255],
            sha256=sha,
            focus_version=parsed.version,
            period_start=parsed.period_start,
            period_end=parsed.period_end,
            rows=parsed.rows,
            records=records,
            currency=parsed.currency,
            usd_per_unit=None if parsed.currency == "USD" else rate,
            billed_total=_round(parsed.billed_total),
            total_usd=total_usd,
            charge_categories={k: str(v) for k, v in sorted(parsed.categories.items())},
            late=late and closed is not None and parsed.period_start < closed,
            imported_by=run.triggered_by,
            imported_at=now,
        )
        counts = {"rows": parsed.rows, "records": records, "ledger_entries": entries}
        SyncRun.objects.filter(pk=run.pk).update(
            finished_at=timezone.now(), phase="done", counts=counts
        )
        audit_record(
            actor=actor,
            action="focus_file.import",
            target=focus_file,
            institution_id=account.institution_id,
            after={
                "account_id": account.pk,
                "file_name": focus_file.file_name,
                "sha256": sha,
                "period_start": parsed.period_start.isoformat(),
                "rows": parsed.rows,
                "currency": parsed.currency,
                "billed_total": str(parsed.billed_total),
                "total_usd": str(total_usd),
                "replaces": latest.pk if latest is not None else None,
                "late": focus_file.late,
            },
            note="correction of a closed month" if focus_file.late else "",
        )
    run.refresh_from_db()
    from labgov.runpod.sync import after_sync_run

    after_sync_run(run)
    return ImportResult(file=focus_file)


def _writer():
    """PostgreSQL's set-based writer where it runs; the generic one elsewhere (SQLite). Both
    write the same (tests/runpod/test_focus_writers.py)."""
    return _PgStage() if connection.vendor == "postgresql" else _PyStage()


def _latest(account, period_start) -> FocusFile | None:
    return (
        FocusFile.objects.filter(account=account, period_start=period_start)
        .order_by("-imported_at", "-id")
        .first()
    )


def _round(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("1e-10"))


def _resources_ensure(account, wanted: dict[str, _Resource]) -> None:
    """Create the file's resources labgov has not met, and keep names and tags current."""
    ids = list(wanted)
    known = {}
    for i in range(0, len(ids), 5000):
        for resource in Resource.objects.filter(
            account=account, kind=ResourceKind.CLOUD, runpod_id__in=ids[i : i + 5000]
        ).only("id", "runpod_id", "name", "env", "details"):
            known[resource.runpod_id] = resource
    now = timezone.now()
    Resource.objects.bulk_create(
        [
            Resource(
                account=account,
                kind=ResourceKind.CLOUD,
                runpod_id=rid,
                name=r.name,
                env=r.tags,
                details=r.details,
                status="billed",
                first_seen_at=now,
                last_seen_at=now,
            )
            for rid, r in wanted.items()
            if rid not in known
        ],
        batch_size=2000,
    )
    changed = []
    for rid, resource in known.items():
        r = wanted[rid]
        if (resource.name, resource.env, resource.details) != (
            r.name or resource.name,
            r.tags,
            r.details,
        ):
            resource.name, resource.env, resource.details = (
                r.name or resource.name,
                r.tags,
                r.details,
            )
            resource.last_seen_at = now
            changed.append(resource)
    Resource.objects.bulk_update(
        changed, ["name", "env", "details", "last_seen_at"], batch_size=2000
    )


class _PyStage:
    """The generic writer: buckets summed in Python (small files; SQLite)."""

    def __init__(self):
        # (resource id, bucket start) -> [end, total, compute, storage, credit, adjustment,
        # category index, correction]
        self.buckets: dict[tuple[str, dt.datetime], list] = {}

    def add(self, rid, _index, cps, cpe, billed, part, cat, correction):
        key = (rid, cps[0])
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = [cpe[0], ZERO, ZERO, ZERO, ZERO, ZERO, cat, correction]
        else:
            bucket[0] = max(bucket[0], cpe[0])
            bucket[6] = min(bucket[6], cat)
            bucket[7] = bucket[7] or correction
        bucket[1] += billed
        # A credit or adjustment is its own part, not the service's (usage/services.py:
        # categories_of gives each its own category, and invoices their own lines).
        if cat == CREDIT:
            bucket[4] += billed
        elif cat == ADJUSTMENT:
            bucket[5] += billed
        elif part == "c":
            bucket[2] += billed
        elif part == "s":
            bucket[3] += billed

    def flush(self, parsed):
        pass

    def abort(self):
        pass

    def write(self, account, parsed, rate) -> int:
        ids = dict(
            Resource.objects.filter(account=account, kind=ResourceKind.CLOUD).values_list(
                "runpod_id", "pk"
            )
        )
        timeline = Timeline.for_resources(set(ids.values()))
        now = timezone.now()
        rows = []
        for (rid, start), bucket in self.buckets.items():
            end, total, compute, storage, credit, adjustment, cat, correction = bucket
            resource_id = ids[rid]
            rows.append(
                BillingRecord(
                    resource_id=resource_id,
                    kind=ResourceKind.CLOUD,
                    bucket_start=start,
                    bucket_end=end,
                    total_usd=_round(total * rate),
                    cpu_usd=_round(compute * rate),
                    storage_standard_usd=_round(storage * rate),
                    credit_usd=_round(credit * rate),
                    adjustment_usd=_round(adjustment * rate),
                    charge_category=CATEGORY_ORDER[cat],
                    charge_class="Correction" if correction else "",
                    allocation_id=timeline.allocation_at(resource_id, start),
                    synced_at=now,
                )
            )
        period = BillingRecord.objects.filter(
            resource__account=account,
            bucket_start__gte=parsed.period_start,
            bucket_start__lt=parsed.period_end,
        )
        keep = {(r.resource_id, r.bucket_start) for r in rows}
        stale = [
            key for key in period.values_list("resource_id", "bucket_start") if key not in keep
        ]
        for resource_id, start in stale:
            BillingRecord.objects.filter(resource_id=resource_id, bucket_start=start).delete()
        BillingRecord.objects.bulk_create(
            rows,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["resource", "bucket_start"],
            update_fields=[
                "total_usd",
                "cpu_usd",
                "storage_standard_usd",
                "credit_usd",
                "adjustment_usd",
                "charge_category",
                "charge_class",
                "bucket_end",
                "allocation",
                "synced_at",
            ],
        )
        days: dict[dt.date, list[Decimal]] = {}
        for (_, start), bucket in self.buckets.items():
            sums = days.setdefault(start.astimezone(UTC).date(), [ZERO] * 5)
            for i, value in enumerate(bucket[1:6]):
                sums[i] += value
        days = {d: [_round(v * rate) for v in sums] for d, sums in days.items()}
        _account_totals(account, parsed, days, now)
        return len(rows)


def _account_totals(account, parsed, days: dict[dt.date, list[Decimal]], now) -> None:
    """The file's own totals per UTC day: what the reconciliation compares the records with,
    by part as the records are split (compute, storage, credits, adjustments, the rest).
    Each is the day's exact BilledCost (times the rate) rounded once to labgov's 10 places; the
    records are rounded per bucket, so the two may differ past the 10th place, never by a cent
    until a file holds billions of buckets."""
    AccountBillingRecord.objects.filter(
        account=account, bucket_start__gte=parsed.period_start, bucket_start__lt=parsed.period_end
    ).delete()
    AccountBillingRecord.objects.bulk_create(
        [
            AccountBillingRecord(
                account=account,
                bucket_start=max(
                    dt.datetime.combine(day, dt.time(), tzinfo=UTC), parsed.period_start
                ),
                bucket_end=min(
                    dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=UTC),
                    parsed.period_end,
                ),
                total_usd=total,
                components={
                    "focusComputeCost": str(compute),
                    "focusStorageCost": str(storage),
                    "focusCreditCost": str(credit),
                    "focusAdjustmentCost": str(adjustment),
                    "focusOtherCost": str(total - compute - storage - credit - adjustment),
                },
                synced_at=now,
            )
            for day, (total, compute, storage, credit, adjustment) in sorted(days.items())
        ]
    )


class _PgStage:
    """The PostgreSQL writer: each checked row is COPY'd, as it is read, to a temporary table
    of small keys (the file's resource number, the charge period's start and end in
    microseconds since 1970, the amount, its part, category and class), then summed per
    bucket and upserted with its allocation in a few set-based statements. Python holds only
    the distinct resources and charge periods."""

    def __init__(self):
        import psycopg

        connection.ensure_connection()
        self.cursor = psycopg.Cursor(connection.connection)
        self.cursor.execute("DROP TABLE IF EXISTS focus_stage, focus_resources, focus_records")
        self.cursor.execute(
            "CREATE TEMP TABLE focus_stage (r integer, s bigint, e bigint, billed numeric, "
            'part "char", cat smallint, corr boolean) ON COMMIT DROP'
        )
        self.copy_cm = self.cursor.copy(
            "COPY focus_stage (r, s, e, billed, part, cat, corr) FROM STDIN"
        )
        self.copy = self.copy_cm.__enter__()
        self.buffer: list[str] = []
        self.size = 0

    def add(self, _rid, index, cps, cpe, billed, part, cat, correction):
        flag = "t" if correction else "f"
        line = f"{index}\t{cps[1]}\t{cpe[1]}\t{billed}\t{part}\t{cat}\t{flag}\n"
        self.buffer.append(line)
        self.size += len(line)
        if self.size > FLUSH_BYTES:
            self.copy.write("".join(self.buffer))
            self.buffer, self.size = [], 0

    def flush(self, parsed):
        if self.buffer:
            self.copy.write("".join(self.buffer))
            self.buffer, self.size = [], 0
        self.copy_cm.__exit__(None, None, None)
        cursor = self.cursor
        cursor.execute(
            "CREATE TEMP TABLE focus_resources (r integer PRIMARY KEY, rid text) ON COMMIT DROP"
        )
        with cursor.copy("COPY focus_resources (r, rid) FROM STDIN") as copy:
            for rid, resource in parsed.resources.items():
                copy.write_row((resource.index, rid))

    def abort(self):
        """Leave COPY (PostgreSQL is told it failed) so the transaction can roll back."""
        import psycopg

        # PostgreSQL answers the failed COPY with an error; the rollback follows.
        with contextlib.suppress(psycopg.Error):
            self.copy_cm.__exit__(FocusRefused, FocusRefused("refused"), None)
        self.cursor.close()

    def write(self, account, parsed, rate) -> int:
        from labgov.core import dataversion

        params = {
            "account": account.pk,
            "kind": ResourceKind.CLOUD.value,
            "rate": rate,
            "start": parsed.period_start,
            "end": parsed.period_end,
            "categories": list(CATEGORY_ORDER),
        }
        cursor = self.cursor
        # One bucket per resource and charge period start, summed exactly; microseconds since
        # 1970 back to instants exactly (integers below 2^53: no rounding on the way).
        cursor.execute(
            f"""
            CREATE TEMP TABLE focus_records ON COMMIT DROP AS
            WITH b AS (
                SELECT r, s, max(e) AS e, sum(billed) AS total,
                       coalesce(sum(billed) FILTER (
                           WHERE part = 'c' AND cat NOT IN ({CREDIT}, {ADJUSTMENT})
                       ), 0) AS compute,
                       coalesce(sum(billed) FILTER (
                           WHERE part = 's' AND cat NOT IN ({CREDIT}, {ADJUSTMENT})
                       ), 0) AS storage,
                       coalesce(sum(billed) FILTER (WHERE cat = {CREDIT}), 0) AS credit,
                       coalesce(sum(billed) FILTER (WHERE cat = {ADJUSTMENT}), 0) AS adjustment,
                       min(cat) AS cat, bool_or(corr) AS corr
                FROM focus_stage GROUP BY r, s
            )
            SELECT r.id AS resource_id, b.s, b.total, b.compute, b.storage, b.credit,
                   b.adjustment,
                   timestamptz 'epoch' + b.s * interval '1 microsecond' AS bucket_start,
                   timestamptz 'epoch' + b.e * interval '1 microsecond' AS bucket_end,
                   round(b.total * %(rate)s, 10) AS total_usd,
                   round(b.compute * %(rate)s, 10) AS cpu_usd,
                   round(b.storage * %(rate)s, 10) AS storage_usd,
                   round(b.credit * %(rate)s, 10) AS credit_usd,
                   round(b.adjustment * %(rate)s, 10) AS adjustment_usd,
                   (%(categories)s::text[])[b.cat + 1] AS charge_category,
                   CASE WHEN b.corr THEN 'Correction' ELSE '' END AS charge_class
            FROM b
            JOIN focus_resources fr ON fr.r = b.r
            JOIN runpod_resource r
              ON r.account_id = %(account)s AND r.kind = %(kind)s AND r.runpod_id = fr.rid
            """,  # noqa: S608 - two integer constants
            params,
        )
        count = cursor.rowcount
        cursor.execute("DROP TABLE focus_stage")
        cursor.execute(
            """
            SELECT EXISTS (SELECT 1 FROM runpod_billingrecord b JOIN runpod_resource r
                           ON r.id = b.resource_id
                           WHERE r.account_id = %(account)s
                             AND b.bucket_start >= %(start)s AND b.bucket_start < %(end)s)
            """,
            params,
        )
        (held,) = cursor.fetchone()
        # A month the source has no records of yet (its first file): plain inserts, which
        # cost a third less than the upsert a corrected file needs. In key order: the primary
        # key's index takes them at its right edge (about 40 % less than in the summing's
        # hash order), and a resource's records lie together, so the reads that follow
        # (span_written) visit few pages per resource.
        upsert = """
            ON CONFLICT (resource_id, bucket_start) DO UPDATE SET
                total_usd = EXCLUDED.total_usd, cpu_usd = EXCLUDED.cpu_usd,
                storage_standard_usd = EXCLUDED.storage_standard_usd,
                credit_usd = EXCLUDED.credit_usd, adjustment_usd = EXCLUDED.adjustment_usd,
                charge_category = EXCLUDED.charge_category,
                charge_class = EXCLUDED.charge_class,
                bucket_end = EXCLUDED.bucket_end, allocation_id = EXCLUDED.allocation_id,
                synced_at = EXCLUDED.synced_at
            WHERE (b.total_usd, b.cpu_usd, b.storage_standard_usd, b.credit_usd,
                   b.adjustment_usd, b.charge_category, b.charge_class, b.bucket_end,
                   b.allocation_id)
                  IS DISTINCT FROM (EXCLUDED.total_usd, EXCLUDED.cpu_usd,
                  EXCLUDED.storage_standard_usd, EXCLUDED.credit_usd, EXCLUDED.adjustment_usd,
                  EXCLUDED.charge_category, EXCLUDED.charge_class, EXCLUDED.bucket_end,
                  EXCLUDED.allocation_id)
        """
        if held:
            cursor.execute(
                """
            DELETE FROM runpod_billingrecord b USING runpod_resource r
            WHERE b.resource_id = r.id AND r.account_id = %(account)s
              AND b.bucket_start >= %(start)s AND b.bucket_start < %(end)s
              AND NOT EXISTS (SELECT 1 FROM focus_records f
                              WHERE f.resource_id = b.resource_id
                                AND f.bucket_start = b.bucket_start)
            """,
                params,
            )
        # The timeline of each resource the file bills (not of every one the account ever
        # had), one row per resource, joined on its id to its records.
        insert = f"""
            WITH timeline AS (
                SELECT r.id AS resource_id, t.starts, t.allocations
                FROM (SELECT DISTINCT resource_id AS id FROM focus_records) r
                JOIN LATERAL {timeline_sql("r")} t ON true
            )
            INSERT INTO runpod_billingrecord AS b (
                resource_id, bucket_start, kind, bucket_end, total_usd, gpu_usd, cpu_usd,
                disk_usd, storage_standard_usd, storage_high_performance_usd, fee_usd,
                networking_usd, credit_usd, adjustment_usd, charge_category, charge_class,
                allocation_id, synced_at)
            SELECT f.resource_id, f.bucket_start, %(kind)s, f.bucket_end, f.total_usd, 0,
                   f.cpu_usd, 0, f.storage_usd, 0, 0, 0, f.credit_usd, f.adjustment_usd,
                   f.charge_category, f.charge_class,
                   {allocation_at_sql("t", "f.bucket_start")}, now()
            FROM focus_records f LEFT JOIN timeline t ON t.resource_id = f.resource_id
            ORDER BY f.resource_id, f.bucket_start
            """  # noqa: S608 (SQL of labgov's own: timeline_sql, allocation_at_sql)
        cursor.execute(insert + upsert if held else insert, params)
        cursor.execute(
            """
            SELECT ((timestamptz 'epoch' + s * interval '1 microsecond') AT TIME ZONE 'UTC')::date
                   AS day,
                   round(sum(total) * %(rate)s, 10), round(sum(compute) * %(rate)s, 10),
                   round(sum(storage) * %(rate)s, 10), round(sum(credit) * %(rate)s, 10),
                   round(sum(adjustment) * %(rate)s, 10)
            FROM focus_records GROUP BY 1
            """,
            params,
        )
        days = {day: parts for day, *parts in cursor.fetchall()}
        cursor.execute("DROP TABLE focus_records, focus_resources")
        cursor.close()
        dataversion.wrote()
        _account_totals(account, parsed, days, timezone.now())
        return count
