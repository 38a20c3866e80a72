"""FOCUS billing sources: a month's FOCUS file becomes the source's resources, records and
totals, through the same seam as Runpod's sync, and bad files are refused naming the row and
column, writing nothing. Files are hand-written under tests/runpod/focus_files/."""

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.core.exceptions import PermissionDenied

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.funding.models import LedgerEntry
from labgov.runpod.attribution import unattributed_refresh
from labgov.runpod.focus import FocusRefused, focus_import, source_create
from labgov.runpod.models import (
    AccountBillingRecord,
    AttributionRule,
    BillingRecord,
    FocusFile,
    Resource,
    SyncRun,
)
from labgov.usage.models import Category, DailySpend
from tests.derived_rollups import assert_derived_rollups_match

FILES = Path(__file__).parent / "focus_files"
NOW = dt.datetime(2026, 11, 10, 12, tzinfo=UTC)
EC2 = "arn:aws:ec2:us-east-1:111122223333:instance/i-0abc"
S3 = "arn:aws:s3:::vision-datasets"


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def source(world):
    return source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS research", provider="AWS"
    )


def _import(source, name, actor=None, **kwargs):
    with open(FILES / name, "rb") as stream:
        return focus_import(
            actor=actor or _admin(source), account=source, stream=stream, file_name=name, **kwargs
        )


def _admin(source):
    from labgov.accounts.models import Membership, Role

    return (
        Membership.objects.filter(institution=source.institution, role=Role.INSTITUTION_ADMIN)
        .first()
        .user
    )


def _state(source):
    """Everything an import writes, to show that a refused one wrote nothing."""
    return (
        sorted(
            BillingRecord.objects.filter(resource__account=source).values_list(
                "resource__runpod_id", "bucket_start", "total_usd", "allocation_id"
            )
        ),
        Resource.objects.filter(account=source).count(),
        AccountBillingRecord.objects.filter(account=source).count(),
        FocusFile.objects.filter(account=source).count(),
        SyncRun.objects.filter(account=source).count(),
        LedgerEntry.objects.count(),
    )


def test_an_institution_admin_adds_a_source_and_no_one_else_may(world):
    for person in (world.lab_admin, world.finance, world.member, world.outsider):
        with pytest.raises(PermissionDenied):
            source_create(actor=person, institution=world.institution, name="AWS", provider="AWS")
    source = source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS", provider="AWS"
    )
    assert source.is_focus and source.api_key_encrypted == "" and source.currency == "USD"
    assert AuditEvent.objects.filter(action="focus_source.create", target_id=str(source.pk))
    with pytest.raises(DomainError, match="USD per unit"):
        source_create(
            actor=world.inst_admin,
            institution=world.institution,
            name="Azure EU",
            provider="Microsoft Azure",
            currency="EUR",
            usd_per_unit="-1",
        )


def test_a_month_becomes_records_resources_and_the_files_own_totals(world, source):
    result = _import(source, "aws_2026_10.csv")
    assert not result.unchanged and result.file.rows == 6 and result.file.focus_version == "1.0"
    records = {
        (r.resource.runpod_id, r.bucket_start): r
        for r in BillingRecord.objects.filter(resource__account=source).select_related("resource")
    }
    october_1 = dt.datetime(2026, 10, 1, tzinfo=UTC)
    # The two rows of the same resource and hour are summed exactly, to the last digit.
    ec2 = records[(EC2, october_1)]
    assert ec2.total_usd == Decimal("12.3456789013") and ec2.cpu_usd == ec2.total_usd
    assert ec2.bucket_end == october_1 + dt.timedelta(hours=1) and ec2.kind == "cloud"
    s3_credit = records[(S3, october_1 + dt.timedelta(days=1))]
    # A credit is kept apart, not in the service's part: it is its own line on invoices.
    assert s3_credit.total_usd == Decimal("-1.50") == s3_credit.credit_usd
    assert s3_credit.storage_standard_usd == 0
    # A row without a resource (the tax) is the service's and sub-account's pseudo-resource.
    tax = records[("Tax (777788889999)", october_1)]
    assert tax.total_usd == Decimal("0.99") and tax.bucket_end == dt.datetime(
        2026, 11, 1, tzinfo=UTC
    )
    ec2_resource = Resource.objects.get(account=source, runpod_id=EC2)
    assert ec2_resource.name == "train-vision-1"
    assert ec2_resource.env == {"costcenter": "CC-1042", "team": "vision"}
    assert ec2_resource.details["sub_account_id"] == "444455556666"
    total = sum(r.total_usd for r in records.values())
    assert result.file.billed_total == total == Decimal("27.3813578025")
    assert result.file.charge_categories == {
        "Credit": "-1.50",
        "Tax": "0.99",
        "Usage": "27.8913578025",
    }
    days = AccountBillingRecord.objects.filter(account=source)
    assert sum(d.total_usd for d in days) == total
    # Nobody pays for it yet: the unattributed queue holds all of it.
    assert (
        sum(Resource.objects.filter(account=source).values_list("unattributed_usd", flat=True))
        == total
    )
    run = SyncRun.objects.get(account=source)
    assert run.trigger == "import" and run.status == "succeeded"
    assert (run.window_start, run.window_end) == (october_1, dt.datetime(2026, 11, 1, tzinfo=UTC))
    assert AuditEvent.objects.filter(action="focus_file.import", target_id=str(result.file.pk))


def test_the_same_file_twice_changes_nothing_and_a_corrected_one_replaces_the_first(world, source):
    first = _import(source, "aws_2026_10.csv")
    before = _state(source)
    again = _import(source, "aws_2026_10.csv")
    assert again.unchanged and again.file == first.file and _state(source) == before
    corrected = _import(source, "aws_2026_10_corrected.csv")
    assert not corrected.unchanged
    s3 = BillingRecord.objects.filter(resource__account=source, resource__runpod_id=S3)
    # The credit the first file held is gone: the correction said nothing of it.
    assert list(s3.values_list("total_usd", flat=True)) == [Decimal("3.20")]
    ec2_second = BillingRecord.objects.get(
        resource__runpod_id=EC2, bucket_start=dt.datetime(2026, 10, 2, tzinfo=UTC)
    )
    assert ec2_second.total_usd == Decimal("10.00")
    assert (
        sum(AccountBillingRecord.objects.filter(account=source).values_list("total_usd", flat=True))
        == corrected.file.billed_total
        == Decimal("26.5356789013")
    )
    # The queue moved by what the correction changed (span_written): the figures it would
    # have read from all the records, to the last digit.
    assert unattributed_refresh(account=source) == 0
    assert (
        sum(Resource.objects.filter(account=source).values_list("unattributed_usd", flat=True))
        == corrected.file.billed_total
    )


def test_the_ledger_and_rollups_follow_a_rule_on_a_tag(world, source):
    AttributionRule.objects.create(
        lab=world.lab,
        account=source,
        kind=AttributionRule.Kind.TAG,
        pattern="costcenter=CC-1042",
        allocation=world.allocation,
        starts_at=dt.datetime(2026, 9, 1, tzinfo=UTC),
    )
    _import(source, "aws_2026_10.csv")
    attributed = BillingRecord.objects.filter(resource__account=source, allocation=world.allocation)
    assert {r.resource.runpod_id for r in attributed.select_related("resource")} == {EC2, S3}
    usage = sum(
        LedgerEntry.objects.filter(allocation=world.allocation, kind="usage").values_list(
            "amount_usd", flat=True
        )
    )
    assert usage == sum(r.total_usd for r in attributed) == Decimal("26.3913578025")
    rollups = DailySpend.objects.filter(account=source, allocation=world.allocation)
    by_category = {}
    for row in rollups:
        by_category[row.category] = by_category.get(row.category, 0) + row.amount_usd
    assert by_category == {
        Category.CLOUD_COMPUTE: Decimal("24.6913578025"),
        Category.CLOUD_STORAGE: Decimal("3.20"),
        Category.CLOUD_CREDIT: Decimal("-1.50"),
    }
    assert Resource.objects.get(runpod_id=EC2).unattributed_usd == 0
    assert unattributed_refresh(account=source) == 0
    # The correction takes the credit back out of the ledger too.
    _import(source, "aws_2026_10_corrected.csv")
    assert unattributed_refresh(account=source) == 0
    usage = sum(
        LedgerEntry.objects.filter(allocation=world.allocation, kind="usage").values_list(
            "amount_usd", flat=True
        )
    )
    assert usage == Decimal("25.5456789013")
    assert_derived_rollups_match()  # the rollups by lab and by funding source followed


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("missing_currency_column.csv", "lacks the FOCUS column BillingCurrency (row 1"),
        ("bad_decimal.csv", "Row 3, column BilledCost: '0,00001' is not a decimal number"),
        ("negative_quantity.csv", "Row 4, column ConsumedQuantity: '-2' is negative"),
        ("currency_change.csv", "Row 5, column BillingCurrency: 'EUR' after USD"),
        ("naive_time.csv", "Row 6, column ChargePeriodStart: '2026-10-02 00:00' has no time zone"),
        ("nan_cost.csv", "Row 4, column BilledCost: 'NaN' is not a finite number"),
        ("unknown_category.csv", "Row 5, column ChargeCategory: 'Refund' is none of Usage"),
        ("tags_not_json.csv", "Row 3, column Tags: it is not a JSON object"),
        ("eur_2026_10.csv", "Row 2, column BillingCurrency: the file bills in EUR"),
    ],
)
def test_a_bad_file_is_refused_naming_row_and_column_and_writes_nothing(world, source, name, words):
    _import(source, "aws_2026_10.csv")
    before = _state(source)
    with pytest.raises(FocusRefused, match=words.replace("(", r"\(")) as refused:
        _import(source, name)
    assert "Nothing was imported" in refused.value.message
    assert _state(source) == before


def test_a_non_usd_file_is_converted_at_the_sources_exchange_rate(world):
    source = source_create(
        actor=world.inst_admin,
        institution=world.institution,
        name="Azure EU",
        provider="Microsoft Azure",
        currency="EUR",
        usd_per_unit="1.0800000000",
    )
    result = _import(source, "eur_2026_10.csv")
    assert result.file.currency == "EUR" and result.file.usd_per_unit == Decimal("1.08")
    tax = BillingRecord.objects.get(
        resource__account=source, resource__runpod_id="Tax (777788889999)"
    )
    assert tax.total_usd == Decimal("1.0692")


def test_only_an_institution_admin_imports(world, source):
    for person in (world.lab_admin, world.finance, world.member, world.outsider):
        with pytest.raises(PermissionDenied):
            _import(source, "aws_2026_10.csv", actor=person)
    assert FocusFile.objects.count() == 0


def test_a_runpod_connection_takes_no_file_and_a_source_is_never_synced(world, source):
    from labgov.runpod.sync import account_sync
    from tests.factories import RunpodAccountFactory

    runpod = RunpodAccountFactory(institution=world.institution)
    with pytest.raises(DomainError, match="synced, not imported"):
        _import(runpod, "aws_2026_10.csv", actor=world.inst_admin)
    run = account_sync(account_id=source.pk)
    assert run.status == "skipped" and "imported from files" in run.error


def test_the_command_imports_a_file_and_says_so(world, source):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command(
        "import_focus", str(FILES / "aws_2026_10.csv"), "--source", source.name, stdout=out
    )
    assert "2026-10: 6 rows" in out.getvalue()
    call_command(
        "import_focus", str(FILES / "aws_2026_10.csv"), "--source", source.name, stdout=out
    )
    assert "unchanged" in out.getvalue()
    with pytest.raises(CommandError, match="Row 3, column BilledCost"):
        call_command("import_focus", str(FILES / "bad_decimal.csv"), "--source", source.name)
    with pytest.raises(CommandError, match="No FOCUS billing source named 'Nope'"):
        call_command("import_focus", str(FILES / "aws_2026_10.csv"), "--source", "Nope")
    assert FocusFile.objects.filter(account=source).count() == 1


def test_rules_on_resource_id_and_sub_account_and_who_may_back_date_them(world):
    from labgov.runpod.services import rule_create

    source = source_create(
        actor=world.inst_admin,
        institution=world.institution,
        name="Vision AWS",
        provider="AWS",
        lab=world.lab,
    )
    _import(source, "aws_2026_10.csv")
    october = dt.datetime(2026, 10, 1, tzinfo=UTC)
    # A lab admin makes rules on the lab's own source, but only from now on.
    with pytest.raises(DomainError, match="only an institution admin may start it earlier"):
        rule_create(
            actor=world.lab_admin,
            account=source,
            kind=AttributionRule.Kind.RESOURCE_ID,
            pattern=EC2,
            allocation=world.allocation,
            starts_at=october,
        )
    assert not BillingRecord.objects.filter(resource__account=source, allocation__isnull=False)
    rule_create(
        actor=world.inst_admin,
        account=source,
        kind=AttributionRule.Kind.RESOURCE_ID,
        pattern=EC2,
        allocation=world.allocation,
        starts_at=october,
    )
    paid = BillingRecord.objects.filter(resource__account=source, allocation=world.allocation)
    assert {r.resource.runpod_id for r in paid.select_related("resource")} == {EC2}
    rule_create(
        actor=world.inst_admin,
        account=source,
        kind=AttributionRule.Kind.SUB_ACCOUNT,
        pattern="777788889999",
        allocation=world.allocation,
        starts_at=october,
    )
    assert {r.resource.runpod_id for r in paid.select_related("resource")} == {
        EC2,
        "Tax (777788889999)",
    }
    # The ledger follows: what the two rules pay, to the last digit.
    usage = LedgerEntry.objects.filter(allocation=world.allocation, kind="usage")
    assert sum(usage.values_list("amount_usd", flat=True)) == Decimal("25.6813578025")
    with pytest.raises(DomainError, match="key=value"):
        rule_create(
            actor=world.inst_admin,
            account=source,
            kind=AttributionRule.Kind.TAG,
            pattern="costcenter",
            allocation=world.allocation,
        )


def test_each_record_keeps_its_charge_category_and_class(world, source):
    """Usage, its credit in the same hour, a credit alone, a correction, an adjustment, a
    purchase and a tax: each record says which it is, and a usage record keeps the credit
    summed into it apart, so credits and adjustments can be shown as such."""
    result = _import(source, "mixed_categories_2026_10.csv")
    records = {
        (r.resource.runpod_id, r.bucket_start): (
            r.charge_category,
            r.charge_class,
            r.total_usd,
            r.credit_usd,
            r.adjustment_usd,
        )
        for r in BillingRecord.objects.filter(resource__account=source).select_related("resource")
    }
    october_1 = dt.datetime(2026, 10, 1, tzinfo=UTC)
    hour = dt.timedelta(hours=1)
    zero = Decimal(0)
    assert records == {
        # The usage line and its credit of the same hour: one record, the credit kept apart.
        (EC2, october_1): ("Usage", "", Decimal("7.50"), Decimal("-2.50"), zero),
        (EC2, october_1 + hour): ("Credit", "", Decimal("-4.00"), Decimal("-4.00"), zero),
        # A negative quantity is allowed on a correction, which the record says it is.
        (EC2, october_1 + 2 * hour): ("Usage", "Correction", Decimal("-0.75"), zero, zero),
        (S3, october_1): ("Adjustment", "", Decimal("1.20"), zero, Decimal("1.20")),
        ("Savings Plans (444455556666)", october_1): ("Purchase", "", Decimal(300), zero, zero),
        ("Tax (777788889999)", october_1): ("Tax", "", Decimal("0.99"), zero, zero),
    }
    assert result.file.charge_categories == {
        "Adjustment": "1.20",
        "Credit": "-6.50",
        "Purchase": "300.00",
        "Tax": "0.99",
        "Usage": "9.25",
    }


def test_a_name_prefix_rule_pays_and_a_budget_threshold_reads_the_sources_spend(world, source):
    """A rule on ResourceName (its prefix) attributes a FOCUS resource as a Runpod pod's
    name would; the spend reaches the ledger, and the budget thresholds read it from there."""
    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.alerts.models import Alert, Kind
    from labgov.funding.models import Allocation

    AttributionRule.objects.create(
        lab=world.lab,
        account=source,
        kind=AttributionRule.Kind.NAME_PREFIX,
        pattern="train-",
        allocation=world.allocation,
        starts_at=dt.datetime(2026, 9, 1, tzinfo=UTC),
    )
    Allocation.objects.filter(pk=world.allocation.pk).update(cap_usd=Decimal(30))
    _import(source, "aws_2026_10.csv")
    ec2 = Resource.objects.get(account=source, runpod_id=EC2)
    assert ec2.current_allocation_id == world.allocation.pk and ec2.unattributed_usd == 0
    assert Resource.objects.get(account=source, runpod_id=S3).unattributed_usd == Decimal("1.70")
    alerts_evaluate(institution_id=world.institution.pk, now=NOW)
    alert = Alert.objects.get(
        kind=Kind.BUDGET_THRESHOLD, subject_key=f"allocation:{world.allocation.pk}"
    )
    # EC2's 24.6913578025 of a 30.00 cap: 82 %.
    assert alert.level == 80 and alert.facts["used_usd"] == "24.69"
