import datetime as dt
from decimal import Decimal

from django.db import models


def _plain(value):
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def snapshot(obj: models.Model, fields: list[str] | None = None) -> dict:
    """A JSON-safe dict of an object's concrete fields, for before/after audit records."""
    names = fields or [f.attname for f in obj._meta.concrete_fields]
    return {name: _plain(getattr(obj, name)) for name in names}
