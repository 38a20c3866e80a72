"""The billing writer refuses records that break the contract, in words, writing nothing."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models.functions import TruncDay

from labgov.core.money import grouped_multi_sums
from labgov.runpod import partitions
from labgov.runpod.billing_store import SlicePayload, _layout, uses_bulk_sql, write_slice
from labgov.runpod.errors import RunpodBadResponse
from labgov.runpod.models import Assignment, BillingRecord, Resource
from labgov.runpod.types import BillingKind
from labgov.usage.services import COLUMNS, span_sums
from tests.factories import ResourceFactory, RunpodAccountFactory

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def _body(*records) -> bytes:
    return json.dumps(
        {"records": list(records), "metadata": {"recordCount": len(records)}}
    ).encode()


def _record(**overrides):
    record = {
        "podId": "pod-a",
        "startTime": "2026-11-01T00:00:00Z",
        "endTime": "2026-11-01T01:00:00Z",
        "totalAmount": 0.5,
        "gpuAmount": 0.5,
        "cpuAmount": 0,
        "diskAmount": 0,
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not None}


@pytest.fixture
def account(world):
    if not uses_bulk_sql():
        pytest.skip("the body-reading writer is PostgreSQL's; others get typed records")
    account = RunpodAccountFactory(institution=world.institution)
    ResourceFactory(account=account, runpod_id="pod-a")
    return account


def _write(account, body):
    payload = SlicePayload(start=T0, end=T0 + dt.timedelta(hours=1), bodies={BillingKind.POD: body})
    return write_slice(account=account, payload=payload)


def test_records_of_known_and_unknown_pods_are_written(account):
    written = _write(account, _body(_record(), _record(podId="pod-gone", totalAmount="0.25")))
    assert written.records == 2 and written.days == {T0.date()}
    gone = Resource.objects.get(runpod_id="pod-gone")
    assert gone.billing_only and gone.status == ""
    assert gone.gone_at == T0 + dt.timedelta(hours=1)
    assert BillingRecord.objects.count() == 2


def test_records_of_pods_never_listed_are_written_to_the_last_digit(account):
    """The first statement writes the known pod's records and hands back the others'; once
    their pods exist a second statement writes those, every amount as Runpod sent it."""
    later = {"startTime": "2026-11-01T01:00:00Z", "endTime": "2026-11-01T02:00:00Z"}
    written = _write(
        account,
        _body(
            _record(totalAmount="0.5"),
            _record(
                podId="pod-b", totalAmount=0.1234567891, gpuAmount=0.1, diskAmount=0.0234567891
            ),
            _record(podId="pod-b", **later, totalAmount="9999999999.9999999999", gpuAmount=None),
            _record(podId="pod-c", totalAmount=1e-10, gpuAmount=0, cpuAmount=1e-10),
        ),
    )
    b, c = (Resource.objects.get(runpod_id=rid) for rid in ("pod-b", "pod-c"))
    rows = {
        (r.resource_id, r.bucket_start): (
            r.bucket_end,
            r.total_usd,
            r.gpu_usd,
            r.cpu_usd,
            r.disk_usd,
        )
        for r in BillingRecord.objects.exclude(resource__runpod_id="pod-a")
    }
    hour = dt.timedelta(hours=1)
    assert rows == {
        (b.pk, T0): (
            T0 + hour,
            Decimal("0.1234567891"),
            Decimal("0.1"),
            0,
            Decimal("0.0234567891"),
        ),
        (b.pk, T0 + hour): (T0 + 2 * hour, Decimal("9999999999.9999999999"), 0, 0, 0),
        (c.pk, T0): (T0 + hour, Decimal("1E-10"), 0, Decimal("1E-10"), 0),
    }
    assert written.records == 4
    assert written.unattributed_moved == {
        Resource.objects.get(runpod_id="pod-a").pk: Decimal("0.5"),
        b.pk: Decimal("10000000000.1234567890"),
        c.pk: Decimal("1E-10"),
    }


def test_the_endpoint_aggregate_is_made_on_its_first_bill_and_its_records_written(account):
    """Endpoint billing names no endpoint: its records are the account's one aggregate
    resource's, made by the bill that first carries them, written by the second statement."""
    body = _body(
        {
            "startTime": "2026-11-01T00:00:00Z",
            "endTime": "2026-11-01T01:00:00Z",
            "totalAmount": 0.7,
        },
        {
            "startTime": "2026-11-01T01:00:00Z",
            "endTime": "2026-11-01T02:00:00Z",
            "totalAmount": "0.3",
        },
    )
    payload = SlicePayload(
        start=T0, end=T0 + dt.timedelta(hours=2), bodies={BillingKind.ENDPOINT: body}
    )
    written = write_slice(account=account, payload=payload)
    aggregate = Resource.objects.get(account=account, kind="endpoint")
    assert written.records == 2
    assert written.unattributed_moved == {aggregate.pk: Decimal("1.0")}
    assert sorted(
        BillingRecord.objects.filter(resource=aggregate).values_list("total_usd", flat=True)
    ) == [Decimal("0.3"), Decimal("0.7")]


def test_a_pod_never_listed_billed_in_a_month_not_prepared_gets_its_month(account):
    """Only its records fall in a month the sync did not prepare: the first statement
    writes none of them, so the second one meets the missing month, makes it and writes."""
    partitions.ensure(
        [T0.date()], trust_cache=False
    )  # the known pod's month, as the sync prepares it
    may = {"startTime": "2031-05-01T00:00:00Z", "endTime": "2031-05-01T01:00:00Z"}
    written = _write(account, _body(_record(), _record(podId="pod-b", **may, totalAmount="0.3")))
    assert written.records == 2
    assert BillingRecord.objects.get(resource__runpod_id="pod-b").total_usd == Decimal("0.3")


def test_a_record_of_a_pod_never_listed_that_cannot_be_stored_is_refused_in_words(account):
    """Its record is written by the second statement: it fails there, in words, and the
    slice's transaction leaves nothing behind."""
    with pytest.raises(RunpodBadResponse, match="pod billing records"), transaction.atomic():
        _write(account, _body(_record(), _record(podId="pod-b", totalAmount=12345678901.5)))
    assert not BillingRecord.objects.exists()
    assert not Resource.objects.filter(runpod_id="pod-b").exists()


def _whole_days(account, bodies, days=2):
    """A slice of whole UTC days from T0 with these bodies, every other kind's empty."""
    bodies = {kind: bodies.get(kind, _body()) for kind in BillingKind}
    partitions.ensure([T0.date()], trust_cache=False)  # the slice's month, as the sync prepares it
    payload = SlicePayload(start=T0, end=T0 + dt.timedelta(days=days), bodies=bodies)
    return write_slice(account=account, payload=payload)


def _scanned(account, days):
    records = BillingRecord.objects.filter(resource__account=account).annotate(
        day=TruncDay("bucket_start", tzinfo=dt.UTC)
    )
    return {
        (moment.date(), kind, allocation_id): sums
        for (moment, kind, allocation_id), sums in grouped_multi_sums(
            records, ["day", "kind", "allocation_id"], COLUMNS
        ).items()
        if moment.date() in days
    }


def test_a_slice_writing_every_record_of_its_days_reports_what_a_scan_reads_back(account, world):
    """The sums the statements report per day, kind and allocation (the second one's too,
    for a pod never listed) are what span_sums would read back from the table."""
    pod = Resource.objects.get(runpod_id="pod-a")
    Assignment.objects.create(
        resource=pod,
        allocation=world.allocation,
        starts_at=T0 + dt.timedelta(hours=1),
        source=Assignment.Source.MANUAL,
    )
    ResourceFactory(account=account, kind="network_volume", runpod_id="vol-a")
    day2 = {"startTime": "2026-11-02T05:00:00Z", "endTime": "2026-11-02T06:00:00Z"}
    written = _whole_days(
        account,
        {
            BillingKind.POD: _body(
                _record(totalAmount="0.1234567891", gpuAmount="0.1", cpuAmount="0.0234567891"),
                _record(startTime="2026-11-01T01:00:00Z", endTime="2026-11-01T02:00:00Z"),
                _record(**day2, totalAmount="2", gpuAmount="2"),
                _record(podId="pod-new", totalAmount="0.3", diskAmount="0.3"),
            ),
            BillingKind.NETWORK_VOLUME: _body(
                {
                    "networkVolumeId": "vol-a",
                    **day2,
                    "totalAmount": 0.05,
                    "standardAmount": 0.04,
                    "highPerformanceAmount": 0.01,
                }
            ),
        },
    )
    assert written.day_sums is not None
    assert written.day_sums == _scanned(account, written.days)
    assert len(written.day_sums) == 4  # day 1 unpaid and paid, day 2 paid pod and volume
    assert span_sums(account=account, days=written.days, unowned=False) == span_sums(
        account=account, days=written.days, unowned=False, written=written.day_sums
    )


def test_no_sums_are_reported_unless_the_slice_wrote_every_record_of_its_days(account):
    assert _whole_days(account, {BillingKind.POD: _body(_record())}).day_sums is not None
    # Written again: its days held records, which the scan reads.
    assert _whole_days(account, {BillingKind.POD: _body(_record())}).day_sums is None
    # Not whole days: the rest of a day may hold records.
    later = {"startTime": "2026-11-05T01:00:00Z", "endTime": "2026-11-05T02:00:00Z"}
    payload = SlicePayload(
        start=T0 + dt.timedelta(days=4, hours=1),
        end=T0 + dt.timedelta(days=4, hours=2),
        bodies={
            kind: _body(_record(**later)) if kind == "pod" else _body() for kind in BillingKind
        },
    )
    assert write_slice(account=account, payload=payload).day_sums is None
    # A kind missing from the slice may hold records of its days.
    payload = SlicePayload(
        start=T0 + dt.timedelta(days=6),
        end=T0 + dt.timedelta(days=7),
        bodies={
            BillingKind.POD: _body(
                _record(startTime="2026-11-07T00:00:00Z", endTime="2026-11-07T01:00:00Z")
            )
        },
    )
    assert write_slice(account=account, payload=payload).day_sums is None


@pytest.mark.parametrize(
    "broken",
    [
        _record(totalAmount=None),
        _record(podId=None),
        _record(startTime="yesterday"),
        _record(endTime="2026-10-31T00:00:00Z"),
        _record(totalAmount="lots"),
    ],
)
def test_contract_breaking_records_fail_in_words(account, broken):
    with pytest.raises(RunpodBadResponse, match="pod billing records"):
        _write(
            account,
            _body(
                _record(startTime="2026-11-01T01:00:00Z", endTime="2026-11-01T02:00:00Z"), broken
            ),
        )
    assert not BillingRecord.objects.exists()


def _amounts():
    return {
        r.bucket_start: r.total_usd
        for r in BillingRecord.objects.order_by("bucket_start").only("bucket_start", "total_usd")
    }


def test_a_window_written_again_is_upserted_not_doubled(account):
    """The first write of a window inserts plainly; the next one finds its records and
    upserts them."""
    _write(account, _body(_record()))
    _write(account, _body(_record(totalAmount="0.75", gpuAmount="0.75")))
    assert _amounts() == {T0: Decimal("0.75")}


def test_a_record_from_outside_the_window_that_is_there_already_is_upserted(account):
    """The window holds nothing yet, so the body goes in with plain inserts; one of its
    records (an hour before the window) exists, and the body is upserted instead, whole."""
    before = T0 - dt.timedelta(hours=1)
    earlier = SlicePayload(
        start=before,
        end=T0,
        bodies={
            BillingKind.POD: _body(
                _record(startTime=f"{before:%Y-%m-%dT%H:%M:%SZ}", endTime="2026-11-01T00:00:00Z")
            )
        },
    )
    write_slice(account=account, payload=earlier)
    count, *_ = _write(
        account,
        _body(
            _record(
                startTime=f"{before:%Y-%m-%dT%H:%M:%SZ}",
                endTime="2026-11-01T00:00:00Z",
                totalAmount="0.3",
                gpuAmount="0.3",
            ),
            _record(),
        ),
    )
    assert count == 2
    assert _amounts() == {before: Decimal("0.3"), T0: Decimal("0.5")}


def _stating(count, *records, layout="last") -> bytes:
    """A body stating `count` records, its metadata the document's last key, its first, or
    neither (the writer then reads the document whole)."""
    metadata = {"query": {"bucketSize": "hour"}, "recordCount": count}
    document = {
        "last": {"records": list(records), "metadata": metadata},
        "first": {"metadata": metadata, "records": list(records)},
        "middle": {"records": list(records), "metadata": metadata, "next": None},
    }[layout]
    return json.dumps(document, indent=1 if layout == "last" else None).encode()


SECOND = _record(startTime="2026-11-01T01:00:00Z", endTime="2026-11-01T02:00:00Z")


@pytest.mark.parametrize("layout", ["last", "first", "middle"])
@pytest.mark.parametrize("stated", [3, 1, 0])
def test_a_body_whose_count_disagrees_with_its_records_writes_nothing(account, stated, layout):
    """As the parser refuses it (parsing._billing_items): an answer saying it has 3 records
    and carrying 2 was cut or mangled; none of its money is summed, whichever order its keys
    come in."""
    body = _stating(stated, _record(), SECOND, layout=layout)
    with pytest.raises(RunpodBadResponse, match=f"say there are {stated} records but carry 2"):
        _write(account, body)
    assert not BillingRecord.objects.exists()


def test_a_metadata_key_inside_a_record_is_not_the_documents(account):
    """A record carrying a "metadata" of its own (a stranger's field, ignored) stated last
    does not stand for the document's count: the document is read whole and its own count
    (2) decides."""
    tricky = {**SECOND, "metadata": {"recordCount": 1}}
    body = json.dumps({"metadata": {"recordCount": 2}, "records": [_record(), tricky]}).encode()
    count, *_ = _write(account, body)
    assert count == 2 and BillingRecord.objects.count() == 2
    body = json.dumps({"metadata": {"recordCount": 1}, "records": [_record(), tricky]}).encode()
    with pytest.raises(RunpodBadResponse, match="say there are 1 records but carry 2"):
        _write(account, body)


@pytest.mark.parametrize("count", ['"2"', "2.5", "-1", "true"])
def test_a_count_that_is_not_one_is_refused(account, count):
    body = (
        b'{"records": ['
        + json.dumps(_record()).encode()
        + b', {"podId": "x"}], "metadata": {"recordCount": '
        + count.encode()
        + b"}}"
    )
    with pytest.raises(RunpodBadResponse, match="record count that is not one"):
        _write(account, body)
    assert not BillingRecord.objects.exists()


@pytest.mark.parametrize("layout", ["last", "first", "middle"])
def test_a_body_whose_count_agrees_is_written(account, layout):
    assert _write(account, _stating(2, _record(), SECOND, layout=layout))[0] == 2


def test_a_body_stating_no_count_is_written(account):
    """The metadata is not needed: its absence is tolerated, as the parser tolerates it."""
    body = json.dumps({"records": [_record(), SECOND]}).encode()
    assert _write(account, body)[0] == 2
    body = json.dumps({"records": [_record()], "metadata": {"query": {}}}).encode()
    assert _write(account, body)[0] == 1


def test_the_records_array_is_handed_over_by_its_bytes_when_laid_out_as_runpods():
    """`{"records": […], "metadata": {…}}`, as Runpod and the simulator answer: PostgreSQL
    gets the records array's bytes, not the whole body to find them in. Any other layout
    (metadata first, a key between, no metadata) hands over the whole body."""
    records = [_record(), SECOND]
    body = json.dumps({"records": records, "metadata": {"recordCount": 2}}, indent=2).encode()
    stated, array = _layout(body, BillingKind.POD)
    assert stated == 2 and json.loads(array) == records
    assert array.startswith(b"[") and array.endswith(b"]")
    assert _layout(body + b"\r\n", BillingKind.POD) == (2, array)  # a body ending in a newline
    for layout in ("first", "middle"):
        assert _layout(_stating(2, *records, layout=layout), BillingKind.POD) == (2, None)
    assert _layout(json.dumps({"records": records}).encode(), BillingKind.POD) == (None, None)


def test_a_key_between_the_records_and_the_metadata_is_read_as_the_records_key_says(account):
    """The attack on the bytes between the two keys: an array after the records, under a key
    of its own, with another record in it. Those bytes are no single JSON value, so the body
    is read whole, by its "records" key: the smuggled record is not written, and the count
    the metadata states (1) is checked against the records key's."""
    smuggled = _record(podId="pod-smuggled", totalAmount="9", gpuAmount="9")
    body = json.dumps(
        {"records": [_record()], "more": [smuggled], "metadata": {"recordCount": 1}}
    ).encode()
    assert _layout(body, BillingKind.POD)[1] is not None  # the bytes were taken first
    count, *_ = _write(account, body)
    assert count == 1
    assert _amounts() == {T0: Decimal("0.5")}
    assert not Resource.objects.filter(runpod_id="pod-smuggled").exists()


def test_a_bad_record_is_refused_whichever_way_the_body_is_read(account):
    """A record the statement cannot read, in a body laid out as Runpod's: refused in words
    after the whole body is read too, nothing written."""
    body = _stating(2, _record(), _record(startTime="2026-11-01T01:00:00Z", totalAmount="lots"))
    with pytest.raises(RunpodBadResponse, match="pod billing records"):
        _write(account, body)
    assert not BillingRecord.objects.exists()


def test_each_write_says_how_far_it_moved_each_resources_unattributed_spend(account, world):
    """What the records owe nobody after a write less before, per resource: the sync's
    unattributed queue moves by it, with no scan of the resource's other records."""
    pod = Resource.objects.get(runpod_id="pod-a")
    later = {"startTime": "2026-11-01T01:00:00Z", "endTime": "2026-11-01T02:00:00Z"}

    def moved(*records):
        return _write(account, _body(*records)).unattributed_moved

    assert moved(_record(), _record(**later, totalAmount="0.25")) == {pod.pk: Decimal("0.75")}
    # The same records again: upserted, nothing changed, nothing moved.
    assert moved(_record(), _record(**later, totalAmount="0.25")) == {}
    # Runpod corrects the first hour: 0.2 where 0.5 was.
    corrected = [_record(totalAmount="0.2", gpuAmount="0.2"), _record(**later, totalAmount="0.25")]
    assert moved(*corrected) == {pod.pk: Decimal("-0.3")}
    # Its spend is attributed from before the first hour on: its records owe nobody now.
    Assignment.objects.create(
        resource=pod,
        allocation=world.allocation,
        starts_at=T0 - dt.timedelta(days=1),
        source=Assignment.Source.MANUAL,
    )
    assert moved(*corrected) == {pod.pk: Decimal("-0.45")}
    assert _amounts() == {T0: Decimal("0.2"), T0 + dt.timedelta(hours=1): Decimal("0.25")}
