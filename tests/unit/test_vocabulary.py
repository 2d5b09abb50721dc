"""Every closed vocabulary is an enum, and its words are written in its own module only: feature
states (``state.State``), upgrade-gate cells (``state.Cell``), requirement verdicts
(``drift.Presence``) and option kinds (``values.Kind``). Read from the package's source with
``ast``: a string constant equal to one of their words anywhere else fails this test."""
import ast
import sys
from pathlib import Path

import pytest

import dsv41_flags
from dsv41_flags.drift import Presence
from dsv41_flags.state import Cell, State
from dsv41_flags.values import Kind

PACKAGE = Path(dsv41_flags.__file__).resolve().parent

#: enum -> the module that is its one home (where its words may be written)
HOMES = {State: "state.py", Cell: "state.py", Presence: "drift.py", Kind: "values.py"}

#: words shared with another vocabulary of the same spelling, never checked: ``off`` is also a
#: flag word (``values.FALSE_WORDS``, ``on``/``off`` as printed) and a rank-guard mode
SHARED = {"off"}

#: (module, word): a string with the spelling of a word that means something else there
OTHER_MEANING = {
    ("rank_guard.py", "armed"): "the field of the flags.resolved payload compared across ranks",
    ("snapshot_schema.py", "missing"): "pydantic's error type for an absent field, not a verdict",
    ("cli/__init__.py", "ok"): "validate's overall answer (ok or invalid), not a verdict",
    ("fleet.py", "missing"): "the flag service has no such flag (fleet.Answer), not a verdict",
    ("fleet_providers.py", "unreadable"): "a flagd file's digest when it cannot be read, not a verdict",
    ("fleet_settings.py", "missing"): "pydantic's error type for an absent field, not a verdict",
}

#: where the words stand for a user's own code: feature files are written against the public
#: declaration API, where an option's kind is given as its word (``Option("n", "int")``)
NOT_CHECKED = ("_data",)


def _words() -> dict[str, set[str]]:
    """word -> the modules it may be written in (``ok`` is a cell and a verdict: two homes)."""
    out: dict[str, set[str]] = {}
    for enum, home in HOMES.items():
        for m in enum:
            if m.value not in SHARED:
                out.setdefault(m.value, set()).add(home)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def _field_names(tree: ast.AST) -> set[int]:
    """String constants used as a JSON object's field name (``{"ok": ...}``, ``d["missing"]``,
    ``d.get("installed")``): a name that is an identifier is a field, not a word of the
    vocabulary (``"fixed-upstream"`` or ``"n/a"`` as a key still counts)."""
    out = set()
    for node in ast.walk(tree):
        keys = []
        if isinstance(node, ast.Dict):
            keys = node.keys
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "pop", "setdefault") and node.args:
            keys = [node.args[0]]
        out.update(id(k) for k in keys
                   if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier())
    return out


def _found() -> list[tuple[str, int, str]]:
    """``(module, line, word)`` of every vocabulary word written outside its home."""
    words = _words()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(NOT_CHECKED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree) | _field_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value in words and id(node) not in skip and \
                    rel not in words[node.value] and (rel, node.value) not in OTHER_MEANING:
                found.append((rel, node.lineno, node.value))
    return found


def test_no_vocabulary_word_is_written_outside_its_enum_module():
    words = _words()
    assert [f"{rel}:{line}: {word!r} (use its enum, home {' or '.join(sorted(words[word]))})"
            for rel, line, word in _found()] == []


def test_the_scan_sees_a_word_written_as_text(tmp_path, monkeypatch):
    """The check itself: a comparison with a state word, a cell word as a key and a kind as an
    argument are found; a field name and a docstring are not."""
    source = ('"""installed"""\n'
              'ok = st == "installed"\n'
              'styles = {"n/a": "dim", "ok": 1}\n'
              'cast("int", 1)\n'
              'row["missing"]\n')
    (tmp_path / "demo.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    assert sorted(_found()) == [("demo.py", 2, "installed"), ("demo.py", 3, "n/a"),
                                ("demo.py", 4, "int")]


@pytest.mark.parametrize("enum", list(HOMES))
def test_each_vocabulary_is_a_str_enum(enum):
    assert all(isinstance(m, str) and m == m.value for m in enum)
