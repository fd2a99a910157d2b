"""The architecture as docs/architecture.md draws it, read from the code's own imports.

* No import circle anywhere in ``src/idmint`` (imports inside functions and under
  ``TYPE_CHECKING`` count: a circle is a circle however late it closes).
* Arrows point down: each part imports only the parts below it.
* A part's private modules (``schemes._base``) are imported only inside the part.
* A route of the server is declared once, in its route list.
* Coordinators are found by URL scheme in package metadata and nowhere else: no
  table of ``module:Class`` targets in the code, and no code outside a driver
  picks behaviour by comparing a URL's scheme with a name.
* Every driver idmint ships is registered, with its contract kit's adapter, and
  every registration names a class of the right kind.
* No code compares an identity space's name or lists the names: a space is an
  object that says what it is (``coordinate/spaces.py``).
* A URL option is declared once, as a field of its driver's options class: no
  driver reads a URL's options itself, and its docstring's table is the
  declaration's.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from idmint.coordinate import Coordinator
from idmint.coordinate.options import UrlOptions, options_table
from idmint.coordinate.spaces import SPACES
from idmint.testing import Hooks

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = SOURCE / "idmint"

LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "waiting": set(),
    "clock": {"errors"},
    "schemes": {"errors"},
    "generate": {"schemes", "clock", "errors"},
    "coordinate": {"schemes", "clock", "errors", "waiting"},
    "_storage": {"schemes", "errors"},
    "pydantic": {"schemes", "errors"},
    "sqlalchemy": {"_storage", "schemes", "errors"},
    "django": {"_storage", "schemes", "errors"},
    "factory": {"coordinate", "generate", "schemes", "clock", "errors", "waiting"},
    "discovery": {"factory", "coordinate", "generate", "schemes", "clock", "errors", "waiting"},
}
"""What each part may import besides itself (the faces above them may import them all)."""
FACES = {"server", "client", "cli", "testing", "__init__", "__main__"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """The idmint modules ``name`` imports, wherever in it the import stands."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # ``from idmint import _storage`` imports the submodule; ``from idmint import
            # Uid64`` a name of the package.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target in MODULES and target != name)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _part(module: str) -> str:
    """``coordinate`` for ``idmint.coordinate.zookeeper``; ``__init__`` for ``idmint``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circle_anywhere() -> None:
    # Tarjan's strongly connected components: any with two or more modules is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in GRAPH[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


def test_arrows_point_down() -> None:
    upward = defaultdict(set)
    for module, imported in GRAPH.items():
        part = _part(module)
        if part in FACES:
            continue
        assert part in LAYERS, f"{module}: a part docs/architecture.md does not place"
        for target in imported:
            if _part(target) != part and _part(target) not in LAYERS[part]:
                upward[module].add(target)
    assert not upward, f"imports that run up or sideways: {dict(upward)}"


def test_the_faces_do_not_import_each_other_but_through_the_factory() -> None:
    # The CLI runs the server and the client; nothing below the faces imports one.
    for module, imported in GRAPH.items():
        if _part(module) in ("server", "client", "testing"):
            faces = {_part(t) for t in imported} & (FACES - {_part(module), "__init__"})
            assert not faces, f"{module} imports the faces {faces}"


PUBLIC_FACES_OF_PRIVATE_MODULES = {("idmint.pydantic", "idmint.schemes._pydantic")}
"""``idmint.pydantic`` is what ``schemes._pydantic`` shows the world: the schemes'
package cannot name it, since importing it imports pydantic."""


def test_a_parts_private_modules_are_imported_only_inside_it() -> None:
    # ``schemes._base`` is the schemes' own: the rest asks ``idmint.schemes`` for its names.
    reached_in = sorted(
        f"{module} imports {target}"
        for module, imported in GRAPH.items()
        for target in imported
        if target.rpartition(".")[2].startswith("_")
        and target.count(".") > 1
        and _part(target) != _part(module)
        and (module, target) not in PUBLIC_FACES_OF_PRIVATE_MODULES
    )
    assert not reached_in, reached_in


def test_a_route_of_the_server_is_declared_once() -> None:
    # The route list makes the dispatch, the metrics label and /openapi.json: a path
    # written anywhere else in the server is a route kept in two places. ("/" is left
    # out: it is every other path's first character.)
    from idmint.server.app import ROUTES

    names = {
        name
        for route in ROUTES
        for name in (route.path, route.prefix, route.label)
        if name is not None and name != "/"
    }
    written: dict[str, list[str]] = defaultdict(list)
    for module, path in MODULES.items():
        if _part(module) == "server":
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and node.value in names:
                    written[node.value].append(f"{module}:{node.lineno}")
    assert {name: places for name, places in written.items() if len(places) > 1} == {}


# -- drivers: by scheme, in package metadata, nowhere else -------------------------------

DRIVER_MODULES = {
    "idmint.coordinate.etcd",
    "idmint.coordinate.local",
    "idmint.coordinate.memory",
    "idmint.coordinate.mysql",
    "idmint.coordinate.postgres",
    "idmint.coordinate.redis",
    "idmint.coordinate.static",
    "idmint.coordinate.zookeeper",
}
"""The drivers: each may compare a URL's scheme with its own names (etcds://: TLS)."""


URL_HANDLERS = {"coordinate", "factory", "discovery", "testing", "cli", "server"}
"""The parts that handle coordinator URLs (the client's are its servers' http:// ones)."""


def test_no_code_picks_a_driver_or_a_behaviour_by_scheme_name() -> None:
    compared = []
    for module, path in MODULES.items():
        if module in DRIVER_MODULES or _part(module) not in URL_HANDLERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            on_scheme = any(isinstance(s, ast.Attribute) and s.attr == "scheme" for s in sides)
            literal = any(
                isinstance(c, ast.Constant) and isinstance(c.value, str)
                for s in sides
                for c in ([s] if isinstance(s, ast.Constant) else getattr(s, "elts", []))
            )
            if on_scheme and literal:
                compared.append(f"{module}:{node.lineno}")
    assert not compared, f"the registry picks drivers by scheme, nothing else: {compared}"


def test_no_table_of_driver_targets_in_the_code() -> None:
    target = re.compile(r"^idmint\.[\w.]+:\w+$")
    tables = [
        f"{module}:{node.lineno}"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and target.match(node.value)
    ]
    assert not tables, f"module:Class targets belong in pyproject.toml's entry points: {tables}"


ENTRY_POINTS = {
    group: {
        entry.name: entry.value
        for entry in entry_points(group=group)
        if entry.dist and entry.dist.name == "idmint"
    }
    for group in ("idmint.coordinators", "idmint.contract_hooks")
}
"""idmint's own registrations, as installed from pyproject.toml."""


@pytest.mark.parametrize(
    ("group", "kind"), [("idmint.coordinators", Coordinator), ("idmint.contract_hooks", Hooks)]
)
def test_every_registration_names_a_class_of_its_kind(group: str, kind: type) -> None:
    for scheme, value in ENTRY_POINTS[group].items():
        module, _, name = value.partition(":")
        loaded = getattr(import_module(module), name)
        assert isinstance(loaded, type), scheme
        assert issubclass(loaded, kind), scheme


def test_every_driver_shipped_is_registered_and_has_an_adapter_where_it_claims() -> None:
    registered = ENTRY_POINTS["idmint.coordinators"]
    shipped = {value.partition(":")[0] for value in registered.values()}
    assert shipped == DRIVER_MODULES
    adapters = ENTRY_POINTS["idmint.contract_hooks"]
    # static:// too: its identity is held in this host's pool, whose marks the kit writes.
    assert set(adapters) == set(registered)


def test_importing_idmint_loads_neither_coordination_nor_package_metadata() -> None:
    # A program that only reads IDs (model types, `idmint decode`) never claims:
    # the generators and the factory are imported when first named, and drivers
    # are found in package metadata when a coordinator URL is first looked up.
    # Both cost more to import than the rest of idmint.
    code = (
        "import idmint, sys; "
        "print(sorted(m for m in ('idmint.coordinate', 'idmint.factory', 'importlib.metadata') "
        "if m in sys.modules))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"
    # Named, they are there.
    code = "import idmint, sys; idmint.new_generator; print('idmint.factory' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "True"


# -- identity spaces: objects, never names -------------------------------------------------

SPACE_NAMES = {space.name for space in SPACES}
"""The identity spaces' names (stored, so written once: ``coordinate/spaces.py``)."""


def _names_a_space(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in SPACE_NAMES


def _space_like(node: ast.expr) -> bool:
    """``space``, ``x.space`` or ``space.name``: an expression that holds a space."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    return (isinstance(node, ast.Name) and node.id == "space") or (
        isinstance(node, ast.Attribute) and node.attr == "space"
    )


def test_no_code_picks_a_behaviour_by_a_spaces_name() -> None:
    # A space says what it is (its clusters, width, size, layout): code that compares
    # its name with a literal, or lists the names by hand, is a second declaration.
    found = []
    for module, path in MODULES.items():
        if module == "idmint.coordinate.spaces":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                literals = [
                    element
                    for side in sides
                    for element in (
                        side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    )
                    if isinstance(element, ast.Constant) and isinstance(element.value, str)
                ]
                equal = any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
                listed = any(
                    isinstance(side, (ast.Tuple, ast.List, ast.Set)) for side in node.comparators
                )
                if (any(_space_like(side) for side in sides) and literals) or (
                    (equal or listed) and any(map(_names_a_space, literals))
                ):
                    found.append(f"{module}:{node.lineno} compares a space's name")
            elif (
                isinstance(node, (ast.Tuple, ast.List, ast.Set))
                and len(node.elts) > 1
                and all(map(_names_a_space, node.elts))
            ):
                found.append(f"{module}:{node.lineno} lists spaces by name")
    assert not found, found


# -- URL options: one declaration each -------------------------------------------------------

URL_READERS = {"number", "integer", "flag", "pool", "check_known"}
"""``CoordinatorUrl``'s typed readers, which only the options' kinds call."""


def _a_url(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "url") or (
        isinstance(node, ast.Attribute) and node.attr == "url"
    )


def _read_of_an_option(node: ast.AST) -> bool:
    """``url.options[name]`` or ``url.options.get(name)``."""
    if isinstance(node, ast.Subscript):
        target = node.value
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
    ):
        target = node.func.value
    else:
        return False
    return isinstance(target, ast.Attribute) and target.attr == "options" and _a_url(target.value)


def test_a_url_option_is_read_only_through_its_declaration() -> None:
    # Each option is a field of its driver's options class, read, checked and shown
    # from there (coordinate/options.py): no driver reads a URL's options itself,
    # and no tuple of option names stands beside the declarations.
    found = []
    for module, path in MODULES.items():
        if module in ("idmint.coordinate.options", "idmint.coordinate.url"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in URL_READERS
                and _a_url(node.func.value)
            ):
                found.append(f"{module}:{node.lineno} reads an option with {node.func.attr}()")
            if _read_of_an_option(node):
                found.append(f"{module}:{node.lineno} reads a URL's option by name")
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id.endswith("OPTIONS") for t in node.targets)
                and isinstance(node.value, ast.Tuple)
                and _part(module) == "coordinate"
            ):
                found.append(f"{module}:{node.lineno} lists option names")
    assert not found, found


def test_every_driver_reads_its_url_through_its_declared_options() -> None:
    # A driver's options_type is what it reads (so its table, the docs' and the
    # kit's settings are its declaration's); its module's table is made from it.
    for scheme, value in ENTRY_POINTS["idmint.coordinators"].items():
        module, _, name = value.partition(":")
        coordinator = getattr(import_module(module), name)
        declared = coordinator.options_type
        assert issubclass(declared, UrlOptions), scheme
        assert "options_type" in vars(coordinator) or coordinator.__base__ is not Coordinator, (
            f"{scheme}:// declares no options_type"
        )
        assert options_table(declared) in (sys.modules[module].__doc__ or ""), scheme
