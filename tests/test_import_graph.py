"""The apps' import graph: the arrows that must not come back.

Read from the source with ast (imports inside functions count too), so a late import is no
way around it."""

import ast
from pathlib import Path

import pytest

LABGOV = Path(__file__).resolve().parents[1] / "labgov"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _app_imports(app: str) -> dict[str, set[str]]:
    """Module path → the labgov apps it imports, for every module of `app`."""
    arrows = {}
    for path in sorted((LABGOV / app).rglob("*.py")):
        apps = {
            name.split(".")[1]
            for name in _imports(path)
            if name.startswith("labgov.") and name.count(".") >= 1
        }
        arrows[str(path.relative_to(LABGOV))] = apps - {app}
    return arrows


@pytest.mark.parametrize(
    ("app", "forbidden"),
    [
        # provisioning imports runpod (it creates pods through the client): never the reverse.
        ("runpod", "provisioning"),
        # The simulator stands in for Runpod: it shares only the schema with the product.
        ("runpod", "simulator"),
        # notifications are told things; they do not reach into the apps that tell them.
        ("notifications", "provisioning"),
        # Invoices are built on billing, funding and usage; none of them knows of invoices.
        ("runpod", "invoicing"),
        ("usage", "invoicing"),
        ("funding", "invoicing"),
        ("accounts", "invoicing"),
    ],
)
def test_no_arrow_back(app, forbidden):
    offenders = [m for m, apps in _app_imports(app).items() if forbidden in apps]
    assert offenders == [], f"{app} imports {forbidden} in {offenders}"


def test_the_sync_imports_none_of_its_consumers():
    """What runs after a sync is composed in settings.LABGOV_AFTER_SYNC, not in the sync."""
    consumers = {"provisioning", "alerts", "notifications", "dashboard"}
    assert _app_imports("runpod")["runpod/sync.py"] & consumers == set()


def test_the_simulator_needs_only_the_schema_of_the_product():
    imported = set()
    for path in (LABGOV / "simulator").rglob("*.py"):
        imported |= {n for n in _imports(path) if n.startswith("labgov.runpod")}
    assert imported <= {"labgov.runpod", "labgov.runpod.schema", "labgov.runpod.schema.validate"}


def test_notifications_services_and_tasks_do_not_import_each_other():
    services = _imports(LABGOV / "notifications/services.py")
    assert not any(name.startswith("labgov.notifications.tasks") for name in services)


def test_the_check_sees_late_imports(tmp_path):
    """The parser counts an import inside a function: the old sync's late import is caught."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from labgov.provisioning.services import x\n")
    assert "labgov.provisioning.services" in _imports(module)
