"""Dashboard tables: sorting, links that keep the filters, escaping, CSV cells."""

import datetime as dt
from decimal import Decimal

import pytest
from django.http import QueryDict
from hypothesis import given, settings
from hypothesis import strategies as st

from labgov.dashboard.tables import (
    DATE,
    MONEY,
    NUMBER,
    PERCENT,
    TEXT,
    Column,
    Row,
    Table,
    csv_cell,
    query_with,
)
from labgov.dashboard.templatetags.dashboard import chart_table_html


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


def test_head_body_and_foot_show_every_kind_of_cell():
    table = Table(
        "t",
        "T",
        [
            Column("name", "Name <1>"),
            Column("n", "N", NUMBER),
            Column("share", "Share", PERCENT),
            Column("day", "Day", DATE),
            Column("amount", "Amount", MONEY, sortable=False),
        ],
        [
            Row(["a&b", 3, Decimal("12.345"), dt.date(2026, 3, 1), Decimal(0)]),
            Row(["c", "7", None, dt.datetime(2026, 3, 1, 13, 5, tzinfo=dt.UTC), None]),
            Row(["Unattributed", None, "", None, Decimal("0.004")], pinned=True),
        ],
        footer=["Total", "", None, None, Decimal("-0.5")],
        default_sort="name",
    ).bind(QueryDict("start=2026-03-01"))
    assert str(table.body_html) == (
        '<tr><td>a&amp;b</td><td class="num">3</td><td class="num">12.3%</td>'
        '<td>2026-03-01</td><td class="num">$0.00</td></tr>\n'
        '<tr><td>c</td><td class="num">7</td><td class="num"></td><td>2026-03-01 13:05</td>'
        '<td class="num"></td></tr>\n'
        '<tr class="pinned"><td>Unattributed</td><td class="num"></td><td class="num"></td>'
        '<td></td><td class="num">$0.00</td></tr>\n'
    )
    assert str(table.head_html) == (
        '<thead><tr><th><a href="?start=2026-03-01&amp;t_sort=-name" '
        'hx-get="?start=2026-03-01&amp;t_sort=-name" hx-target="#dash-body" '
        'hx-swap="outerHTML" hx-push-url="true">Name &lt;1&gt;</a> <span class="sort">▲</span>'
        '</th><th class="num"><a href="?start=2026-03-01&amp;t_sort=-n" '
        'hx-get="?start=2026-03-01&amp;t_sort=-n" hx-target="#dash-body" hx-swap="outerHTML" '
        'hx-push-url="true">N</a></th><th class="num">'
        '<a href="?start=2026-03-01&amp;t_sort=-share" '
        'hx-get="?start=2026-03-01&amp;t_sort=-share" hx-target="#dash-body" '
        'hx-swap="outerHTML" hx-push-url="true">Share</a></th><th><a '
        'href="?start=2026-03-01&amp;t_sort=day" hx-get="?start=2026-03-01&amp;t_sort=day" '
        'hx-target="#dash-body" hx-swap="outerHTML" hx-push-url="true">Day</a></th>'
        '<th class="num">Amount</th></tr></thead>'
    )
    assert str(table.foot_html) == (
        '<tfoot><tr><th>Total</th><th class="num"></th><th class="num"></th><th></th>'
        '<th class="num over">−$0.50</th></tr></tfoot>'
    )


def test_a_row_of_the_wrong_length_is_refused():
    table = Table("t", "T", [Column("name", "Name")], [Row(["a", "b"])])
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        table.bind(QueryDict(""))


def test_a_chart_table_is_escaped_and_in_dollars():
    html = chart_table_html(
        {"headers": ["<lab>"], "rows": [("2026-03-01", [Decimal("1234.5")]), ("x&y", [None])]},
        "",
    )
    assert html == (
        '<thead><tr><th scope="col">Day</th><th scope="col" class="num">&lt;lab&gt;</th></tr>'
        '</thead>\n    <tbody><tr><th scope="row">2026-03-01</th><td class="num">$1,234.50</td>'
        '</tr><tr><th scope="row">x&amp;y</th><td class="num">–</td></tr></tbody>'
    )


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.decimals(
            allow_nan=False, allow_infinity=False, places=10, max_value=10**12, min_value=-(10**12)
        ),
        st.decimals(
            allow_nan=False, allow_infinity=False, places=2, max_value=10**9, min_value=-(10**9)
        ),
    )
)
def test_a_chart_figure_is_what_usd_gives_escaped(value):
    """chart_table_html's own formatting of its figures is usd's, escaped, for any amount
    (negative zero and halves of a cent included)."""
    from html import escape

    from labgov.core.templatetags.labgov import usd
    from labgov.dashboard.templatetags.dashboard import _figure

    assert _figure(value) == escape(usd(value))
    for edge in ("-0.00", "-0.004", "0.005", "0.015", "-0.025"):
        assert _figure(Decimal(edge)) == escape(usd(Decimal(edge)))


_AMOUNTS = st.one_of(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=10, max_value=10**12, min_value=-(10**12)
    ),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=2, max_value=10**9, min_value=-(10**9)
    ),
    st.sampled_from(["-0", "-0.004", "-0.005", "0.005", "999.995", "-999.995", "1E+3", "1E+5"]).map(
        Decimal
    ),
)


def _usd_as_format_writes_it(amount: Decimal) -> str:
    """The oracle: format's own thousands and cents, from the amount rounded half-even."""
    cents = amount.quantize(Decimal("0.01"), rounding="ROUND_HALF_EVEN")
    return f"{'−' if cents < 0 else ''}${abs(cents):,.2f}"


@settings(max_examples=300, deadline=None)
@given(_AMOUNTS)
def test_money_is_written_as_format_writes_it(amount):
    """usd, the tables' money cells and dollars (str below a thousand) write what format's
    ",.2f" writes, for any amount: the thousands, the half-even cent, a minus only when it
    rounds to a cent or more, the cell marked "over" when the amount is below zero."""
    from labgov.core.money import dollars, to_cents
    from labgov.core.templatetags.labgov import usd
    from labgov.dashboard.tables import _money_html

    text = _usd_as_format_writes_it(amount)
    assert usd(amount) == text
    css = "num over" if amount < 0 else "num"
    assert _money_html(amount, None) == f'<td class="{css}">{text}</td>'
    assert dollars(abs(to_cents(amount))) == f"{abs(to_cents(amount)):,.2f}"


# What a query string can hold, with the characters quoting treats apart made likely.
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(" /&=+%?#;~.-_*'!é€\u00a0\t\n"),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_TEXT, _TEXT), max_size=6),
    st.dictionaries(_TEXT, st.one_of(st.none(), _TEXT, st.integers()), max_size=3),
    st.integers(min_value=0, max_value=300),
)
def test_query_with_writes_what_querydict_writes(pairs, changes, pad):
    """Whatever strangers put in the query string (spaces, &, =, +, %, any script, a pair too
    long to keep): the links say what Django's own QueryDict.urlencode says."""
    params = QueryDict(mutable=True)
    for key, value in pairs:
        params.appendlist(key, value)
    params.appendlist("pad", "x" * pad)
    expected = params.copy()
    for key, value in changes.items():
        if value is None:
            expected.pop(key, None)
        else:
            expected.setlist(key, [str(value)])
    for _ in range(2):  # the second time from the kept pairs
        assert query_with(params, **changes) == "?" + expected.urlencode()


def test_text_and_date_cells_are_what_the_general_cell_gives():
    """rows_html's own cells for text and date columns give what _other_html (display, then
    escape) gives, for every kind of value such a column may hold."""
    from labgov.dashboard.tables import _CELL_HTML, _other_html
    from labgov.runpod.history import Before

    moment = dt.datetime(2026, 3, 1, 23, 30, 59, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    values = [
        None,
        "",
        "plain",
        "<b>\"a\" & 'b'</b>",
        "é€",
        7,
        Decimal("1.5"),
        dt.date(2026, 2, 28),
        moment,
        moment.replace(tzinfo=None),
        dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
        Before.of(moment),
    ]
    for kind in (TEXT, DATE):
        column = Column("c", "C", kind)
        for value in values:
            assert _CELL_HTML[kind](value, column) == _other_html(value, column), (kind, value)


def test_a_tables_section_is_what_its_template_gave():
    """Table.html is what the pages' included template (dashboard/table.html, below) gave,
    to the byte, for tables with and without rows, note and footer, with text to escape."""
    from django.template import engines

    _TABLE_TEMPLATE = engines["django"].from_string(_TABLE_HTML)
    from django.utils.safestring import mark_safe

    money = Column("amount", "Amount <$>", MONEY)
    tables = [
        Table(
            "people",
            "Spend by person",
            [Column("who", "Who"), money],
            [Row(['<b>"Ada" & co</b>', Decimal("1234.5")])],
            footer=["Total", Decimal(1)],
        ),
        Table("empty", "Nothing & none", [Column("who", "Who")], [], empty="None <yet>."),
        Table("noted", "Noted", [Column("who", "Who")], [Row(["x"])], note="A note & <more>"),
        Table(
            "safe",
            "Safe",
            [Column("who", "Who")],
            [Row(["x"])],
            note=mark_safe('See <a href="/x/">x</a>.'),
        ),
    ]
    for table in tables:
        table.bind(QueryDict("start=2026-01-01&q=<a&b>"))
        assert table.html == _TABLE_TEMPLATE.render({"table": table})


# The template the pages included before Table.html.
_TABLE_HTML = """<section class="dash-table" id="table-{{ table.name }}">
  <div class="section-head">
    <h2>{{ table.title }}</h2>
    <a class="csv" href="{{ table.csv_url }}" download>Download CSV</a>
  </div>
  {% if table.note %}<p class="note">{{ table.note }}</p>{% endif %}
  {% if table.rows %}
  <div class="scroll">
  <table>
    {{ table.head_html }}
    <tbody>
    {{ table.body_html }}
    </tbody>
    {{ table.foot_html }}
  </table>
  </div>
  {% else %}
  <p class="empty">{{ table.empty }}</p>
  {% endif %}
</section>
"""
