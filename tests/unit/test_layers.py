"""The package's import graph, read from the source with ``ast``: no import cycle (imports inside
functions included) and no module importing upward.

Data flows one way: settings -> resolution -> features -> hooks -> install -> events. The layers
below follow it, lowest first; a module imports only modules of its own layer or a lower one.
The foundation is what every stage shares (errors, names, values, the file reads, the log
pipeline, the state words and the engine seam); the edges (the engine rooms, the launcher, the
upgrade gate, the CLI, the test kit) sit on top. Imports under ``if TYPE_CHECKING:`` are
annotations only, never executed, and are not counted.
"""
import ast
from pathlib import Path

import pytest

import dsv41_flags

PACKAGE = Path(dsv41_flags.__file__).resolve().parent

LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"errors", "names", "values", "text", "wire", "files", "logs", "state", "engines", "secrecy"}),
    ("declarations", {"requires", "declare"}),
    ("settings", {"resolution", "settings"}),
    ("resolution", {"fingerprint"}),
    ("features", {"discovery", "drift", "snapshot_schema", "snapshot"}),
    ("hooks", {"hooks"}),
    ("install", {"wrappers", "live", "patch", "runtime", "rank_guard"}),
    ("events", {"status", "activation"}),
    ("public API", {""}),
    ("edges", {"engines.sglang", "engines.sglang.facts", "engines.sglang.processes",
               "engines.sglang.rpc", "engines.sglang.http", "engines.sglang.metrics",
               "engines.http_client", "launcher", "launcher.bootstrap.sitecustomize", "upgrade_gate",
               "upgrade_gate.sources", "upgrade_gate.releases", "upgrade_gate.static_check",
               "upgrade_gate.matrix", "cache_keeping", "testing", "cli", "cli.output", "cli.remote"}),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_data" not in p.parts}


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(path: Path, known: set[str]) -> dict[str, int]:
    """Package modules imported anywhere in ``path`` (module level and inside functions) ->
    the first line that imports it."""
    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            if name == "dsv41_flags" or name.startswith("dsv41_flags."):
                rel = name[len("dsv41_flags."):] if name != "dsv41_flags" else ""
                while rel and rel not in known:  # `from pkg.mod import name`: the module
                    rel = rel.rpartition(".")[0]
                if isinstance(node, ast.ImportFrom) and rel != name[len("dsv41_flags."):] and \
                        f"{node.module}" != name:
                    continue  # the name part of `from m import n` when n is no module
                found.setdefault(rel, node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    known = set(modules)
    return {name: {m: line for m, line in _imports(path, known).items() if m != name}
            for name, path in modules.items()}


def test_every_module_has_a_layer():
    placed = [m for _, mods in LAYERS for m in mods]
    assert len(placed) == len(set(placed))
    assert set(_modules()) == set(placed)


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
    layer_of = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}
    upward = [f"{name or 'dsv41_flags'} ({LAYERS[layer_of[name]][0]}) imports "
              f"{dep or 'dsv41_flags'} ({LAYERS[layer_of[dep]][0]}) at line {line}"
              for name, deps in sorted(_graph().items()) for dep, line in sorted(deps.items())
              if layer_of[dep] > layer_of[name]]
    assert upward == []


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from dsv41_flags.runtime import Runtime\n", {"runtime"}),
    ("import dsv41_flags.live\n", {"live"}),
    ("from dsv41_flags.engines import sglang\n", {"engines", "engines.sglang"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dsv41_flags.cli\n", set()),
])
def test_the_graph_sees_every_kind_of_import(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert set(_imports(path, set(_modules()))) == expected


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
