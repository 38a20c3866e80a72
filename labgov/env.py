"""Typed readers for environment variables.

Each helper fails loudly (ImproperlyConfigured naming the variable) on a value it cannot
parse, so a typo in production stops the process at start instead of running misconfigured.
"""

import os
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name}={parsed} must be at least {minimum}")
    return parsed


def env_decimal(name: str, default: str) -> Decimal:
    value = os.environ.get(name, default)
    try:
        return Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name}={value!r} is not a decimal number") from None


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]
