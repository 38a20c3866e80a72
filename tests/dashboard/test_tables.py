"""Dashboard tables: sorting, links that keep the filters, escaping, CSV cells."""

import datetime as dt
from decimal import Decimal

from django.http import QueryDict

from labgov.dashboard.tables import (
    DATE,
    MONEY,
    PERCENT,
    Column,
    Row,
    Table,
    csv_cell,
    query_with,
)


def _table():
    return Table(
        "t",
        "T",
        [Column("name", "Name"), Column("amount", "Amount", MONEY), Column("day", "Day", DATE)],
        [
            Row(["b", Decimal("2"), None]),
            Row(["Unattributed", Decimal("9"), None], pinned=True),
            Row(["a", Decimal("3"), dt.date(2026, 3, 1)]),
            Row(["C", Decimal("-1"), dt.date(2026, 2, 1)]),
        ],
        default_sort="-amount",
    )


def test_sorts_by_the_parameter_keeping_pinned_rows_last():
    table = _table().bind(QueryDict(""))
    assert [r.cells[0] for r in table.rows] == ["a", "b", "C", "Unattributed"]
    table = _table().bind(QueryDict("t_sort=name"))
    assert [r.cells[0] for r in table.rows] == ["a", "b", "C", "Unattributed"]
    table = _table().bind(QueryDict("t_sort=-name"))
    assert [r.cells[0] for r in table.rows] == ["C", "b", "a", "Unattributed"]
    # Empty cells go last in either direction.
    table = _table().bind(QueryDict("t_sort=day"))
    assert [r.cells[0] for r in table.rows] == ["C", "a", "b", "Unattributed"]


def test_unknown_sort_keeps_the_given_order():
    table = _table().bind(QueryDict("t_sort=evil"))
    assert table.sort == ""
    assert [r.cells[0] for r in table.rows] == ["b", "Unattributed", "a", "C"]


def test_links_keep_the_filters():
    table = _table().bind(QueryDict("start=2026-03-01&other_sort=x&t_sort=-amount"))
    amount = table.columns[1]
    assert amount.sort_state == "▼"
    assert amount.sort_url == "?start=2026-03-01&other_sort=x&t_sort=amount"
    assert table.csv_url == "?start=2026-03-01&other_sort=x&t_sort=-amount&format=csv&table=t"
    assert query_with(QueryDict("a=1&format=csv&table=t"), format=None, table=None) == "?a=1"


def test_cells_are_formatted_and_escaped():
    table = Table(
        "t",
        "T",
        [Column("name", "Name"), Column("amount", "Amount", MONEY)],
        [Row(["<script>alert(1)</script>", Decimal("-1234.565")], href="/x?a=1&b=2")],
    ).bind(QueryDict(""))
    html = str(table.body_html)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<a href="/x?a=1&amp;b=2">' in html
    assert '<td class="num over">−$1,234.56</td>' in html  # cents, half to even


def test_csv_cells():
    assert csv_cell(Decimal("2.675"), MONEY) == "2.68"
    assert csv_cell(Decimal("2.665"), MONEY) == "2.66"
    assert csv_cell(Decimal("33.333"), PERCENT) == "33.3"
    assert csv_cell(dt.date(2026, 3, 1), DATE) == "2026-03-01"
    assert csv_cell(None, MONEY) == ""
