"""Writing billing records: upserted on (resource, bucket start), so re-syncing a window, or
overlapping windows, replaces records instead of adding them, and each record carries the
allocation its resource's timeline gives its bucket.

Two writers, one contract:
- PostgreSQL: the response body goes to the database as it came, and PostgreSQL reads the
  records (numbers straight into exact `numeric`), stages them, checks them and upserts them
  in a few statements. A million records move without a Python object each.
- Anything else (SQLite for the demo): the client's typed records, upserted in batches.
"""

import datetime as dt
import json
import logging
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from django.db import DataError, IntegrityError, connection, transaction
from django.utils import timezone

from labgov.core import dataversion
from labgov.runpod import partitions
from labgov.runpod.attribution import (
    Timeline,
    allocation_at_sql,
    days_between,
    rules_apply,
    span_unattributed,
    timeline_sql,
    unattributed_delta,
)
from labgov.runpod.client import BILLING_ENDPOINTS
from labgov.runpod.errors import RunpodBadResponse
from labgov.runpod.locks import account_lock_serial
from labgov.runpod.models import AccountBillingRecord, BillingRecord, Resource, ResourceKind
from labgov.runpod.types import AccountBillingRecord as AccountRecord
from labgov.runpod.types import BillingKind
from labgov.runpod.types import BillingRecord as Record
from labgov.usage.services import COLUMNS as SUM_COLUMNS  # what span_sums adds up

log = logging.getLogger(__name__)

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
ENDPOINT_STUB_NAME = "Account-wide endpoints"


class SliceWritten(NamedTuple):
    """What writing one slice did."""

    records: int
    days: set[dt.date]  # the UTC days it touched
    # {resource id: how much its unattributed spend moved}, resources that moved only (the
    # statement's HAVING, or unattributed_delta).
    unattributed_moved: dict[int, Decimal]
    # {(UTC day, kind, allocation id or None): the sums of usage.services.COLUMNS} over the
    # records of the slice's days, when the slice wrote every one of them (its days held no
    # record of the account before): what span_sums would read back. None otherwise.
    day_sums: dict[tuple, list[Decimal]] | None = None


@dataclass
class SlicePayload:
    """What one slice of the window brought back, before anything is written."""

    start: dt.datetime
    end: dt.datetime
    bodies: dict[BillingKind, bytes] = field(default_factory=dict)  # PostgreSQL writer
    records: dict[BillingKind, list[Record]] = field(default_factory=dict)  # generic writer
    account_records: list[AccountRecord] = field(default_factory=list)


def uses_bulk_sql() -> bool:
    return connection.vendor == "postgresql"


def fetch_slice(client, kinds, start: dt.datetime, end: dt.datetime, *, raw: bool) -> SlicePayload:
    payload = SlicePayload(start=start, end=end)
    for kind in kinds:
        if raw:
            payload.bodies[kind] = client.billing_records_body(kind, start=start, end=end)
        else:
            payload.records[kind] = client.billing_records(kind, start=start, end=end)
    payload.account_records = client.account_billing(start=start, end=end)
    return payload


def write_slice(*, account, payload: SlicePayload) -> SliceWritten:
    """Write one slice in the caller's transaction: its records, the UTC days it touched and
    how far it moved each resource's unattributed spend (what its records owed nobody after
    the write less before), for `providers.span_written`; and, when the slice is whole UTC
    days of every kind that held no record before (a first sync's slices), the sums of what
    it wrote per day, kind and allocation, which are then the days' (`day_sums`)."""
    days = days_between(payload.start, payload.end)
    day_sums = None
    if payload.bodies:
        count, moved = 0, {}
        whole_days = all(
            moment == dt.datetime.combine(moment.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
            for moment in (payload.start, payload.end)
        )
        if whole_days and set(payload.bodies) == set(BillingKind):
            day_sums = {}
        for kind, body in payload.bodies.items():
            written, kind_moved, kind_sums = _pg_upsert(
                account,
                kind,
                body,
                window=(payload.start, payload.end),
                sums=day_sums is not None,
            )
            count += written
            moved.update(kind_moved)  # a resource is of one kind: no id in two bodies
            if day_sums is not None and kind_sums is None:
                day_sums = None  # its window held records, or a write fell back to upserts
            elif day_sums is not None:
                day_sums.update(kind_sums)  # keyed by kind: no key in two bodies
    else:
        before = span_unattributed(account=account, days=days)
        count = _generic_upsert(account, payload.records)
        moved = unattributed_delta(before, span_unattributed(account=account, days=days))
    account_records_upsert(account=account, records=payload.account_records)
    return SliceWritten(count, days, moved, day_sums)


# --- resources billed but never listed -------------------------------------------------------


def _ensure_resources(account, wanted: set[tuple[str, str]], last_bucket: dict) -> dict:
    """Map (kind, runpod id) to Resource pk, creating rows for resources billed but never seen
    in a list (terminated before the first sync): their spend must not be dropped."""
    if not wanted:
        return {}
    # Only the wanted ids: an account keeps every resource it ever had.
    known = {
        (kind, rid): pk
        for pk, kind, rid in Resource.objects.filter(
            account=account,
            kind__in={k for k, _ in wanted},
            runpod_id__in={rid for _, rid in wanted},
        ).values_list("pk", "kind", "runpod_id")
        if (kind, rid) in wanted
    }
    missing = wanted - set(known)
    if not missing:
        return known
    # Slices written side by side may meet the same unseen resource: one at a time, and from
    # here on this slice writes what others share (the lock order, labgov/runpod/sync.py).
    account_lock_serial(account.pk)
    from labgov.runpod.inventory import refuse_ids_owned_elsewhere

    refuse_ids_owned_elsewhere(account, missing)
    Resource.objects.bulk_create(
        [
            Resource(
                account=account,
                kind=kind,
                runpod_id=rid,
                name=ENDPOINT_STUB_NAME if kind == ResourceKind.ENDPOINT else "",
                # The endpoint aggregate never vanishes; anything else was gone before we saw it.
                gone_at=None if kind == ResourceKind.ENDPOINT else last_bucket.get((kind, rid)),
                # No status: Runpod never listed it, so there is none to tell (see
                # Resource.billing_only).
                status="",
            )
            for kind, rid in missing
        ],
        ignore_conflicts=True,
    )
    created = {
        (kind, rid): pk
        for pk, kind, rid in Resource.objects.filter(
            account=account,
            kind__in={k for k, _ in missing},
            runpod_id__in={rid for _, rid in missing},
        ).values_list("pk", "kind", "runpod_id")
    }
    # An account-wide rule covers these too, from their first record on (the account's other
    # resources have been through the rules already: the inventory's step, or an earlier
    # slice's).
    rules_apply(account=account, resource_ids=created.values())
    known.update(created)
    return known


# --- the generic writer ------------------------------------------------------------------------


def _generic_upsert(account, fetched: dict[BillingKind, list[Record]]) -> int:
    wanted, last_bucket = set(), {}
    for kind, records in fetched.items():
        for r in records:
            key = (KIND_OF[kind], r.resource_id)
            wanted.add(key)
            last_bucket[key] = max(last_bucket.get(key, r.end), r.end)
    ids = _ensure_resources(account, wanted, last_bucket)
    timeline = Timeline.for_resources(set(ids.values()))
    now = timezone.now()
    rows = []
    for kind, records in fetched.items():
        resource_kind = KIND_OF[kind]
        for r in records:
            resource_id = ids[(resource_kind, r.resource_id)]
            amounts = dict.fromkeys(COMPONENT_COLUMNS.values(), ZERO)
            for name, value in r.components.items():
                if (column := COMPONENT_COLUMNS.get(name)) is not None:
                    amounts[column] = value
            rows.append(
                BillingRecord(
                    resource_id=resource_id,
                    kind=resource_kind,
                    bucket_start=r.start,
                    bucket_end=r.end,
                    total_usd=r.total_usd,
                    allocation_id=timeline.allocation_at(resource_id, r.start),
                    synced_at=now,
                    **amounts,
                )
            )
    BillingRecord.objects.bulk_create(
        rows,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["resource", "bucket_start"],
        update_fields=[*AMOUNT_COLUMNS, "kind", "bucket_end", "allocation", "synced_at"],
    )
    return len(rows)


# --- the PostgreSQL writer --------------------------------------------------------------------

# The amounts each kind's records carry; the rest are stored as 0.
KIND_AMOUNTS = {
    BillingKind.POD: ["gpuAmount", "cpuAmount", "diskAmount"],
    BillingKind.NETWORK_VOLUME: ["standardAmount", "highPerformanceAmount"],
    BillingKind.SERVERLESS: ["gpuAmount", "cpuAmount", "diskAmount", "feeAmount"],
    BillingKind.CLUSTER: ["gpuAmount", "diskAmount", "networkingAmount"],
    BillingKind.ENDPOINT: [],
}


def _records_of(params: dict) -> str:
    """The SQL of the records array: the parameter itself when it holds only the records
    (`_layout`), else the whole body's "records" key, which PostgreSQL finds by reading the
    document through once more (a tenth of the statement's PostgreSQL CPU in
    bench/sync_bench.py: 23.6 s against 21.3 s for its 1.39M records)."""
    return "%(body)s::json" if params.get("records_only") else "(%(body)s::json) -> 'records'"


def _pg_statement(
    kind: BillingKind, *, upsert: bool = True, records: str = "", sums: bool = False
) -> str:
    """One statement that reads a response body's records, upserts those of known resources
    with the allocation their timeline gives each bucket, and reports what it saw and did:
    the record count, records breaking the contract, ids of resources not known yet, and how
    far it moved each resource's unattributed spend (the records it wrote that nobody owns,
    less what the records they replaced owed nobody: the statement reads the table as it was
    before it ran).

    `upsert=False` inserts them plainly, for a window that holds none of them yet (the
    first sync of a day): ON CONFLICT's speculative insertion costs about a third of the
    write. A record that exists after all fails it with a unique violation. `records`: the
    SQL of the records array (`_records_of`). `sums`: it also reports the sums of the rows
    it wrote per UTC day and allocation (`_DAY_SUMS`), which span_sums would otherwise read
    back from the table.

    Where PostgreSQL's time goes, for a slice of 44,256 pod records (8.6 MB, plain inserts,
    ~520 ms): reading the records ~175 ms, of which ~53 ms is the json cast's own validating
    pass over the text (json_in and json_recv both validate; jsonb_to_recordset is slower,
    ~260 ms, and jsonb_array_elements with ->> no better); inserting them ~210 ms, what COPY
    spends on the same rows; the joins and the three counts over `src` ~70 ms."""
    _, id_field = BILLING_ENDPOINTS[kind]
    amounts = ["totalAmount", *KIND_AMOUNTS[kind]]
    declared = ", ".join(
        ([f'"{id_field}" text'] if id_field else [])
        + ['"startTime" timestamptz', '"endTime" timestamptz']
        + [f'"{name}" numeric' for name in amounts]
    )
    rid = f'r."{id_field}"' if id_field else "''"
    values = ", ".join(
        f'coalesce(s."{name}", 0)' if name in amounts else "0" for name in COMPONENT_COLUMNS
    )
    changed = " OR ".join(
        f"b.{col} IS DISTINCT FROM EXCLUDED.{col}"
        for col in [*AMOUNT_COLUMNS, "bucket_end", "allocation_id"]
    )
    on_conflict = f"""
            ON CONFLICT (resource_id, bucket_start) DO UPDATE SET
                {", ".join(f"{c} = EXCLUDED.{c}" for c in AMOUNT_COLUMNS)},
                bucket_end = EXCLUDED.bucket_end, allocation_id = EXCLUDED.allocation_id,
                synced_at = EXCLUDED.synced_at
            WHERE {changed}"""
    leftover = ", ".join(
        ([f"'{id_field}', s.rid"] if id_field else [])
        + ["'startTime', s.bucket_start", "'endTime', s.bucket_end"]
        + [f"'{name}', s.\"{name}\"" for name in amounts]
    )
    return f"""
        WITH src AS MATERIALIZED (
            SELECT {rid} AS rid, r."startTime" AS bucket_start, r."endTime" AS bucket_end,
                   {", ".join(f'r."{n}"' for n in amounts)}
            FROM json_to_recordset({records or "(%(body)s::json) -> 'records'"}) AS r({declared})
        ),
        -- The resources the body bills, with each one's last bucket (for those not known yet),
        -- each found by an index probe of its id with its timeline (a record's allocation is
        -- read from its own resource's row): an account keeps every resource it ever had, and
        -- reading all of them for a body billing a few hundred cost 0.56 s a statement at
        -- 50,000 (LIMIT 1 keeps the probe a probe: a unique key, and no join the planner may
        -- turn into a rescan per row).
        billed AS (
            SELECT rid, max(bucket_end) AS last FROM src WHERE rid IS NOT NULL GROUP BY rid
        ),
        res AS (
            SELECT r.id, r.runpod_id, t.starts, t.allocations
            FROM billed
            JOIN LATERAL (
                SELECT id, runpod_id FROM runpod_resource
                WHERE account_id = %(account)s AND kind = %(kind)s AND runpod_id = billed.rid
                LIMIT 1
            ) r ON true
            LEFT JOIN LATERAL {timeline_sql("r")} t ON true
        ),
        unknown AS (
            SELECT b.rid, b.last FROM billed b
            WHERE NOT EXISTS (SELECT FROM res WHERE res.runpod_id = b.rid)
        ),
        written AS (
            INSERT INTO runpod_billingrecord AS b (
                resource_id, bucket_start, kind, bucket_end, {", ".join(AMOUNT_COLUMNS)},
                allocation_id, synced_at)
            SELECT res.id, s.bucket_start, %(kind)s, s.bucket_end, s."totalAmount", {values},
                   {allocation_at_sql("res", "s.bucket_start")}, now()
            FROM src s
            JOIN res ON res.runpod_id = s.rid
            {on_conflict if upsert else ""}
            RETURNING b.resource_id, b.bucket_start, b.allocation_id, {
        ", ".join(f"b.{column}" for column in SUM_COLUMNS)
    }
        ),
        tally AS (
            SELECT count(*) AS records,
                   count(*) FILTER (WHERE rid IS NULL OR bucket_end <= bucket_start) AS broken
            FROM src
        )
        SELECT
            tally.records,
            tally.broken,
            (SELECT coalesce(json_agg(json_build_array(rid, last)), '[]') FROM unknown),
            (SELECT coalesce(json_agg(json_build_array(resource_id, amount::text)), '[]')
               FROM (SELECT resource_id, sum(amount) AS amount
                     FROM (SELECT w.resource_id, w.total_usd AS amount FROM written w
                           WHERE w.allocation_id IS NULL
                           {_REPLACED_UNOWNED if upsert else ""}) each
                     GROUP BY resource_id HAVING sum(amount) <> 0) moved),
            -- The records of resources not known yet, which this statement could not write,
            -- as records of the body are, as text (psycopg would read JSON numbers as floats):
            -- once the resources exist, a second statement writes them from these, not from
            -- the body. Read only when there are such records.
            (SELECT json_agg(json_build_object({leftover}))::text
               FROM src s
               WHERE EXISTS (SELECT FROM unknown) AND s.rid IN (SELECT rid FROM unknown)),
            {_DAY_SUMS if sums else "NULL"}
        FROM tally
    """


# What the statement wrote, summed per UTC day and allocation as span_sums groups the table's
# records (the statement writes one kind): [[day, allocation id, sum, ...], ...], the sums as
# text (psycopg would read JSON numbers as floats).
_DAY_SUMS = f"""
            (SELECT coalesce(json_agg(json_build_array(day, allocation_id, {
    ", ".join(f"s{i}::text" for i in range(len(SUM_COLUMNS)))
})), '[]')
               FROM (SELECT date_trunc('day', w.bucket_start AT TIME ZONE 'UTC')::date AS day,
                            w.allocation_id, {
    ", ".join(f"sum(w.{column}) AS s{i}" for i, column in enumerate(SUM_COLUMNS))
}
                     FROM written w GROUP BY 1, 2) grouped)"""

# The rows an upsert replaced, as they were: a plain insert replaces none.
_REPLACED_UNOWNED = """
                           UNION ALL
                           SELECT o.resource_id, -o.total_usd
                           FROM written w JOIN runpod_billingrecord o
                             ON o.resource_id = w.resource_id AND o.bucket_start = w.bucket_start
                           WHERE o.allocation_id IS NULL"""


def _window_holds_records(cursor, account, resource_kind: str, window) -> bool:
    """Whether the account holds records of this kind in [start, end): a probe of each
    resource's index range."""
    cursor.execute(
        """
        SELECT EXISTS (
            SELECT 1 FROM runpod_billingrecord b
            JOIN runpod_resource r ON r.id = b.resource_id
            WHERE r.account_id = %s AND r.kind = %s
              AND b.bucket_start >= %s AND b.bucket_start < %s
        )
        """,
        [account.pk, resource_kind, *window],
    )
    return cursor.fetchone()[0]


def _pg_upsert(
    account, kind: BillingKind, body: bytes, *, window=None, sums: bool = False
) -> tuple[int, dict[int, Decimal], dict | None]:
    """Write one response body's records; returns their count, how far they moved each
    resource's unattributed spend and, with `sums`, the sums of what it wrote per UTC day,
    kind and allocation when it wrote them all by plain inserts into a window that held none
    of the kind's records (else None)."""
    import psycopg

    resource_kind = KIND_OF[kind]
    stated, records = _layout(body, kind)
    params = {
        "body": (body if records is None else records).decode(),
        "records_only": records is not None,
        "account": account.pk,
        "kind": resource_kind,
    }
    connection.ensure_connection()
    # A cursor binding parameters on the server: Django's binds them into the SQL text, and a
    # body of megabytes would then be lexed, and its JSON cast folded, while planning.
    with psycopg.Cursor(connection.connection) as cursor:
        # Commits of a sync need not wait for the disk: a sync lost in a crash is redone by
        # the next one, which rewrites the same rows.
        cursor.execute("SET LOCAL synchronous_commit TO OFF")
        # No other writer adds this account's records of the window (slices never share a
        # day, and one sync of an account runs at a time), so one that holds none yet is
        # written with plain inserts; a record from outside the window that exists after all
        # sends the body through the upsert.
        fresh = window is not None and not _window_holds_records(
            cursor, account, resource_kind, window
        )
        sums = sums and fresh
        try:
            count, unseen, moved, leftovers, day_sums = _pg_write(
                cursor, kind, params, upsert=not fresh, expected=stated, sums=sums
            )
        except _NotTheRecords:
            # What lay between the two keys was no single JSON value: a key between them,
            # which the layout does not rule out. The whole body, read by its "records" key.
            params.update(body=body.decode(), records_only=False)
            count, unseen, moved, leftovers, day_sums = _pg_write(
                cursor, kind, params, upsert=not fresh, expected=stated, sums=sums
            )
        dataversion.wrote()  # this cursor is psycopg's own: Django's wrapper does not see it
        if unseen:
            # Billed but never listed (terminated before the first sync): create them, then
            # write their records, which the first pass had to leave out and handed back (the
            # body is not read again: a second pass over it cost as much as the first).
            _ensure_resources(
                account,
                {(resource_kind, rid) for rid, _ in unseen},
                {(resource_kind, rid): dt.datetime.fromisoformat(last) for rid, last in unseen},
            )
            _, still_unseen, theirs, _, their_sums = _pg_write(
                cursor,
                kind,
                {**params, "body": leftovers, "records_only": True, "leftovers": True},
                upsert=day_sums is None,
                sums=day_sums is not None,
            )
            if still_unseen:
                raise RuntimeError(f"billed resources not made: {still_unseen}")
            moved.update(theirs)  # only resources made just now, none of the first pass's
            day_sums = _sums_added(day_sums, their_sums)
    if day_sums is not None:
        day_sums = {(day, resource_kind, a): amounts for (day, a), amounts in day_sums.items()}
    return count, moved, day_sums


def _sums_added(ours: dict | None, theirs: dict | None) -> dict | None:
    """Two statements' day sums added, or None when either has none."""
    if ours is None or theirs is None:
        return None
    added = dict(ours)
    for key, amounts in theirs.items():
        if key in added:
            added[key] = [a + b for a, b in zip(added[key], amounts, strict=True)]
        else:
            added[key] = amounts
    return added


_METADATA = b'"metadata"'


def _layout(body: bytes, kind: BillingKind) -> tuple[int | None, bytes | None]:
    """The record count the body states in its metadata (None when it states none), and the
    bytes of its records array when the body is laid out as Runpod's answers (and the
    simulator's) are, `{"records": […], "metadata": {…}}` (else None: PostgreSQL reads the
    records out of the whole body).

    The count is checked as the parser checks it (parsing._billing_items): one that disagrees
    with the records means a cut or mangled answer, and money must not be summed from it on
    this path either. Neither is read by parsing the records in Python (the database reads
    them): the metadata is decoded where it stands, the document's last key or its first; a
    body laid out otherwise is parsed whole for its count. A `"metadata"` inside a string
    cannot match: its quotes would be escaped there.

    The records' bytes are what lies between the document's first key, `"records":`, and
    the comma before its last, `"metadata"`, whose value closes the document. PostgreSQL's
    cast of them to json then checks them as one JSON value: with the pieces around them
    checked here, the body was one JSON document with just those two keys, and they are the
    records array. Another key between the two makes them no single value: the cast refuses
    them, and the body is read whole instead (`_NotTheRecords`)."""
    # The document's last key: `"metadata"` after a comma, its value closing the document.
    last = body.rfind(_METADATA)
    before = last - 1
    while before > 0 and body[before] in b" \t\r\n":
        before -= 1
    if last != -1 and body[before : before + 1] == b",":
        found = _value_after(body[last:])
        if found is not None and found[1].strip() == "}":
            return _record_count(found[0], kind), _records_before(body, before)
    # Or its first key: right after the document's opening brace, a comma after its value
    # (read from the body's first 64 KiB: a metadata object is a few hundred bytes).
    first = body.find(_METADATA, 0, 1024)
    if first != -1 and body[:first].strip() == b"{":
        found = _value_after(body[first : first + 65536])
        if found is not None and found[1].lstrip().startswith(","):
            return _record_count(found[0], kind), None
    try:
        document = json.loads(body)
    except ValueError:
        return None, None  # not JSON: the database's cast refuses it, naming the body
    metadata = document.get("metadata") if isinstance(document, dict) else None
    return _record_count(metadata, kind), None


_RECORDS_FIRST = re.compile(rb'\s*\{\s*"records"\s*:\s*')


def _records_before(body: bytes, comma: int) -> bytes | None:
    """The records array's bytes, when "records" is the document's first key and its value
    runs up to `comma` (the one before the last key): an array by its brackets; what it holds
    is PostgreSQL's to check."""
    start = _RECORDS_FIRST.match(body)
    if start is None:
        return None
    end = comma
    while end > start.end() and body[end - 1] in b" \t\r\n":
        end -= 1
    if body[start.end() : start.end() + 1] != b"[" or body[end - 1 : end] != b"]":
        return None
    return body[start.end() : end]


def _value_after(key: bytes) -> tuple[object, str] | None:
    """The JSON value after `key` (bytes starting with `"metadata"`) and the text after that
    value, or None when no whole value follows a colon there."""
    tail = key[len(_METADATA) :].decode(errors="replace").lstrip()
    if not tail.startswith(":"):
        return None
    tail = tail[1:].lstrip()
    try:
        value, end = json.JSONDecoder().raw_decode(tail)
    except ValueError:
        return None
    return value, tail[end:]


def _record_count(metadata, kind: BillingKind) -> int | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise RunpodBadResponse(f"Runpod's {kind.value} billing records' metadata is no object.")
    count = metadata.get("recordCount")
    if count is None:
        return None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise RunpodBadResponse(
            f"Runpod's {kind.value} billing records state a record count that is not one "
            f"({str(count)[:40]!r})."
        )
    return count


def _pg_write(
    cursor,
    kind: BillingKind,
    params: dict,
    *,
    upsert: bool,
    expected: int | None = None,
    sums: bool = False,
):
    """The body written by plain inserts or upserted; upserted after all when a plain insert
    meets a record that is there, and written again once its months exist when a record is
    dated outside the months the sync prepared (partitions). `expected`: the record count the
    body states, which the records it carries must match, or nothing of it is written.
    `sums`: the day sums of what plain inserts wrote (none once it falls back to upserts)."""
    month_made = False
    while True:
        try:
            return _pg_run(
                cursor,
                _pg_statement(
                    kind, upsert=upsert, records=_records_of(params), sums=sums and not upsert
                ),
                params,
                kind,
                plain=not upsert,
                expected=expected,
            )
        except _Exists:
            upsert = True
        except _MonthMissing:
            if month_made:
                raise
            # Its month is made here, in the slice's transaction (rare: it locks billing until
            # the slice commits), and the body written again, upserted (that month may hold
            # some of its records).
            _months_of_body_ensure(cursor, params)
            month_made, upsert = True, True


def _pg_run(
    cursor,
    statement: str,
    params: dict,
    kind: BillingKind,
    *,
    plain: bool = False,
    expected: int | None = None,
):
    import psycopg

    try:
        # A savepoint: records breaking the contract leave nothing of this body behind.
        with transaction.atomic():
            cursor.execute(statement, params)
            count, broken, unseen, moved, leftovers, day_sums = cursor.fetchone()
            if expected is not None and count != expected:
                raise RunpodBadResponse(
                    f"Runpod's {kind.value} billing records say there are {expected} records "
                    f"but carry {count}: a cut or mangled answer, of which nothing is written."
                )
            if broken:
                raise RunpodBadResponse(
                    f"Runpod sent {broken} {kind.value} billing records without a resource id "
                    "or ending before they start."
                )
    except psycopg.errors.CheckViolation as exc:
        if partitions.is_missing_partition(exc):
            raise _MonthMissing from exc
        raise RunpodBadResponse(
            f"Runpod sent {kind.value} billing records that labgov cannot read or that break "
            f"the API contract ({str(exc).splitlines()[0][:160]})."
        ) from exc
    except psycopg.errors.UniqueViolation as exc:
        if plain:
            raise _Exists from exc
        raise RunpodBadResponse(
            f"Runpod sent {kind.value} billing records that labgov cannot read or that break "
            f"the API contract ({str(exc).splitlines()[0][:160]})."
        ) from exc
    except (DataError, IntegrityError, psycopg.DataError, psycopg.IntegrityError) as exc:
        # The first pass over the records' bytes only: the second reads what the first one
        # read and handed back.
        first_pass = not params.get("leftovers")
        if (
            params.get("records_only")
            and first_pass
            and isinstance(exc, DataError | psycopg.DataError)
        ):
            raise _NotTheRecords from exc
        raise RunpodBadResponse(
            f"Runpod sent {kind.value} billing records that labgov cannot read or that break "
            f"the API contract ({str(exc).splitlines()[0][:160]})."
        ) from exc
    if isinstance(unseen, str):
        unseen = json.loads(unseen)
    if isinstance(moved, str):
        moved = json.loads(moved)
    moved = {resource_id: Decimal(amount) for resource_id, amount in moved}
    if day_sums is not None:
        if isinstance(day_sums, str):
            day_sums = json.loads(day_sums)
        day_sums = {
            (dt.date.fromisoformat(day), allocation_id): [Decimal(a) for a in amounts]
            for day, allocation_id, *amounts in day_sums
        }
    return count, unseen, moved, leftovers, day_sums


class _MonthMissing(Exception):
    """A record's month has no partition yet."""


class _NotTheRecords(Exception):
    """The bytes taken for the records array (`_layout`) were not one JSON value, or held a
    value the statement could not read: the body is read whole instead (and refused then if
    a record is at fault)."""


class _Exists(Exception):
    """A plain insert met a record that is there already."""


def _months_of_body_ensure(cursor, params: dict) -> None:
    cursor.execute(
        """
        SELECT DISTINCT date_trunc('month', r."startTime" AT TIME ZONE 'UTC')::date
        FROM json_to_recordset(RECORDS) AS r("startTime" timestamptz)
        WHERE r."startTime" IS NOT NULL
        """.replace("RECORDS", _records_of(params)),
        params,
    )
    months = {row[0] for row in cursor.fetchall()}
    log.warning("billing records outside the prepared months: creating %s", sorted(months))
    partitions.ensure(months, trust_cache=False)


def account_records_upsert(*, account, records: list[AccountRecord]) -> None:
    now = timezone.now()
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
        batch_size=1000,
        update_conflicts=True,
        unique_fields=["account", "bucket_start"],
        update_fields=["bucket_end", "total_usd", "components", "synced_at"],
    )
