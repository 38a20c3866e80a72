import datetime as dt
import sys

import pytest
from django.db import connection
from django.db.models import Q

from labgov.accounts.models import Membership, Role, User
from labgov.core.compiled import CompiledValues
from labgov.dashboard.selectors.common import DailySums
from tests.factories import InstitutionFactory, LabFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
SINCE = dt.date(2026, 1, 1)


def _roles(user_id: int, day: dt.date):
    return (
        Membership.objects.filter(user_id=user_id)
        .active(day)
        .order_by("pk")
        .values_list("role", "lab_id", "end_date")
    )


def test_rows_are_the_querysets_for_every_value_and_the_sql_is_built_once():
    lab = LabFactory()
    ada, bob = UserFactory(), UserFactory()
    MembershipFactory(
        user=ada, institution=lab.institution, lab=lab, role=Role.LAB_ADMIN, start_date=SINCE
    )
    MembershipFactory(
        user=ada,
        institution=lab.institution,
        lab=LabFactory(institution=lab.institution),
        role=Role.MEMBER,
        start_date=SINCE,
        end_date=dt.date(2026, 6, 30),
    )
    MembershipFactory(
        user=bob, institution=lab.institution, lab=lab, role=Role.MEMBER, start_date=SINCE
    )
    built = []

    def build(**values):
        built.append(values)
        return _roles(**values)

    compiled = CompiledValues(build)
    for user, day in [(ada, dt.date(2026, 6, 30)), (ada, dt.date(2026, 7, 1)), (bob, None)]:
        day = day or dt.date(2026, 7, 1)
        assert compiled.rows(user_id=user.pk, day=day) == list(_roles(user.pk, day))
    assert compiled.rows(user_id=ada.pk, day=dt.date(2026, 6, 30)) != compiled.rows(
        user_id=ada.pk, day=dt.date(2026, 7, 1)
    )
    if connection.vendor == "postgresql":
        # Once, with stand-ins: the later calls only run its SQL.
        assert len(built) == 2  # twice with stand-ins, to tell values from constants
        assert all(b["user_id"] < 0 and b["day"].year == 1 for b in built)


def test_a_value_that_is_no_parameter_of_the_sql_falls_back_to_the_queryset():
    user = UserFactory()

    def build(user_id: int, day: dt.date):
        # `day` never reaches the SQL: there is no slot to put it in.
        return Membership.objects.filter(user_id=user_id).values_list("role")

    compiled = CompiledValues(build)
    assert compiled.rows(user_id=user.pk, day=dt.date(2026, 7, 1)) == []
    MembershipFactory(
        user=user, role=Role.FINANCE, lab=None, institution=InstitutionFactory(), start_date=SINCE
    )
    assert compiled.rows(user_id=user.pk, day=dt.date(2026, 7, 1)) == [(Role.FINANCE,)]


def test_a_parameter_derived_from_a_value_falls_back_to_the_queryset():
    """`day + 1` compiled once would be the first compilation's constant: the stand-in's
    next day, for every later call."""
    lab = LabFactory()
    user = UserFactory()
    MembershipFactory(
        user=user,
        institution=lab.institution,
        lab=lab,
        role=Role.MEMBER,
        start_date=SINCE,
        end_date=dt.date(2026, 6, 30),
    )
    built = []

    def build(user_id: int, day: dt.date):
        built.append(day)
        # Memberships begun by `day` that still grant access the day after.
        return Membership.objects.filter(
            Q(end_date__isnull=True) | Q(end_date__gte=day + dt.timedelta(days=1)),
            user_id=user_id,
            start_date__lte=day,
        ).values_list("role")

    compiled = CompiledValues(build)
    assert compiled.rows(user_id=user.pk, day=dt.date(2026, 6, 29)) == [(Role.MEMBER,)]
    assert compiled.rows(user_id=user.pk, day=dt.date(2026, 6, 30)) == []
    if connection.vendor == "postgresql":
        # Compiled twice with stand-ins, refused, then built for each real value.
        assert [d.year for d in built[:2]] == [1, 1]
        assert built[2:] == [dt.date(2026, 6, 29), dt.date(2026, 6, 30)]


def test_only_ids_and_dates_have_stand_ins(postgres):
    # Compiled on PostgreSQL only: elsewhere every call builds the queryset, stand-ins unused.
    with pytest.raises(TypeError):
        CompiledValues(lambda flag: Membership.objects.values_list("pk")).rows(flag=True)


def test_the_pages_compiled_queries_all_compile(postgres, world, client_for):
    """A page's query that stopped compiling (its build now derives a value, or its shape
    depends on one) still answers rightly, built each time: this says so instead of a
    slower page nobody notices."""

    pages = [
        (world.member, "/spend/me/"),
        (world.lab_admin, f"/spend/labs/{world.lab.pk}/"),
        (world.finance, "/spend/institution/"),
    ]
    for user, url in pages:
        assert client_for(user).get(url).status_code == 200
    # The module-level queries of labgov's modules (a DailySums holds its own).
    queries = []
    for name, module in list(sys.modules.items()):
        if name.startswith("labgov."):
            for value in vars(module).values():
                value = getattr(value, "_query", value) if type(value) is DailySums else value
                if type(value) is CompiledValues:
                    queries.append(value)
    tried = {(o, key): sql for o in queries for key, sql in o._compiled.items()}
    assert len({o for o, _ in tried}) >= 10, "the pages read their compiled queries"
    if connection.vendor == "postgresql":
        refused = [o.build.__qualname__ for (o, _), sql in tried.items() if sql is None]
        assert refused == []


def test_any_of_selects_what_in_does_and_compiles_once_for_every_number_of_ids():
    users = [UserFactory() for _ in range(3)]
    ids = [u.pk for u in users]
    built = []

    def build(ids):
        built.append(ids)
        return User.objects.filter(pk__any_of=ids).order_by("pk").values_list("pk")

    compiled = CompiledValues(build)
    for chosen in ([], [ids[1]], ids, {ids[0], ids[2]}, (ids[2], ids[2])):
        expected = sorted(set(chosen))
        assert compiled.rows(ids=chosen) == [(pk,) for pk in expected]
        queryset = User.objects.filter(pk__in=chosen).order_by("pk")
        assert list(queryset.values_list("pk")) == [(pk,) for pk in expected]
    if connection.vendor == "postgresql":
        assert len(built) == 2  # the stand-ins' two compilations, then only its SQL
        (sql, _, _) = compiled._compiled["default:ids"]
        assert "= ANY(%s)" in sql


def test_compiled_queries_are_prepared_once_per_connection_and_still_counted(postgres):
    from django.test.utils import CaptureQueriesContext

    user = UserFactory()
    compiled = CompiledValues(lambda user_id: User.objects.filter(pk=user_id).values_list("pk"))

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall()]

    before = prepared()
    with CaptureQueriesContext(connection) as queries:
        assert compiled.rows(user_id=user.pk) == [(user.pk,)]
        assert compiled.rows(user_id=user.pk + 1) == []
    assert len(queries) == 2  # counted as any query (the pages' pinned counts)
    assert all('FROM "accounts_user"' in q["sql"] for q in queries.captured_queries)  # logged
    new = [sql for sql in prepared() if sql not in before]
    assert len(new) == 1 and '"accounts_user"."id" = $1' in new[0]  # one statement, two runs


def test_compiled_queries_run_unprepared_when_prepared_statements_are_off(postgres):
    user = UserFactory()
    compiled = CompiledValues(lambda user_id: User.objects.filter(pk=user_id).values_list("pk"))
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = None  # DATABASE_PREPARED=0
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            (before,) = cursor.fetchone()
            assert compiled.rows(user_id=user.pk) == [(user.pk,)]
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            assert cursor.fetchone() == (before,)
    finally:
        connection.connection.prepare_threshold = threshold


def test_a_query_over_a_range_of_days_is_planned_for_its_days(postgres):
    """Not prepared: a generic plan, the same for any range, reads more rollups than one
    made for the dates given."""
    user = UserFactory()
    compiled = CompiledValues(_roles)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        (before,) = cursor.fetchone()
        assert compiled.rows(user_id=user.pk, day=SINCE) == []
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (before,)


def test_a_dated_query_of_few_rows_may_be_kept_prepared(postgres):
    """prepared=True: a person's own rollups, few rows whatever the range, planned once."""
    user = UserFactory()
    compiled = CompiledValues(_roles, prepared=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        (before,) = cursor.fetchone()
        assert compiled.rows(user_id=user.pk, day=SINCE) == []
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (before + 1,)


def test_the_student_pages_sums_are_prepared_and_the_lab_pages_sums_of_days_are_not():
    """Which of the pages' sums over a range of days PostgreSQL keeps prepared: a lab's daily
    rollups (thousands of rows, which a generic plan sorts by their text category at up to
    4x the CPU) are planned for their dates; a person's own, and the rollups by lab, are not."""
    from labgov.dashboard.selectors import lab, student

    assert student._BURNS._query.prepared is True
    assert student._LAB_BY_DAY._query.prepared is True
    assert student._MINE_BY_DAY._query.prepared is True
    assert lab._IN_PERIOD._query.prepared is False
    assert lab._BURNS._query.prepared is False


def test_only_the_compiled_queries_are_prepared_not_other_queries_bound_on_the_server(postgres):
    """The sync and the FOCUS import send their bodies through psycopg's own cursor (bound on
    the server): run as often as a sync runs them, they stay unprepared."""
    import psycopg

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        (before,) = cursor.fetchone()
    with psycopg.Cursor(connection.connection) as raw:
        for n in range(50):
            raw.execute("SELECT %(n)s::int + 1", {"n": n})
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (before,)


def test_timestamps_read_by_psycopgs_own_loader_are_djangos_utc_datetimes(postgres, monkeypatch):
    """From its second run, a compiled query with timestamptz columns reads them with
    psycopg's C loader, not Django's Python one: the same UTC-aware datetimes (and None, and
    the extremes), for the prepared and the dated path alike."""
    from psycopg.types.datetime import TimestamptzLoader

    from labgov.core import compiled as compiled_module

    when = [
        dt.datetime(2026, 3, 1, 0, 30, 15, 123456, tzinfo=dt.UTC),
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        None,
    ]
    users = [UserFactory(last_login=at) for at in when]
    ids = [u.pk for u in users]
    by_id = CompiledValues(
        lambda ids: User.objects.filter(pk__any_of=ids).order_by("pk").values_list("last_login")
    )
    by_day = CompiledValues(
        lambda ids, day: (
            User.objects.filter(pk__any_of=ids, date_joined__date__lte=day)
            .order_by("pk")
            .values_list("last_login")
        )
    )
    loaders = []
    fast = compiled_module._fast_timestamps

    def seen(cursor):
        fast(cursor)
        loaders.append(cursor.adapters.get_loader(1184, 0))

    monkeypatch.setattr(compiled_module, "_fast_timestamps", seen)
    for _ in range(3):
        assert by_id.rows(ids=ids) == [(at,) for at in when]
        assert by_day.rows(ids=ids, day=dt.date(9999, 1, 1)) == [(at,) for at in when]
    rows = by_id.rows(ids=ids)
    assert all(at is None or at.tzinfo is dt.UTC for (at,) in rows)
    # The first run of each found its timestamps; the five after them read them in C.
    assert len(loaders) == 5
    # psycopg's own class, which it swaps for its C one where it has it (psycopg[binary]).
    import psycopg

    own = "psycopg_binary" if psycopg.pq.__impl__ == "binary" else TimestamptzLoader.__module__
    assert {loader.__module__.split(".")[0] for loader in loaders} == {own.split(".")[0]}
    # Django's own cursors keep Django's loader (its time zone check reads it).
    with connection.cursor() as cursor:
        assert hasattr(cursor.cursor.adapters.get_loader(1184, 0), "timezone")


def test_a_session_not_in_utc_keeps_djangos_timestamp_loader(postgres, monkeypatch):
    from labgov.core import compiled as compiled_module

    user = UserFactory(last_login=dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC))
    query = CompiledValues(lambda pk: User.objects.filter(pk=pk).values_list("last_login"))
    assert query.rows(pk=user.pk) == [(user.last_login,)]
    assert compiled_module._utc_session(connection)
    monkeypatch.setattr(connection, "timezone_name", "Europe/Paris")  # a cached property
    assert not compiled_module._utc_session(connection)
    used = []
    monkeypatch.setattr(compiled_module, "_fast_timestamps", used.append)
    assert query.rows(pk=user.pk) == [(user.last_login,)]
    assert used == []
