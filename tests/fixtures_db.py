"""Test databases on PostgreSQL cloned from a migrated template instead of migrated each.

Migrating an empty database takes ~10 s of one core (Django renders the models' state ~80
times), and every xdist worker made its own. Here the first worker to ask migrates a template
database, `<test name>_tmpl_<digest>`, under an advisory lock; every worker's test database is
then `CREATE DATABASE … TEMPLATE` of it (a fraction of a second), the same bytes migrate made.

The digest covers what migrating depends on: every installed app's migration files, the
labgov modules those files import, and the Django version. A migration added or changed gives
a new digest, so a new template is migrated (and the old ones are dropped); with an unchanged
digest a later run on the same PostgreSQL clones the template left by the one before.
`LABGOV_TEST_DB_TEMPLATE=0` migrates each test database as Django does. The deploy smoke test
copies the template too (`TEMPLATE`, when one was used): migrating from nothing is what made
it, in this run or an earlier one on the same migrations, and tests/runpod/test_partitions.py
migrates back and forward. Installed by tests/conftest.py."""

import contextlib
import hashlib
import os
import re
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError

ENABLED = os.environ.get("LABGOV_TEST_DB_TEMPLATE", "1") != "0"
_IMPORT = re.compile(r"^\s*(?:from|import)\s+(labgov(?:\.\w+)+)", re.MULTILINE)
ROOT = Path(__file__).resolve().parent.parent
TEMPLATE: str | None = None  # the template this process's test database was cloned from


def migration_digest() -> str:
    """What a migrated database depends on, as a short hex digest."""
    import django

    digest = hashlib.sha256(django.get_version().encode())
    imported: set[str] = set()
    for config in sorted(apps.get_app_configs(), key=lambda c: c.label):
        folder = Path(config.path) / "migrations"
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
            text = path.read_bytes()
            digest.update(f"{config.label}/{path.name}\0".encode() + text)
            imported.update(_IMPORT.findall(text.decode(errors="replace")))
    for module in sorted(imported):
        source = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        if source.is_file():
            digest.update(f"{module}\0".encode() + source.read_bytes())
    return digest.hexdigest()[:12]


def install() -> None:
    from django.db.backends.postgresql.creation import DatabaseCreation

    original = DatabaseCreation.create_test_db

    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        if not ENABLED or keepdb:
            return original(self, verbosity, autoclobber, serialize, keepdb)
        from django.core.management import call_command

        global TEMPLATE
        name = self._get_test_db_name()
        template = TEMPLATE = _template(self, original, name)
        with self._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {self._quote_name(name)}")
            cursor.execute(
                f"CREATE DATABASE {self._quote_name(name)} TEMPLATE {self._quote_name(template)}"
            )
        self.connection.close()
        settings.DATABASES[self.connection.alias]["NAME"] = name
        self.connection.settings_dict["NAME"] = name
        if serialize:
            self.connection._test_serialized_contents = self.serialize_db_to_string()
        call_command("createcachetable", database=self.connection.alias)
        self.connection.ensure_connection()
        return name

    DatabaseCreation.create_test_db = create_test_db


def _template(creation, migrate_into, test_name: str) -> str:
    """The migrated template's name, migrating it first if no run has (one worker at a time)."""
    base = re.sub(r"_gw\d+$", "", test_name)
    template = f"{base}_tmpl_{migration_digest()}"[:63]
    with creation._nodb_cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [base + "_tmpl"])
        try:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
            if cursor.fetchone() is None:
                _migrate(creation, migrate_into, template)
                cursor.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    [base.replace("_", "\\_") + "\\_tmpl\\_%", template],
                )
                for (stale,) in cursor.fetchall():
                    # One another run is cloning from is in use: left for a later run.
                    with contextlib.suppress(DatabaseError):
                        cursor.execute(f"DROP DATABASE IF EXISTS {creation._quote_name(stale)}")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [base + "_tmpl"])
    return template


def _migrate(creation, migrate_into, template: str) -> None:
    """Migrate `<template>_building` as Django makes a test database, then rename it: a run
    stopped half-way leaves no template that looks finished."""
    connection = creation.connection
    alias = connection.alias
    saved = (settings.DATABASES[alias]["NAME"], connection.settings_dict["NAME"])
    test_settings = connection.settings_dict["TEST"]
    saved_test_name = test_settings.get("NAME")
    building = f"{template}_building"[:63]
    test_settings["NAME"] = building
    try:
        migrate_into(creation, verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    finally:
        connection.close()
        test_settings["NAME"] = saved_test_name
        settings.DATABASES[alias]["NAME"], connection.settings_dict["NAME"] = saved
    with creation._nodb_cursor() as cursor:
        cursor.execute(
            f"ALTER DATABASE {creation._quote_name(building)} "
            f"RENAME TO {creation._quote_name(template)}"
        )
