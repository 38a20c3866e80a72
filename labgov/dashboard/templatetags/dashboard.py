import datetime as dt
from decimal import Decimal
from html import escape

from django import template
from django.utils.safestring import mark_safe

from labgov.core.money import to_cents, usd_text
from labgov.core.templatetags.labgov import usd

register = template.Library()


@register.filter
def add_days(day: dt.date, n: int) -> dt.date:
    return day + dt.timedelta(days=int(n))


# A chart's text equivalent keeps at most about this many rows: a burn-down over a three-year
# grant has a point a day; its table shows every n-th day, the last, and every forecast point.
CHART_TABLE_ROWS = 31


@register.filter
def chart_table(spec: dict) -> dict:
    """A chart's figures as a table (its labels down, its series across), for people who
    cannot see the chart."""
    labels = spec.get("labels", [])
    datasets = spec.get("datasets", [])
    n = len(labels)
    step = max(1, -(-n // CHART_TABLE_ROWS))
    keep = set(range(0, n, step)) | ({n - 1} if n else set())
    sparse = [d for d in datasets if sum(v is not None for v in d["data"]) <= 3]
    keep |= {i for d in sparse for i, v in enumerate(d["data"]) if v is not None}
    return {
        "headers": [d.get("label", "") for d in datasets],
        "rows": [(labels[i], [d["data"][i] for d in datasets]) for i in sorted(keep)],
        "sampled": len(keep) < n,
    }


def _figure(value) -> str:
    """usd(value) for a chart's figure (money(): Decimal cents, or None), without usd's copy
    and checks for the Decimals: a month of days by category has ~140. Digits, $, −, commas,
    points and a dash: nothing to escape."""
    if type(value) is Decimal:
        return usd_text(to_cents(value))
    return escape(usd(value))


@register.simple_tag
def chart_table_html(table: dict, axis: str = "") -> str:
    """chart_table's head and body: built here rather than by template loops, which cost more
    than the page's queries for a month of days by category (every text is escaped)."""
    out = [f'<thead><tr><th scope="col">{escape(axis or "Day")}</th>']
    out.extend(f'<th scope="col" class="num">{escape(str(h))}</th>' for h in table["headers"])
    out.append("</tr></thead>\n    <tbody>")
    for label, values in table["rows"]:
        out.append(f'<tr><th scope="row">{escape(str(label))}</th>')
        out.extend(f'<td class="num">{_figure(v)}</td>' for v in values)
        out.append("</tr>")
    out.append("</tbody>")
    return mark_safe("".join(out))  # noqa: S308 - assembled from escaped parts only
