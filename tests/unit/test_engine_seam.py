"""The engine seam holds: the core names the engine only through ``engine.EngineAdapter`` (no
string constant, import or comment outside ``engines/sglang/`` names sglang), and the shipped
features import nothing from a private ``dsv41_flags._*`` module."""
import ast
import tokenize
from pathlib import Path

from ._child import REPO


def _code_strings_imports_comments(path: Path):
    """``(lineno, text)`` of every string constant that is not a docstring, every import and every
    comment in ``path``."""
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


def test_only_the_engine_adapter_names_the_engine():
    """``grep -rn sglang src/dsv41_flags`` outside ``engines/sglang/`` finds docstrings at most: no
    string constant, import or comment names the engine (the core reaches it only through the
    seam, ``engine.EngineAdapter``). The shipped features (``_data``) are not the core."""
    src = REPO / "src" / "dsv41_flags"
    found = [f"{path.relative_to(src)}:{line}: {text[:80]!r}"
             for path in sorted(src.rglob("*.py"))
             if "sglang" not in path.relative_to(src).parts and "_data" not in path.relative_to(src).parts  # shipped features
             for line, text in _code_strings_imports_comments(path) if "sglang" in text]
    assert found == []


def test_shipped_features_use_only_the_public_api():
    """``features/*.py`` import nothing from a private ``dsv41_flags._*`` module."""
    bad = []
    for path in sorted((REPO / "features").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}:{node.lineno} {n}" for n in names
                    if n.startswith("dsv41_flags.") and n.split(".")[1].startswith("_")]
    assert bad == []
