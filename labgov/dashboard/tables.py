"""Dashboard tables: one description renders as HTML (with sort links) and as CSV, so a
download always holds what the page shows, with the same filters and order."""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from html import escape
from urllib.parse import quote_plus

from django.http import HttpResponse, QueryDict
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

from labgov.core.csv_export import csv_download
from labgov.core.money import to_cents, usd_text
from labgov.core.templatetags.labgov import usd
from labgov.runpod.history import Before

MONEY, TEXT, DATE, NUMBER, PERCENT = "money", "text", "date", "number", "percent"


@dataclass
class Column:
    key: str
    label: str
    kind: str = TEXT
    sortable: bool = True
    # Filled by Table.bind: where a click on the header leads, and the arrow it shows.
    sort_url: str = ""
    sort_state: str = ""

    @property
    def numeric(self) -> bool:
        return self.kind in (MONEY, NUMBER, PERCENT)


@dataclass(frozen=True)
class Cell:
    """A value formatted for the page."""

    text: str
    css: str = ""
    href: str = ""


ZERO_CELL = Cell("$0.00", "num")


def _money_cell(value) -> Cell:
    # Most cells of a pivot by month are zero: those skip the formatting.
    if not value:
        return ZERO_CELL
    return Cell(usd(value), "num over" if value < 0 else "num")


def display(value, column: Column, *, href: str = "") -> Cell:
    if value is None or value == "":
        return Cell("", "num" if column.numeric else "")
    if column.kind == MONEY:
        return _money_cell(value)
    if column.kind == PERCENT:
        return Cell(f"{Decimal(value):.1f}%", "num")
    if column.kind == NUMBER:
        return Cell(str(value), "num")
    if isinstance(value, Before):
        return Cell(f"before {value.astimezone(dt.UTC):%Y-%m-%d}")
    if isinstance(value, dt.datetime):
        return Cell(f"{value.astimezone(dt.UTC):%Y-%m-%d %H:%M}")
    if isinstance(value, dt.date):
        return Cell(value.isoformat())
    return Cell(str(value), href=href)


@dataclass
class Row:
    cells: list
    href: str = ""  # links the first cell
    # Pinned rows (such as "Unattributed") stay at the bottom whatever the sort.
    pinned: bool = False


@dataclass
class Table:
    name: str  # the CSV's ?table= value and the prefix of its sort parameter
    title: str
    columns: list[Column]
    rows: list[Row] = field(default_factory=list)
    footer: list | None = None
    default_sort: str = ""
    empty: str = "Nothing in this range."
    note: str = ""
    sort: str = ""
    csv_url: str = ""
    # Filled by bind: the <thead>, the rows of the <tbody> and the <tfoot> (empty without one).
    head_html: str = ""
    body_html: str = ""
    foot_html: str = ""

    @property
    def sort_param(self) -> str:
        return f"{self.name}_sort"

    @property
    def html(self) -> str:
        """The table's section as a page shows it (its title, CSV link, note, and the table
        or its empty text), after bind. Built here rather than by including a template: an
        include cost ~70 µs, a lab's page has five tables and finance's five. Every text is
        escaped (conditional_escape: a note marked safe keeps its markup)."""
        name, title, csv_url = (
            conditional_escape(v) for v in (self.name, self.title, self.csv_url)
        )
        note = f'<p class="note">{conditional_escape(self.note)}</p>' if self.note else ""
        if self.rows:
            shown = (
                f'\n  <div class="scroll">\n  <table>\n    {self.head_html}\n    <tbody>\n'
                f"    {self.body_html}\n    </tbody>\n    {self.foot_html}\n  </table>\n"
                "  </div>\n  "
            )
        else:
            shown = f'\n  <p class="empty">{conditional_escape(self.empty)}</p>\n  '
        return mark_safe(  # noqa: S308 - assembled from escaped parts only
            f'<section class="dash-table" id="table-{name}">\n'
            '  <div class="section-head">\n'
            f"    <h2>{title}</h2>\n"
            f'    <a class="csv" href="{csv_url}" download>Download CSV</a>\n'
            "  </div>\n"
            f"  {note}\n"
            f"  {shown}\n</section>\n"
        )

    def apply_sort(self, params: QueryDict) -> "Table":
        """Sort by ?<name>_sort=<key> (or -<key> for descending); unknown keys fall back to
        the default order."""
        wanted = params.get(self.sort_param, "") or self.default_sort
        key = wanted.removeprefix("-")
        keys = [c.key for c in self.columns if c.sortable]
        if key not in keys:
            self.sort = ""
            return self
        self.sort = wanted
        index = next(i for i, c in enumerate(self.columns) if c.key == key)
        descending = wanted.startswith("-")
        present = [r for r in self.rows if r.cells[index] not in (None, "")]
        missing = [r for r in self.rows if r.cells[index] in (None, "")]
        present.sort(key=lambda r: _sort_key(r.cells[index]), reverse=descending)
        ordered = present + missing
        self.rows = [r for r in ordered if not r.pinned] + [r for r in ordered if r.pinned]
        return self

    def bind(self, params: QueryDict) -> "Table":
        """Sort, then build the header and CSV links from the page's own query string, so
        every link keeps the current filters."""
        self.apply_sort(params)
        for column in self.columns:
            if not column.sortable:
                continue
            ascending = column.key
            descending = f"-{column.key}"
            if self.sort == ascending:
                column.sort_state, target = "▲", descending
            elif self.sort == descending:
                column.sort_state, target = "▼", ascending
            else:
                column.sort_state = ""
                target = descending if column.numeric else ascending
            column.sort_url = query_with(
                params, **{self.sort_param: target, "format": None, "table": None}
            )
        self.csv_url = query_with(params, format="csv", table=self.name)
        self.head_html = head_html(self.columns)
        self.body_html = rows_html(self.rows, self.columns)
        if self.footer is not None:
            self.foot_html = foot_html(self.footer, self.columns)
        return self


# The table's head, body and foot are built here, not by template loops: the biggest tables (a
# pivot of 200 funding sources by month) have thousands of cells, and a template tag per cell
# cost more than all of the page's queries together. Every text and link is escaped; money,
# percentages and dates are formatted from numbers and dates, with nothing to escape.


def head_html(columns: list[Column]) -> str:
    out = ["<thead><tr>"]
    for c in columns:
        out.append('<th class="num">' if c.numeric else "<th>")
        label = escape(c.label)
        if c.sortable:
            url = escape(c.sort_url)
            out.append(
                f'<a href="{url}" hx-get="{url}" hx-target="#dash-body" hx-swap="outerHTML" '
                f'hx-push-url="true">{label}</a>'
            )
            if c.sort_state:
                out.append(f' <span class="sort">{escape(c.sort_state)}</span>')
        else:
            out.append(label)
        out.append("</th>")
    out.append("</tr></thead>")
    return mark_safe("".join(out))  # noqa: S308 - assembled from escaped parts only


def rows_html(rows: list[Row], columns: list[Column]) -> str:
    """The table body: one <tr> per row, its first cell linked to the row's href."""
    if not columns:
        return ""
    first, *others = [_CELL_HTML.get(c.kind, _other_html) for c in columns]
    out = []
    for row in rows:
        cells = row.cells
        if len(cells) != len(columns):
            raise ValueError(f"{len(cells)} cells for {len(columns)} columns")
        out.append('<tr class="pinned">' if row.pinned else "<tr>")
        if row.href:
            out.append(_linked_html(cells[0], columns[0], row.href))
        else:
            out.append(first(cells[0], columns[0]))
        out.extend([f(v, c) for f, v, c in zip(others, cells[1:], columns[1:], strict=True)])
        out.append("</tr>\n")
    return mark_safe("".join(out))  # noqa: S308 - assembled from escaped parts only


def foot_html(footer: list, columns: list[Column]) -> str:
    """The totals row (no links), or nothing for an empty one."""
    if not footer:
        return ""
    out = ["<tfoot><tr>"]
    for value, column in zip(footer, columns, strict=True):
        cell = display(value, column)
        text = escape(cell.text)
        out.append(f'<th class="{cell.css}">{text}</th>' if cell.css else f"<th>{text}</th>")
    out.append("</tr></tfoot>")
    return mark_safe("".join(out))  # noqa: S308 - assembled from escaped parts only


_ZERO_TD = '<td class="num">$0.00</td>'
_EMPTY_NUM_TD = '<td class="num"></td>'


def _money_html(value, column) -> str:
    if type(value) is Decimal:  # usd's figure, without its checks and copy
        if not value:  # most cells of a pivot by month are zero: those skip the formatting
            return _ZERO_TD
        text = usd_text(to_cents(value))
        return f'<td class="num over">{text}</td>' if value < 0 else f'<td class="num">{text}</td>'
    if value is None or value == "":
        return _EMPTY_NUM_TD
    if not value:
        return _ZERO_TD
    return f'<td class="{"num over" if value < 0 else "num"}">{usd(value)}</td>'


def _percent_html(value, column) -> str:
    if value is None or value == "":
        return _EMPTY_NUM_TD
    return f'<td class="num">{Decimal(value):.1f}%</td>'


def _other_html(value, column) -> str:
    """Text, numbers and dates, as `display` gives them."""
    if value is None or value == "":
        return _EMPTY_NUM_TD if column.numeric else "<td></td>"
    if column.kind == TEXT and type(value) is str:
        return f"<td>{escape(value)}</td>"
    cell = display(value, column)
    text = escape(cell.text)
    return f'<td class="{cell.css}">{text}</td>' if cell.css else f"<td>{text}</td>"


def _linked_html(value, column, href: str) -> str:
    cell = display(value, column, href=href)
    text = escape(cell.text)
    if cell.href:
        text = f'<a href="{escape(cell.href)}">{text}</a>'
    return f'<td class="{cell.css}">{text}</td>' if cell.css else f"<td>{text}</td>"


def _text_html(value, column) -> str:
    if type(value) is str:  # most text cells: names, labels
        return f"<td>{escape(value)}</td>" if value else "<td></td>"
    return _other_html(value, column)


def _date_html(value, column) -> str:
    """Dates and datetimes as `display` shows them (formatted from numbers, nothing to
    escape); anything else (a Before, text) as _other_html shows it."""
    kind = type(value)
    if kind is dt.datetime:
        return f"<td>{value.astimezone(dt.UTC):%Y-%m-%d %H:%M}</td>"
    if kind is dt.date:
        return f"<td>{value.isoformat()}</td>"
    return _other_html(value, column)


_CELL_HTML = {MONEY: _money_html, PERCENT: _percent_html, TEXT: _text_html, DATE: _date_html}


def _sort_key(value):
    if isinstance(value, str):
        return value.casefold()
    return value


def query_with(params: QueryDict, **changes) -> str:
    """The query string with some parameters changed (None removes one), as
    QueryDict.urlencode writes it: a table's every sortable column has one, and a QueryDict's
    copy (a deep copy) cost more than the rest of its header."""
    query = dict(params.lists())
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = [value]
    encoding = params.encoding
    return "?" + "&".join(_pair(k, str(v), encoding) for k, values in query.items() for v in values)


# A pair longer than this is encoded each time, not kept: the cache's size stays bounded
# whatever strangers put in a query string.
_KEPT_PAIR = 200


def _pair(key: str, value: str, encoding: str) -> str:
    """`key=value` as urlencode writes a pair of bytes (quote_plus, nothing safe)."""
    if len(key) + len(value) > _KEPT_PAIR:
        return _encoded_pair(key, value, encoding)
    return _kept_pair(key, value, encoding)


def _encoded_pair(key: str, value: str, encoding: str) -> str:
    return f"{quote_plus(key.encode(encoding))}={quote_plus(value.encode(encoding))}"


# A page's sort and CSV links repeat its few parameters dozens of times (27 links on the
# student's page, 42 on a lab's): a kept pair makes a link 1.9 µs instead of urlencode's 4.4
# with no filter, 2.9 instead of 14.6 with four.
_kept_pair = lru_cache(maxsize=1024)(_encoded_pair)


def csv_cell(value, kind: str) -> str:
    if value is None or value == "":
        return ""
    if kind == MONEY:
        return str(to_cents(Decimal(value)))
    if kind == PERCENT:
        return str(Decimal(value).quantize(Decimal("0.1")))
    if isinstance(value, Before):
        return f"before {value.isoformat(timespec='minutes')}"
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="minutes")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def csv_response(table: Table, filename: str) -> HttpResponse:
    response, writer = csv_download(filename)
    writer.writerow([c.label for c in table.columns])
    for row in table.rows:
        writer.writerow(
            [
                csv_cell(value, column.kind)
                for value, column in zip(row.cells, table.columns, strict=True)
            ]
        )
    if table.footer is not None:
        writer.writerow(
            [
                csv_cell(value, column.kind)
                for value, column in zip(table.footer, table.columns, strict=True)
            ]
        )
    return response


def share_percent(part: Decimal, whole: Decimal) -> Decimal | None:
    if not whole:
        return None
    return part / whole * 100
