"""What a shipped feature or a docs example may import: the documented public API only.

The public API is the package's ``__all__`` and four modules, each with its own ``__all__``
(``dsv41_flags.live``, ``dsv41_flags.cache_keeping``, ``dsv41_flags.engines.sglang``,
``dsv41_flags.testing``). Every other module is internal. Read from the code with ``ast``: the
shipped features (``_data/features``), the docs' examples (``docs/examples``) and every
``python`` block of the docs and the README; a block that does not parse fails too (it could
hide an import)."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from ._child import REPO

PUBLIC_MODULES = ("dsv41_flags", "dsv41_flags.live", "dsv41_flags.cache_keeping",
                  "dsv41_flags.engines.sglang", "dsv41_flags.testing")


def _public() -> dict[str, set[str]]:
    return {name: set(importlib.import_module(name).__all__) for name in PUBLIC_MODULES}


def violations(source: str, public: dict[str, set[str]]) -> list[str]:
    """``line: what`` for each use of a non-public module or name in ``source``: ``import M`` /
    ``from M import n`` of a ``dsv41_flags`` module that is not public, a name not in a public
    module's ``__all__`` (a public submodule counts as a name of its parent), and an attribute of
    an alias of a public module that is not in its ``__all__``."""
    found, aliases = [], {}
    tree = ast.parse(source)

    def exported(module: str, name: str) -> bool:
        return name in public[module] or f"{module}.{name}" in public

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "dsv41_flags":
                    continue
                if a.name not in public:
                    found.append(f"{node.lineno}: import {a.name}")
                else:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "dsv41_flags"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dsv41_flags":
            if node.module not in public:
                found.append(f"{node.lineno}: from {node.module} import ...")
                continue
            for a in node.names:
                if not exported(node.module, a.name):
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
                elif f"{node.module}.{a.name}" in public:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and not exported(aliases[node.value.id], node.attr):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr} "
                         f"(not in {aliases[node.value.id]}.__all__)")
    return found


def _sources():
    for path in sorted((REPO / "src" / "dsv41_flags" / "_data" / "features").glob("*.py")):
        yield path.relative_to(REPO), path.read_text()
    for path in sorted((REPO / "docs" / "examples").rglob("*.py")):
        yield path.relative_to(REPO), path.read_text()
    for path in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            yield f"{path.relative_to(REPO)} python block {i + 1}", block


@pytest.mark.parametrize("where,source", list(_sources()), ids=lambda v: str(v)[:60])
def test_shipped_features_and_docs_examples_use_only_the_public_api(where, source):
    assert violations(source, _public()) == [], where


@pytest.mark.parametrize("source,expected", [
    ("from dsv41_flags.runtime import Runtime", ["1: from dsv41_flags.runtime import ..."]),
    ("import dsv41_flags.patch", ["1: import dsv41_flags.patch"]),
    ("from dsv41_flags import not_public", ["1: from dsv41_flags import not_public"]),
    ("import dsv41_flags.cache_keeping as k\nk.no_such_helper()",
     ["2: k.no_such_helper (not in dsv41_flags.cache_keeping.__all__)"]),
    ("from dsv41_flags import Feature, live\nlive.Toggle", []),
    ("import dsv41_flags\ndsv41_flags.activate()", []),
])
def test_the_check_finds_each_kind_of_non_public_use(source, expected):
    """The check can fail: each kind of use outside the public API is found."""
    assert violations(source, _public()) == expected


def test_every_module_says_whether_it_is_public():
    """A reader sees it at the top of each module: every module outside the public API opens
    with "Internal module: not part of the public API"; the public ones do not."""
    root = REPO / "src" / "dsv41_flags"
    public = {"__init__.py", "live.py", "cache_keeping.py", "testing.py", "engines/__init__.py",
              "engines/sglang/__init__.py"}
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel.startswith("_data"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if doc.startswith("Internal module: not part of the public API") == (rel in public):
            wrong.append(rel)
    assert wrong == []
