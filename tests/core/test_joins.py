"""Detail lookups join in the order written (labgov/core/joins.py) and leave the session's
planner settings as they found them, also when the statement fails."""

import pytest
from django.db import DatabaseError, connection, transaction
from django.http import Http404

from labgov.accounts import access
from labgov.alerts.models import Alert
from labgov.core.joins import joins_as_written, tables_joined

pytestmark = pytest.mark.usefixtures("postgres")


def _limit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW join_collapse_limit")
        return cursor.fetchone()[0]


def test_inside_the_tables_join_as_written_and_after_as_before(db):
    before = _limit()
    with joins_as_written(Alert.objects.select_related("lab", "resource__account", "owner")):
        assert _limit() == "1"
    with joins_as_written(Alert.objects.select_related("lab")):
        assert _limit() == before  # two tables: nothing to gain
    assert tables_joined(Alert.objects.select_related("lab", "resource__account")) == 4
    assert _limit() == before


def test_a_statement_that_fails_leaves_the_setting_as_it_was(db):
    before = _limit()
    with pytest.raises(DatabaseError), transaction.atomic():
        queryset = Alert.objects.select_related("lab", "resource__account", "owner")
        access.get_or_404(queryset.extra(where=["1 / 0 = 1"]), pk=1)  # noqa: S610
    assert _limit() == before  # the savepoint's rollback undid the SET


def test_a_session_setting_of_the_deployments_own_is_kept(db):
    with connection.cursor() as cursor:
        cursor.execute("SET join_collapse_limit = 5")
    try:
        with pytest.raises(Http404):
            queryset = Alert.objects.select_related("lab", "resource__account", "owner")
            access.get_or_404(queryset, pk=-1)
        assert _limit() == "5"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET join_collapse_limit")
