import copy
import gc
import os
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client as DjangoClient

from labgov.accounts.models import Institution, Lab, Role, User
from labgov.funding.models import Allocation, FundingSource
from tests import fixtures_db
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    InstitutionFactory,
    LabFactory,
    MembershipFactory,
    UserFactory,
)

pytest_plugins = [
    "tests.fixtures_sim",
    "tests.fixtures_browser",
    "tests.fixtures_worker",
    "tests.fixtures_static",
]

REQUIRE_SERVICES = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@dataclass
class World:
    """One institution with two labs and a person in every role, plus an outsider who is
    institution admin somewhere else."""

    institution: Institution
    lab: Lab
    other_lab: Lab
    inst_admin: User
    finance: User
    lab_admin: User
    member: User
    other_member: User
    outsider: User
    funding_source: FundingSource
    allocation: Allocation
    other_funding_source: FundingSource


def _build_world() -> World:
    institution = InstitutionFactory(name="Northfield", slug="northfield-test")
    lab = LabFactory(institution=institution, name="Vision", slug="vision")
    other_lab = LabFactory(institution=institution, name="NLP", slug="nlp")
    inst_admin = MembershipFactory(
        role=Role.INSTITUTION_ADMIN, lab=None, institution=institution
    ).user
    finance = MembershipFactory(role=Role.FINANCE, lab=None, institution=institution).user
    lab_admin = MembershipFactory(role=Role.LAB_ADMIN, lab=lab).user
    member = MembershipFactory(role=Role.MEMBER, lab=lab).user
    other_member = MembershipFactory(role=Role.MEMBER, lab=other_lab).user
    elsewhere = InstitutionFactory(name="Elsewhere", slug="elsewhere")
    outsider = MembershipFactory(role=Role.INSTITUTION_ADMIN, lab=None, institution=elsewhere).user
    funding_source = FundingSourceFactory(lab=lab)
    allocation = AllocationFactory(funding_source=funding_source, user=member)
    other_funding_source = FundingSourceFactory(lab=other_lab)
    return World(
        institution=institution,
        lab=lab,
        other_lab=other_lab,
        inst_admin=inst_admin,
        finance=finance,
        lab_admin=lab_admin,
        member=member,
        other_member=other_member,
        outsider=outsider,
        funding_source=funding_source,
        allocation=allocation,
        other_funding_source=other_funding_source,
    )


_WORLD_IDS: dict[str, int] = {}


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Create the standing world once per test database: each test runs in a transaction
    rolled back at its end, so it sees the world as built and cannot change it for others."""
    with django_db_blocker.unblock():
        _drop_billing_months()
        _remember(_build_world())


def _drop_billing_months() -> None:
    """The test database starts with no month of billing on PostgreSQL: the months migration
    runpod 0009 made around the day it ran would let a test pass on that day only. Every
    writer makes the months it writes (labgov.runpod.partitions), in the test's transaction."""
    from labgov.runpod import partitions

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relispartition "
            "AND relname LIKE %s",
            [f"{partitions.PARENT}\\_p%"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP TABLE "{name}"')
    partitions.forget()


def _remember(built: World) -> None:
    _WORLD_IDS.update({name: getattr(built, name).pk for name in World.__dataclass_fields__})
    # A world built again may get the same ids (a flush that reset the sequences), never the
    # same rows: the copies the world fixture hands out are loaded anew.
    _WORLD_LOADED.clear()


@pytest.fixture(autouse=True)
def _empty_cache():
    """Every test starts with an empty cache: its database changes roll back, the cache would
    keep pages (and the data version) computed from them."""
    from django.core.cache import caches

    for cache in caches.all():
        cache.clear()


def _transactional(item) -> bool:
    """Whether pytest-django runs the test as a TransactionTestCase (flushing the database at
    its end): the same rules as its _django_db_helper."""
    marker = item.get_closest_marker("django_db")
    kwargs = marker.kwargs if marker else {}
    names = set(getattr(item, "fixturenames", ()))
    return bool(
        kwargs.get("transaction")
        or kwargs.get("reset_sequences")
        or names & {"transactional_db", "live_server", "django_db_reset_sequences"}
    )


def _emptying_sql(original):
    """PostgreSQL's flush, as a transactional test ends: DELETE instead of TRUNCATE.

    Django truncates every table in one statement, which on PostgreSQL makes new files for
    each of the ~60 tables and their indexes: about a second per transactional test. A test
    leaves a few rows, which DELETE removes in milliseconds. The session's replication role
    turns triggers off for the flush's transaction only (SET LOCAL): the foreign keys' (every
    table is emptied, so the order does not matter) and the append-only tables' (which allow
    TRUNCATE and refuse DELETE), so the database ends as TRUNCATE leaves it. It takes a
    superuser, as the machine's PostgreSQL gives; any other role gets Django's TRUNCATE."""

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or not _superuser(self.connection):
            return original(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = " ".join(
            f"DELETE FROM {self.quote_name(table)};" for table in tables if table not in KEPT
        )
        self.connection.labgov_flush_kept = KEPT
        return [f"SET LOCAL session_replication_role = replica; {deletes}"]

    return sql_flush


def _post_flush_signal(original):
    """The post_migrate signal a flush sends, without Django's receivers making the content
    types and permissions again when the flush kept them (the DELETE flush above, KEPT):
    they would find every one there, after comparing each app's models with the rows, about
    a tenth of a second of one core per transactional test. labgov's receivers still run."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.db import connections
    from django.db.models.signals import post_migrate

    def emit(verbosity, interactive, db, **kwargs):
        connection = connections[db]
        if getattr(connection, "labgov_flush_kept", None) != KEPT:
            return original(verbosity, interactive, db, **kwargs)
        connection.labgov_flush_kept = None
        post_migrate.disconnect(create_permissions, dispatch_uid=PERMISSIONS_UID)
        post_migrate.disconnect(create_contenttypes)
        try:
            return original(verbosity, interactive, db, **kwargs)
        finally:
            post_migrate.connect(create_contenttypes)
            post_migrate.connect(create_permissions, dispatch_uid=PERMISSIONS_UID)

    return emit


PERMISSIONS_UID = "django.contrib.auth.management.create_permissions"  # auth's AppConfig.ready


# What the post_migrate signal after a flush would make again, just as it was: kept, it finds
# them all there (a few queries instead of ~0.3 s of inserts), with the same ids as before.
KEPT = {"django_content_type", "auth_permission"}


def _superuser(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser')")
        return cursor.fetchone()[0] == "on"


def pytest_configure(config):
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations

    DatabaseOperations.sql_flush = _emptying_sql(DatabaseOperations.sql_flush)
    flush.emit_post_migrate_signal = _post_flush_signal(flush.emit_post_migrate_signal)
    fixtures_db.install()  # test databases cloned from one migrated template


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A transactional test's flush empties the database: build the standing world again at
    once, committed, so the tests after it find it as django_db_setup left it (built inside
    each of their rolled-back transactions instead, it would be built again for every one,
    and its writes' after-commit callbacks would be pending in the test's transaction)."""
    yield
    # After the last test the session's teardown has destroyed the test database already.
    if nextitem is not None and _WORLD_IDS and _transactional(item):
        from pytest_django.plugin import blocking_manager_key

        with item.config.stash[blocking_manager_key].unblock():
            if not Institution.objects.filter(pk=_WORLD_IDS["institution"]).exists():
                _remember(_build_world())


@pytest.fixture
def world(db) -> World:
    """The standing world, loaded fresh for each test (built again, inside the test, if
    something other than a transactional test's flush removed it)."""
    if not _WORLD_IDS or not Institution.objects.filter(pk=_WORLD_IDS["institution"]).exists():
        built = _build_world()
        _remember(built)
        return built
    # Loaded once per built world (one query per model), then copied for each test as
    # Django's setUpTestData copies its objects: every test pays for this, and the rows
    # cannot differ from what was loaded, since a test's writes roll back and a committed
    # change (a transactional test, a module's committed fixture) ends in a flush, after
    # which the world is built again with new ids.
    key = tuple(sorted(_WORLD_IDS.items()))
    if key not in _WORLD_LOADED:
        by_model: dict[type, list[str]] = {}
        for name in _WORLD_IDS:
            by_model.setdefault(WORLD_TYPES[name], []).append(name)
        loaded = {}
        for model, names in by_model.items():
            objects = model.objects.in_bulk([_WORLD_IDS[name] for name in names])
            loaded.update({name: objects[_WORLD_IDS[name]] for name in names})
        _WORLD_LOADED.clear()
        _WORLD_LOADED[key] = loaded
    return World(**copy.deepcopy(_WORLD_LOADED[key]))


_WORLD_LOADED: dict[tuple, dict] = {}  # the standing world's objects, by its ids


WORLD_TYPES = {
    "institution": Institution,
    "lab": Lab,
    "other_lab": Lab,
    "inst_admin": User,
    "finance": User,
    "lab_admin": User,
    "member": User,
    "other_member": User,
    "outsider": User,
    "funding_source": FundingSource,
    "allocation": Allocation,
    "other_funding_source": FundingSource,
}


class Client(DjangoClient):
    """Django's test client, whose force_login writes the session a login leaves (the user,
    the backend, the password's hash) in one INSERT. Django's own, on a client with no session
    yet, saves an empty session, finds it empty and starts another, checks the new key is
    free, then runs login()'s signal (last_login, axes' access log): 18 queries (3 here), a fifth
    of a short permission test. What logging in does is tested through the login form
    (tests/core/test_login_throttling.py, tests/accounts/); the session a test gets is the
    same."""

    def _login(self, user, backend=None):
        if self.cookies.get(settings.SESSION_COOKIE_NAME):
            return super()._login(user, backend)
        from importlib import import_module

        from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
        from django.contrib.sessions.backends.base import VALID_KEY_CHARS
        from django.http import HttpRequest
        from django.utils.crypto import get_random_string

        session = import_module(settings.SESSION_ENGINE).SessionStore()
        session[SESSION_KEY] = user._meta.pk.value_to_string(user)
        session[BACKEND_SESSION_KEY] = backend
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session._session_key = get_random_string(32, VALID_KEY_CHARS)
        session.save(must_create=True)
        request = HttpRequest()
        request.session = session
        self._set_login_cookies(request)


@pytest.fixture
def client() -> Client:
    return Client()


@pytest.fixture
def client_for(client):
    """Log the test client in as a user (or out, with None)."""

    def login(user):
        # Log out only a client holding a session: logging out a fresh one writes a session
        # just to delete it (eight queries, a tenth of a short permission test).
        session = client.cookies.get(settings.SESSION_COOKIE_NAME)
        if session is not None and session.value:
            client.logout()
        if user is not None:
            client.force_login(user)
        return client

    return login


@pytest.fixture
def postgres(db):
    if connection.vendor != "postgresql":
        if REQUIRE_SERVICES:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("needs PostgreSQL (run the suite with DATABASE_URL pointing at it)")


__all__ = ["UserFactory"]


def pytest_sessionfinish(session, exitstatus):
    # A run that executed no test is a failure, not a success: catch a broken collection.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or getattr(session.config, "workerinput", None) is not None:
        return
    passed = len(reporter.stats.get("passed", []))
    if passed == 0 and exitstatus == 0:
        session.exitstatus = 1


# Tests taking seconds each, longest first (measured with --durations), then the rest of the
# browser, Celery worker and deploy tests. They run first, dealt out to the workers (_dealt
# below): with xdist's work stealing (scripts/test: --dist worksteal) the workers take the
# short tests after them, and the run ends on short tests instead of waiting on a long one
# that happened to start last.
SLOW_FIRST = (
    "tests/core/test_a11y_browser.py",
    "tests/deploy/test_deploy_smoke.py",
    "tests/test_fuzz.py",
    "tests/core/test_static_manifest.py",
    "tests/api/test_conformance.py",
    "tests/exports/test_focus_validator.py",
    "tests/runpod/test_partitions.py::test_the_migration_goes_back",
    "tests/runpod/test_sync_deadlock.py",
    "tests/runpod/test_sync_windows_property.py",
    "tests/runpod/test_focus_writers.py::test_the_import_tests_pass_on_sqlite",
)
SLOW_MARKERS = ("browser", "celery_worker", "deploy")


def _slowness_rank(item) -> int:
    for rank, prefix in enumerate(SLOW_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
        return len(SLOW_FIRST)
    return len(SLOW_FIRST) + 1


def pytest_collection_finish(session):
    """The objects alive once the tests are collected (Django, the modules, the test items)
    live for the whole run: frozen, the collector no longer walks them, and it runs less often
    (Python's default thresholds are sized for small programs). The collector's time, measured
    with gc.callbacks over 1,191 permission, view, dashboard and fuzz tests in one process:
    2.83 s with the defaults (12 full collections of ~150 ms each), 1.27 s frozen with these
    thresholds; reference cycles are still collected."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 100)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_slowness_rank)  # stable: the order within each rank is kept
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers > 1 and config.getoption("dist", None) == "worksteal":
        items[:] = _dealt(items, workers)


def _dealt(items: list, workers: int) -> list:
    """The slow tests dealt out to every worker's first tests.

    xdist's work stealing hands each worker one contiguous block of the collection to begin
    with (the first len/N tests, then a share of the rest, …), and a worker that runs out
    steals from the end of another's block. With the slow tests all at the front they were
    all in the first worker's block, one after another: ~250 of ~520 worker-seconds, more than
    a third of the run, on one worker while the others ran out of short tests and idled. Here
    each block starts with its share of them, dealt longest first and back and forth (0, 1,
    2, 2, 1, 0, …). A module's slow tests go together, since they share its fixtures (a
    browser, a live server, a seeded demo): the run is bound by CPU, and the a11y sweep's four
    roles on three workers seeded the demo three times (~6 s of CPU each) for no gain in
    time. Every worker computes the same order from the same collection, as xdist requires."""

    units: list[list] = []  # dealt whole: one SLOW_FIRST entry's or marked module's tests
    rest = []
    for item in items:
        rank = _slowness_rank(item)
        if rank > len(SLOW_FIRST):
            rest.append(item)
            continue
        last = units[-1][0] if units else None
        if last is not None and _slowness_rank(last) == rank and _module(last) == _module(item):
            units[-1].append(item)
        else:
            units.append([item])
    blocks: list[list] = [[] for _ in range(workers)]
    for index, unit in enumerate(units):
        lap, seat = divmod(index, workers)
        blocks[seat if lap % 2 == 0 else workers - 1 - seat].extend(unit)
    # The block sizes xdist's first hand gives (worksteal.check_schedule: an equal share of
    # what is left to each worker in turn), each topped up with the short tests in order.
    ordered, remaining, taken = [], len(items), 0
    for number, block in enumerate(blocks):
        size = remaining // (workers - number)
        more = max(0, size - len(block))
        block.extend(rest[taken : taken + more])
        taken += more
        ordered.extend(block)
        remaining -= len(block)
    return ordered + rest[taken:]


def _module(item) -> str:
    return item.nodeid.split("::")[0]
