import datetime as dt

from django import template

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
