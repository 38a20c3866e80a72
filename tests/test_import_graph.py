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
        # Exports read invoices; invoicing only links to their pages (templates).
        ("invoicing", "exports"),
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


APPS = {path.parent.name for path in LABGOV.glob("*/apps.py")}


def test_core_imports_no_app():
    """core is the ground floor: every app may import it, so it imports none of them. What
    knows the whole product lives at the top (demo, ops, navigation). Project modules such as
    labgov.celery are not apps."""
    offenders = {m: sorted(apps) for m, apps in _app_imports("core").items() if apps & APPS}
    assert offenders == {}, f"core imports apps: {offenders}"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in LABGOV.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(LABGOV.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _module_of(name: str, modules) -> str | None:
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def _module_graph() -> dict[str, set[str]]:
    """Module → the labgov modules it imports, at the top or in a function. `from package
    import submodule` is an arrow to the submodule, not to the package."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            targets |= {_module_of(name, modules) for name in names if name.startswith("labgov.")}
        graph[module] = targets - {module, None}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# Circles left on purpose, each with why. Shrink this list; never grow it without a reason.
KNOWN_CYCLES: list[set[str]] = [
    # The router is built in urls.py and read by the API root view to list the resources.
    {"labgov.api.urls", "labgov.api.views"},
    # Issuing a draft asks whether it is stale; staleness rebuilds the draft's lines with the
    # services that generate them.
    {"labgov.invoicing.services", "labgov.invoicing.staleness"},
]


def test_no_import_cycles():
    cycles = [c for c in _cycles(_module_graph()) if c not in KNOWN_CYCLES]
    assert cycles == [], f"import cycles: {[sorted(c) for c in cycles]}"


def test_the_cycle_check_finds_a_late_circle(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]


def test_the_check_sees_late_imports(tmp_path):
    """The parser counts an import inside a function: the old sync's late import is caught."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from labgov.provisioning.services import x\n")
    assert "labgov.provisioning.services" in _imports(module)


def test_loading_the_simulator_app_imports_none_of_the_simulator():
    """Django imports labgov/simulator/__init__.py for the app in every process (web, worker,
    beat, each command); the server and the schema validation it loads (jsonschema) come with
    the first name asked of the package, not before."""
    import labgov.simulator
    from labgov.simulator.server import SimulatorServer

    top_level = ast.parse((LABGOV / "simulator" / "__init__.py").read_text()).body
    eager = [
        node
        for node in top_level
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(name.startswith("labgov") for name in _imports_of(node))
    ]
    assert eager == []
    assert labgov.simulator.SimulatorServer is SimulatorServer
    assert set(labgov.simulator.__all__) <= set(dir(labgov.simulator))
    with pytest.raises(AttributeError):
        labgov.simulator.NoSuchName  # noqa: B018


def _imports_of(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return [alias.name for alias in node.names]
