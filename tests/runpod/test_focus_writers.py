"""The FOCUS import has two writers: PostgreSQL's (checked rows COPY'd, summed and upserted in
SQL) and the generic one (summed in Python), which SQLite, the embedded demo database, uses.
They write the same records, totals and ledger from the same files, and the import's tests pass
on SQLite itself."""

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
import time_machine

from labgov.core.periods import UTC
from labgov.funding.models import LedgerEntry
from labgov.runpod import focus
from labgov.runpod.focus import focus_import, source_create
from labgov.runpod.models import AccountBillingRecord, AttributionRule, BillingRecord, FocusFile
from labgov.usage.models import DailySpend

FILES = Path(__file__).parent / "focus_files"
ROOT = Path(__file__).resolve().parents[2]
# Each file replaces the month the one before wrote: a first file, its correction, then a
# file of every charge category.
SEQUENCE = ("aws_2026_10.csv", "aws_2026_10_corrected.csv", "mixed_categories_2026_10.csv")


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(dt.datetime(2026, 11, 10, 12, tzinfo=UTC), tick=False):
        yield


def _source(world, name):
    source = source_create(
        actor=world.inst_admin, institution=world.institution, name=name, provider="AWS"
    )
    AttributionRule.objects.create(
        lab=world.lab,
        account=source,
        kind=AttributionRule.Kind.TAG,
        pattern="costcenter=CC-1042",
        allocation=world.allocation,
        starts_at=dt.datetime(2026, 9, 1, tzinfo=UTC),
    )
    return source


def _written(world, source):
    """Everything an import writes into one source, without its own ids."""
    records = sorted(
        BillingRecord.objects.filter(resource__account=source).values_list(
            "resource__runpod_id",
            "resource__name",
            "resource__env",
            "bucket_start",
            "bucket_end",
            "kind",
            "total_usd",
            "gpu_usd",
            "cpu_usd",
            "storage_standard_usd",
            "credit_usd",
            "adjustment_usd",
            "charge_category",
            "charge_class",
            "allocation_id",
        ),
        key=repr,
    )
    totals = sorted(
        AccountBillingRecord.objects.filter(account=source).values_list(
            "bucket_start", "bucket_end", "total_usd", "components"
        ),
        key=repr,
    )
    files = list(
        FocusFile.objects.filter(account=source)
        .order_by("imported_at", "id")
        .values_list("rows", "records", "billed_total", "total_usd", "charge_categories")
    )
    rollups = sorted(
        DailySpend.objects.filter(account=source).values_list(
            "day", "allocation_id", "category", "amount_usd"
        ),
        key=repr,
    )
    return records, totals, files, rollups


def _import_all(source, actor):
    for name in SEQUENCE:
        with open(FILES / name, "rb") as stream:
            focus_import(actor=actor, account=source, stream=stream, file_name=name)


def _usage(world):
    return sum(
        LedgerEntry.objects.filter(allocation=world.allocation, kind="usage").values_list(
            "amount_usd", flat=True
        )
    )


def test_both_writers_write_the_same_from_the_same_files(world, monkeypatch):
    before = _usage(world)
    default = _source(world, "AWS default writer")
    _import_all(default, world.inst_admin)
    posted = _usage(world) - before
    monkeypatch.setattr(focus, "_writer", focus._PyStage)
    generic = _source(world, "AWS generic writer")
    _import_all(generic, world.inst_admin)
    written = _written(world, generic)
    assert written == _written(world, default)
    records, _, files, _ = written
    assert len(records) == 6 and [f[0] for f in files] == [6, 5, 7]
    # The second source posted the same usage to the same allocation again.
    assert posted != 0 and _usage(world) - before == 2 * posted


def test_the_import_tests_pass_on_sqlite(tmp_path):
    """The suite runs on PostgreSQL; the embedded demo database is SQLite: the import's own
    tests, and the comparison above (there on the generic writer), run on it in a child."""
    env = {**os.environ, "DEBUG": "1", "DATABASE_URL": f"sqlite:///{tmp_path / 'focus.sqlite3'}"}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"),
            "--nomigrations",
            "tests/runpod/test_focus_import.py",
            "tests/runpod/test_focus_writers.py::test_both_writers_write_the_same_from_the_same_files",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "21 passed" in done.stdout and "failed" not in done.stdout
