"""The package's import graph, read from the source with ``ast``: no import cycle and no module
importing upward. Every import counts where it is written: at module level, inside a function
(a lazy import), relative (``from . import x``), as ``importlib.import_module("dsv41_flags.x")``
with a literal name, and the parent packages an import runs first (``import dsv41_flags.a.b``
runs ``dsv41_flags.a``). Only imports under ``if TYPE_CHECKING:`` (annotations, never executed)
and the root package (``dsv41_flags/__init__``, which Python runs before any of its modules) are
left out. Nothing is allowed by exception: there is no list of tolerated edges.

Data flows one way: settings -> resolution -> features -> hooks -> install -> events. The layers
below follow it, lowest first; a module imports only modules of its own layer or a lower one.
The foundation is what every stage shares (errors, names, values, the file reads, the log
pipeline, the state words and the engine seam ``engine``); the edges (the launcher, the upgrade
gate, the CLI, the test kit) sit above the public API, and the engine integrations
(``engines.sglang``) on top. A package named in a layer holds its submodules, unless one of them
is named in another layer.
"""
import ast
from pathlib import Path

import pytest

import dsv41_flags

PACKAGE = Path(dsv41_flags.__file__).resolve().parent

LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"errors", "names", "values", "text", "wire", "files", "logs", "state", "engine",
                    "secrecy"}),
    ("declarations", {"requires", "declare"}),
    ("settings", {"resolution", "settings_files", "fleet_settings", "settings"}),
    ("resolution", {"fingerprint"}),
    ("features", {"discovery", "drift", "snapshot_schema", "snapshot", "status"}),
    ("hooks", {"hooks"}),
    ("install", {"wrappers", "live", "patch", "runtime", "rank_guard", "fleet_providers", "fleet",
                 "assembly"}),
    ("events", {"error_policy", "activation", "children"}),
    ("public API", {""}),
    ("edges", {"engines", "launcher", "upgrade_gate", "cache_keeping", "testing", "cli"}),
    ("engine integrations", {"engines.sglang"}),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_data" not in p.parts}


def _layer_of(module: str) -> int:
    """Index in LAYERS of the longest entry that is ``module`` or a package holding it."""
    for name in [module] + [module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)]:
        for i, (_, mods) in enumerate(LAYERS):
            if name in mods:
                return i
    raise LookupError(f"{module or 'dsv41_flags'} is in no layer")


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(path: Path, known: set[str], importer: str = "") -> dict[str, int]:
    """Package modules imported anywhere in ``path`` (the module ``importer``) -> the first line
    that imports each: the module itself and, outside ``importer``'s own packages, the parent
    packages the import runs first (the root package only when a name is taken from it)."""
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    own = {".".join(package[:n]) for n in range(1, len(package) + 1)}
    found: dict[str, int] = {}

    def module_of(name: str) -> str | None:
        if name == "dsv41_flags" or name.startswith("dsv41_flags."):
            return name[len("dsv41_flags."):]
        return None

    def add(rel: str, line: int) -> None:
        parts = rel.split(".")
        for n in range(1, len(parts)):
            if ".".join(parts[:n]) in known and ".".join(parts[:n]) not in own:
                found.setdefault(".".join(parts[:n]), line)
        if rel in known and rel != importer:
            found.setdefault(rel, line)

    def visit(node: ast.AST) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if (rel := module_of(a.name)) is not None:
                    add(rel, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(["dsv41_flags"] + package[:len(package) - node.level + 1]
                                + ([base] if base else []))
            if (rel := module_of(base)) is not None:
                mods = [m for m in (f"{rel}.{a.name}".lstrip(".") for a in node.names) if m in known]
                if len(mods) < len(node.names):  # a name defined in the module itself
                    add(rel, node.lineno)
                for m in mods:
                    add(m, node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and getattr(
                    node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            if (rel := module_of(node.args[0].value)) is not None:
                add(rel, node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known, name) for name, path in modules.items()}


def test_every_module_has_a_layer():
    placed = [m for _, mods in LAYERS for m in mods]
    assert len(placed) == len(set(placed))
    assert set(placed) <= set(_modules())
    for module in _modules():
        _layer_of(module)


def test_no_import_cycle():
    graph = _graph()
    cycles, state = [], {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [node, dep])
            elif dep not in state:
                walk(dep, path + [dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert cycles == []


def test_no_module_imports_upward():
    upward = [f"{name or 'dsv41_flags'} ({LAYERS[_layer_of(name)][0]}) imports "
              f"{dep or 'dsv41_flags'} ({LAYERS[_layer_of(dep)][0]}) at line {line}"
              for name, deps in sorted(_graph().items()) for dep, line in sorted(deps.items())
              if _layer_of(dep) > _layer_of(name)]
    assert upward == []


def test_the_engine_seam_is_below_the_core_and_the_integration_on_top():
    assert _layer_of("engine") == 0
    assert _layer_of("engines.sglang.processes") == len(LAYERS) - 1
    assert all(_layer_of(m) < _layer_of("engines.sglang") for m in _modules()
               if not m.startswith("engines.sglang"))


@pytest.mark.parametrize("importer, source, expected", [
    ("m", "def f():\n    from dsv41_flags.runtime import Runtime\n", {"runtime"}),
    ("m", "import dsv41_flags.live\n", {"live"}),
    ("m", "from dsv41_flags.engines import sglang\n", {"engines", "engines.sglang"}),
    ("m", "from dsv41_flags.engines.sglang.rpc import METHODS\n",
     {"engines", "engines.sglang", "engines.sglang.rpc"}),
    ("engines.sglang.http", "from dsv41_flags.engines.sglang.rpc import METHODS\n",
     {"engines.sglang.rpc"}),
    ("engines.sglang.http", "from . import rpc\nfrom ..http_client import call_json\n",
     {"engines.sglang.rpc", "engines.http_client"}),
    ("m", "import importlib\ndef f():\n    importlib.import_module('dsv41_flags.status')\n",
     {"status"}),
    ("runtime", "from dsv41_flags import activate, rank_guard\n", {"", "rank_guard"}),
    ("m", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dsv41_flags.cli\n", set()),
])
def test_the_graph_sees_every_kind_of_import(tmp_path, importer, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert set(_imports(path, set(_modules()), importer)) == expected


#: underscore names that are documented public API of the standard library
PUBLIC_UNDERSCORE = {("os", "_exit")}


def _private_uses(path: Path) -> list[str]:
    """``module._name`` reads of another distribution's module, and ``getattr``/``hasattr``/
    ``setattr`` with a ``"_name"`` literal, in one source file (dunders are not private)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported \
                    and not imported[root.id].startswith("dsv41_flags") \
                    and (imported[root.id], node.attr) not in PUBLIC_UNDERSCORE:
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) \
                    and name.value.startswith("_") and not name.value.startswith("__"):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_private_attribute_of_a_dependency_is_read():
    """Only public APIs of dependencies (standard library included): a private name breaks at
    any bump of the engine's environment."""
    uses = [u for path in sorted(PACKAGE.rglob("*.py")) for u in _private_uses(path)]
    uses += _private_uses(PACKAGE.parent / "dsv41_flags_plugin.py")
    assert uses == []
