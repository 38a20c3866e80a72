import datetime as dt

from django import template

register = template.Library()


@register.filter
def add_days(day: dt.date, n: int) -> dt.date:
    return day + dt.timedelta(days=int(n))
