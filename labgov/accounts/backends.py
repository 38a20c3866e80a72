"""Password sign-in: Django's ModelBackend, whose lookup of the signed-in person on every
request reads a query compiled once per process (labgov/core/compiled.py) instead of
building `User.objects.get(pk=…)` each time (a sixth of a small page's Python)."""

from django.contrib.auth.backends import ModelBackend
from django.db import DEFAULT_DB_ALIAS

from labgov.accounts.models import User
from labgov.core.compiled import CompiledValues

_COLUMNS = [f.attname for f in User._meta.concrete_fields]
_USER = CompiledValues(lambda pk: User.objects.filter(pk=pk).values_list(*_COLUMNS))
_MAX_ID = 2**63 - 1  # a bigint's


def active_user(user_id) -> User | None:
    """The person with this id, as `User.objects.get` loads them (every column), if active."""
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        user = User.objects.filter(pk=user_id).first()
    else:
        rows = _USER.rows(pk=user_id) if abs(user_id) <= _MAX_ID else []
        user = User.from_db(DEFAULT_DB_ALIAS, _COLUMNS, rows[0]) if rows else None
    return user if user is not None and user.is_active else None


class PasswordBackend(ModelBackend):
    def get_user(self, user_id):
        return active_user(user_id)
