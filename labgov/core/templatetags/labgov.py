from decimal import Decimal

from django import template

from labgov.core.money import to_cents

register = template.Library()


@register.filter
def usd(amount) -> str:
    if amount is None or amount == "":
        return "–"
    value = to_cents(Decimal(amount))
    sign = "−" if value < 0 else ""
    return f"{sign}${abs(value):,.2f}"


@register.filter
def percent_of(part, whole) -> str:
    if not whole:
        return "–"
    return f"{Decimal(part) / Decimal(whole) * 100:.0f}%"
