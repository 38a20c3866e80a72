from decimal import Decimal

from django import template
from django.utils.html import format_html

from labgov.core.money import to_cents, usd_text

register = template.Library()


@register.filter
def usd(amount) -> str:
    if amount is None or amount == "":
        return "–"
    return usd_text(to_cents(Decimal(amount)))


@register.filter
def usd_signed(amount) -> str:
    """A difference in cents with its sign (+$1.00, −$1.00, $0.00)."""
    text = usd(amount)
    return f"+{text}" if text.startswith("$") and to_cents(Decimal(amount)) > 0 else text


@register.filter
def percent_of(part, whole) -> str:
    if not whole:
        return "–"
    return f"{Decimal(part) / Decimal(whole) * 100:.0f}%"


@register.filter
def usd_exact(amount) -> str:
    """Every digit stored (at least cents), for exact sums and rounding differences."""
    if amount is None or amount == "":
        return "–"
    value = Decimal(amount).normalize()
    if value.as_tuple().exponent > -2:
        value = value.quantize(Decimal("0.01"))
    sign = "−" if value < 0 else ""
    return f"{sign}${abs(value):,f}"


@register.filter
def usd_cents(amount) -> str:
    """Cents to read, every stored digit on hover: for figures summed from Runpod's records,
    which carry fractions of a cent."""
    if amount is None or amount == "":
        return "–"
    return format_html('<span title="{}">{}</span>', usd_exact(amount), usd(amount))


@register.filter
def plain_number(value) -> str:
    """A Decimal without trailing zeros nor exponent (3, 0.69, 10)."""
    if value is None or value == "":
        return ""
    return f"{Decimal(value).normalize():f}"
