"""One place per concept (issue 11): the child's import set, reserved names, suggestions,
``after=`` ordering through graphlib, frozen declarations, one state rule for runtime and CLI."""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsv41_flags import DeclarationError, Feature
from dsv41_flags.discovery import discover, install_order
from dsv41_flags.names import RESERVED, RESERVED_KEYS, RESERVED_TYPES, suggest
from dsv41_flags.runtime import build

REPO = Path(__file__).resolve().parents[2]

#: what a child activating from the snapshot must not import (it uses none of it)
CHILD_MUST_NOT_IMPORT = ("dynaconf", "tomllib", "typer", "click", "dsv41_flags.settings",
                         "dsv41_flags.cli", "dsv41_flags.upgrade_gate.static_check",
                         "dsv41_flags.upgrade_gate", "multiprocessing")

CHILD = """
import json, sys
import dsv41_flags
rt = dsv41_flags.activate()
print(json.dumps({"from_snapshot": rt.from_snapshot, "armed": [f.name for f in rt.armed()],
                  "modules": sorted(sys.modules)}))
"""


def _child_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(extra)
    return env


def test_child_from_snapshot_imports_only_what_it_uses():
    """A child activating from the launch's snapshot (both features armed) imports no settings
    loader, no TOML parser and no CLI."""
    env = _child_env(DSV41_FOLDED_FENCE="1", DSV41_AUTOTUNE_KEEP="1", DSV41_LOG_FORMAT="json")
    parent = build([REPO / "settings.toml"], None, environ=env, argv=["serve"],
                   features_dir=REPO / "features", use_snapshot=False, configure_logging=False)
    env["DSV41_SNAPSHOT"] = parent.snapshot()
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["from_snapshot"] and data["armed"] == ["autotune_keep", "folded_fence"]
    present = [m for m in CHILD_MUST_NOT_IMPORT
               if m in data["modules"] or any(x.startswith(m + ".") for x in data["modules"])]
    assert present == []


# ------------------------------------------------------------------------------ names
def test_reserved_names_defined_once():
    """One table: the keys, the typed settings and the variables all come from it."""
    assert RESERVED_KEYS == tuple(RESERVED)
    assert set(RESERVED_TYPES) <= set(RESERVED_KEYS)
    import dsv41_flags.settings as _settings

    assert _settings.RESERVED_TYPES is RESERVED_TYPES
    assert (_settings.PROFILE_VAR, _settings.SETTINGS_VAR, _settings.SNAPSHOT_VAR) == (
        "DSV41_ENV", "DSV41_SETTINGS", "DSV41_SNAPSHOT")
    # no other module spells the list again
    src = REPO / "src" / "dsv41_flags"
    for path in src.glob("*.py"):
        if path.name != "names.py":
            text = path.read_text()
            assert '"LOG_FORMAT", "LOG_LEVEL"' not in text and "did you mean {" not in text, path


def test_suggest_is_the_one_did_you_mean():
    assert suggest("FOLDED_FENC", ["FOLDED_FENCE", "AUTOTUNE_KEEP"]) == "; did you mean FOLDED_FENCE?"
    assert suggest("zzz", ["FOLDED_FENCE"]) == ""


# --------------------------------------------------------------------------- ordering
def _f(name, after=(), source=""):
    return Feature(name=name, target="json", install=print, summary="s", engine="", after=after,
                   source=source)


def test_after_order_through_graphlib_keeps_given_order_among_free_features():
    order = [f.name for f in install_order([_f("a", ("z",)), _f("b"), _f("z")])]
    assert order.index("z") < order.index("a") and order[0] == "b"
    assert [f.name for f in install_order([_f("a"), _f("b"), _f("c")])] == ["a", "b", "c"]


def test_after_cycle_names_the_cycle():
    with pytest.raises(DeclarationError, match=r"'after' forms a cycle: (a -> b -> c -> a|b -> c -> a -> b"
                                               r"|c -> a -> b -> c)"):
        install_order([_f("a", ("b",)), _f("b", ("c",)), _f("c", ("a",))])


def test_after_cycle_refused_at_discovery(tmp_path):
    for name, dep in (("one", "two"), ("two", "one")):
        (tmp_path / f"{name}.py").write_text(
            "from dsv41_flags import Feature\nFEATURE = Feature(name=%r, target='json', install=print, "
            "summary='s', engine='', after=(%r,))\n" % (name, dep))
    with pytest.raises(DeclarationError, match=r"\.py\): 'after' forms a cycle: (one -> two -> one|"
                                               r"two -> one -> two)"):
        discover(tmp_path, entry_points=False)


def test_after_typo_suggests_the_feature(tmp_path):
    (tmp_path / "me.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='me', "
                                    "target='json', install=print, summary='s', engine='', "
                                    "after=('local_fenc',))\n")
    (tmp_path / "local_fence.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature("
                                             "name='local_fence', target='json', install=print, "
                                             "summary='s', engine='')\n")
    with pytest.raises(DeclarationError, match="did you mean local_fence"):
        discover(tmp_path, entry_points=False)


# ----------------------------------------------------------------------------- frozen
@pytest.mark.parametrize("field", ["requires", "volatile", "options", "refs", "after"])
def test_tuple_fields_refuse_lists_with_the_fix(field):
    with pytest.raises(DeclarationError, match=rf"{field} must be a tuple, got list .*write it as a tuple"):
        Feature(name="x", target="json", install=print, summary="s", engine="", **{field: []})


def test_declarations_are_never_mutated():
    """No ``object.__setattr__`` anywhere in the package: copies are made with dataclasses.replace."""
    src = REPO / "src" / "dsv41_flags"
    assert [p.name for p in src.rglob("*.py") if "object.__setattr__" in p.read_text()] == []
    f = _f("a")
    g = dataclasses.replace(f, source="/x.py")
    assert f.source == "" and g.source == "/x.py" and g == f


def test_discovery_copies_instead_of_mutating(tmp_path):
    (tmp_path / "shared.py").write_text(textwrap.dedent("""
        from dsv41_flags import Feature
        FEATURE = Feature(name="shared", target="json", install=print, summary="s", engine="")
    """))
    found = {f.name: f for f in discover(tmp_path, entry_points=False)}["shared"]
    module = sys.modules["dsv41_flags_features.shared"]
    assert found.source.endswith("shared.py") and module.FEATURE.source == ""


# ------------------------------------------------------------------------------ state
def test_status_renders_the_runtime_states(make_runtime):
    """``preview`` is the boot's rule: off / fixed-upstream / armed, drifted when armed and the
    drift found without importing is not empty."""
    rt = make_runtime(env={"DSV41_FOLDED_FENCE": "1"})
    states = {s.name: s.state for s in rt.preview({"folded_fence": ["X.y"], "autotune_keep": ["Z"]})}
    assert states == {"folded_fence": "drifted", "autotune_keep": "off"}
    assert {s.name: s.state for s in rt.preview({})} == {"folded_fence": "armed", "autotune_keep": "off"}
    assert rt._states == {}  # nothing recorded, nothing armed


# ------------------------------------------------------------------- the engine apart
def _code_strings_imports_comments(path: Path):
    """``(lineno, text)`` of every string constant that is not a docstring, every import and every
    comment in ``path``."""
    import ast
    import tokenize

    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, f"from {'.' * node.level}{node.module or ''} import " + \
                ", ".join(a.name for a in node.names)
    with open(path, "rb") as fh:
        for tok in tokenize.tokenize(fh.readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string


def test_only_the_adapter_room_names_the_engine():
    """``grep -rn sglang src/dsv41_flags`` outside ``_sglang.py`` finds docstrings at most: no
    string constant, import or comment names the engine (the core reaches it only through the
    seam, ``_engine.EngineAdapter``). The shipped features (``_data``) are not the core."""
    src = REPO / "src" / "dsv41_flags"
    found = [f"{path.relative_to(src)}:{line}: {text[:80]!r}"
             for path in sorted(src.rglob("*.py"))
             if "sglang" not in path.relative_to(src).parts and "_data" not in path.relative_to(src).parts  # shipped features
             for line, text in _code_strings_imports_comments(path) if "sglang" in text]
    assert found == []


def test_shipped_features_use_only_the_public_api():
    """``features/*.py`` import nothing from a private ``dsv41_flags._*`` module."""
    import ast

    bad = []
    for path in sorted((REPO / "features").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}:{node.lineno} {n}" for n in names
                    if n.startswith("dsv41_flags.") and n.split(".")[1].startswith("_")]
    assert bad == []
