"""The billing writer refuses records that break the contract, in words, writing nothing."""

import datetime as dt
import json
from decimal import Decimal

import pytest

from labgov.runpod.billing_store import SlicePayload, uses_bulk_sql, write_slice
from labgov.runpod.errors import RunpodBadResponse
from labgov.runpod.models import BillingRecord, Resource
from labgov.runpod.types import BillingKind
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
    count, days = _write(account, _body(_record(), _record(podId="pod-gone", totalAmount="0.25")))
    assert count == 2 and days == {T0.date()}
    gone = Resource.objects.get(runpod_id="pod-gone")
    assert gone.billing_only and gone.status == ""
    assert gone.gone_at == T0 + dt.timedelta(hours=1)
    assert BillingRecord.objects.count() == 2


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
    count, _ = _write(
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
