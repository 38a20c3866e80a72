"""The FOCUS dataset passes the FinOps Foundation's own validator (focus-validator 2.2.1, its
FOCUS 1.2 rules) with no failure a dataset can avoid: a month of the demo (seeded and synced
from the simulator), and that month with late usage after its close and a credit on an
invoice.

The validator lives in its own environment, .venv-focus (scripts/focus-validator-env, which
`make test` runs first; here it only returns its path when it is there). It reads
focus_validator/rules/currency_codes.csv relative to the working directory, so it runs from its
package's parent folder, with --block-download (its rules ship with it; nothing is fetched)."""

import datetime as dt
import json
import os
import re
import subprocess
from decimal import Decimal
from io import StringIO
from pathlib import Path

import time_machine
from django.core.management import call_command

from labgov.accounts.models import Institution
from labgov.exports import focus
from labgov.funding.models import FundingSource
from labgov.runpod.models import BillingRecord
from labgov.usage.models import ClosedPeriod
from tests.exports.conftest import make_invoice

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^Total: (\d+) \| Pass: (\d+) \| Fail: (\d+) \| Skipped: (\d+)$", re.M)
FAILED = re.compile(r"^❌ (\S+): FAIL .*$", re.M)


def validator() -> Path:
    made = subprocess.run(
        [str(ROOT / "scripts" / "focus-validator-env")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert made.returncode == 0, f"focus-validator-env failed: {made.stderr[-2000:]}"
    return Path(made.stdout.strip()).parent / "focus-validator"


def packages_of(command: Path) -> Path:
    return next((command.parent.parent / "lib").glob("python3.*/site-packages"))


def contradictory_rules(packages: Path) -> dict[str, str]:
    """Pairs of the validator's own 1.2 rules that no dataset can both pass: on one column,
    with no condition, one requires every value null and the other every value not null. In
    2.2.1 that is InvoiceId-C-004-C ("MUST be null when the charge is not associated with an
    invoice") against InvoiceId-C-005-C ("MUST NOT be null when it is"): the conditions are
    words the validator cannot check, so it checks both on every row; their composite
    (InvoiceId-C-003-C, either of them) is what a dataset can pass. {rule: its opposite}."""
    model = json.loads((packages / "focus_validator/rules/model-1.2.0.1.json").read_text())
    by_column: dict[tuple, list[str]] = {}
    for rule_id, rule in model["ModelRules"].items():
        criteria = rule.get("ValidationCriteria") or {}
        requirement = criteria.get("Requirement") or {}
        check = requirement.get("CheckFunction")
        if (
            rule.get("Function") == "Nullability"
            and not criteria.get("Condition")
            and check in ("CheckValue", "CheckNotValue")
            and requirement.get("Value") is None
        ):
            by_column.setdefault((requirement["ColumnName"], check), []).append(rule_id)
    pairs = {}
    for (column, check), rules in by_column.items():
        if check == "CheckValue":
            for opposite in by_column.get((column, "CheckNotValue"), []):
                for rule in rules:
                    pairs[rule], pairs[opposite] = opposite, rule
    return pairs


def start_validating(command: Path, data: Path) -> subprocess.Popen:
    packages = packages_of(command)
    assert (packages / "focus_validator" / "rules" / "currency_codes.csv").is_file()
    return subprocess.Popen(
        [
            str(command),
            "--data-file",
            str(data),
            "--validate-version",
            "1.2",
            "--block-download",
            "--applicability-criteria",
            "USAGE_MEASUREMENT_SUPPORTED",
        ],
        cwd=packages,
        # Its CSV loader is polars, which reads with a thread per core: with the two runs
        # side by side on two cores the threads only contend (measured 10.3 -> 8.0 CPU-s a
        # run at load 8). One thread reads the same frame.
        env={**os.environ, "POLARS_MAX_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def result(process: subprocess.Popen) -> tuple[dict, list[str], str]:
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    summary = SUMMARY.search(output)
    assert summary, f"no summary line in the validator's output: {output[-3000:]}"
    total, passed, failed, skipped = map(int, summary.groups())
    return (
        {"total": total, "pass": passed, "fail": failed, "skipped": skipped},
        FAILED.findall(output),
        output,
    )


def test_a_demo_month_and_a_corrected_one_pass_the_focus_validator(db, sim, tmp_path):
    command = validator()
    with time_machine.travel(sim.state.now, tick=True):
        call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
    institution = Institution.objects.get(slug="northfield")
    # The simulator's month of history ends at its clock: the month holding most of it.
    month = (sim.state.now - dt.timedelta(days=15)).date().replace(day=1)
    demo = tmp_path / "demo.csv"
    demo.write_bytes(b"".join(focus.dataset(institution, month)))

    # The same month closed, then a record of it changed by Runpod (late usage), and a
    # credit on one of its invoices.
    close = ClosedPeriod.objects.create(institution=institution, month=month)
    start = focus.period_of(institution, month).start
    record = (
        BillingRecord.objects.filter(
            resource__account__institution=institution, bucket_start__gte=start
        )
        .order_by("resource_id", "bucket_start")
        .first()
    )
    BillingRecord.objects.filter(pk=record.pk).update(
        total_usd=record.total_usd + Decimal("0.0123456789"),
        gpu_usd=record.gpu_usd + Decimal("0.0123456789"),
        synced_at=close.closed_at + dt.timedelta(hours=2),
    )
    source = FundingSource.objects.filter(institution=institution).order_by("pk").first()
    make_invoice(
        source,
        lines=[("credit", "outage credit", None, None, "-25.00", True)],
        month=month,
        status="issued",
        number_seq=901,
    )
    corrected = tmp_path / "corrected.csv"
    corrected.write_bytes(b"".join(focus.dataset(institution, month)))
    text = corrected.read_text()
    assert ",Correction," in text and ",Adjustment," in text and ",Usage," in text

    contradictions = contradictory_rules(packages_of(command))
    assert set(contradictions) == {"InvoiceId-C-004-C", "InvoiceId-C-005-C"}

    # Both at once (one validator run per dataset, the two cores each running one).
    runs = [start_validating(command, path) for path in (demo, corrected)]
    for path, run in zip((demo, corrected), runs, strict=True):
        counts, failures, output = result(run)
        # Nothing failed but what no dataset can pass (see contradictory_rules): one rule of
        # such a pair, never both, and never their composite.
        for rule in failures:
            assert rule in contradictions, (path.name, rule, failures, output[-4000:])
            assert contradictions[rule] not in failures, (path.name, rule)
        assert counts["fail"] == len(failures)
        # The rules ran: every mandatory column's checks passed, not skipped.
        assert counts["pass"] >= 120, (path.name, counts)
        assert sum(1 for _ in path.open()) > 100
