"""Static drift check: verify a feature's ``requires`` against the engine's *source*, without
importing the target (importing sglang takes seconds and, for many modules, a GPU).

The target's file is found through the top-level package's location (``find_spec`` of the
top-level name only, which does not execute it), parsed with ``ast``, and classes, functions,
methods, keyword parameters and module-level names (assignments, annotated names, imports and
re-exports) are looked up. A name imported from another module is followed into that module's
source when it can be found (a compiled module is trusted).
"""
from __future__ import annotations

import ast
import builtins
import importlib.util
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ._declare import Feature, Require

_MAX_FOLLOW = 4


@dataclass(frozen=True)
class StaticResult:
    """Outcome of a static check of one feature.

    source: the target's file (None when not found); missing: missing pieces, e.g.
    ``"module sglang.srt.x"``, ``"TargetVerifyExecutor.accept_and_finalize"``,
    ``"TargetVerifyExecutor.accept_and_finalize(folded_accept)"``.
    """

    feature: str
    target: str
    source: str | None
    missing: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when nothing is missing."""
        return not self.missing


def locate(module: str) -> Path | None:
    """Source file of dotted ``module`` found through its top-level package's location, or None."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if len(parts) == 1:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for base in spec.submodule_search_locations or ():
        path = Path(base).joinpath(*parts[1:])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


class Unreadable(Exception):
    """A source file that cannot be read or parsed (message says which file and why)."""


@lru_cache(maxsize=64)
def _parse(path: str) -> ast.Module:
    """The parsed source. Bytes go to the parser, so a ``# -*- coding: latin-1 -*-`` declaration
    is honoured as Python would. Raises Unreadable (unreadable file, bad encoding, syntax error)."""
    try:
        return ast.parse(Path(path).read_bytes(), filename=path)
    except SyntaxError as exc:
        raise Unreadable(f"source {path} cannot be parsed: {type(exc).__name__}: {exc.msg} "
                         f"(line {exc.lineno})") from None
    except (OSError, ValueError) as exc:  # unreadable, bad encoding, null bytes
        raise Unreadable(f"source {path} cannot be read: {type(exc).__name__}: {exc}") from None


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names bound by a module or class body (descending into if/try/with blocks)."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    out[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = list(node.body) + list(getattr(node, "orelse", [])) + list(getattr(node, "finalbody", []))
            for h in getattr(node, "handlers", []):
                inner += h.body
            out.update({k: v for k, v in _names(inner).items() if k not in out})
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    return {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}


def _imported_from(node: ast.ImportFrom, name: str, module: str) -> tuple[str, str] | None:
    """(module, original name) an ImportFrom binds ``name`` from, resolving relative imports
    (``module``'s package is itself when its source is a package ``__init__.py``)."""
    for alias in node.names:
        if (alias.asname or alias.name) == name:
            if node.level:
                src_file = locate(module)
                package = module.split(".")
                if not (src_file and src_file.name == "__init__.py"):
                    package = package[:-1]
                base = package[: len(package) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            return src, alias.name
    return None


def _star_sources(body: list[ast.stmt], module: str) -> list[str]:
    """Modules re-exported with ``from x import *``."""
    out = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            origin = _imported_from(node, "*", module)
            if origin:
                out.append(origin[0])
    return out


def lookup(module: str, path: tuple[str, ...], depth: int = 0):
    """Find ``path`` in ``module``'s source. Returns (node or None, missing piece or "")."""
    src = locate(module)
    if src is None:
        return None, f"module {module}"
    names = _names(_parse(str(src)).body)
    node: ast.AST | None = None
    for i, part in enumerate(path):
        scope = names if i == 0 else (_names(node.body) if isinstance(node, ast.ClassDef) else None)
        if scope is None or part not in scope:
            if scope is None:  # an attribute of an instance, function or module: not visible
                break           # in the source, trusted (``--import`` checks it live)
            if isinstance(node, ast.ClassDef):  # inherited from a base class?
                return _from_bases(module, node, path, i, depth)
            if i == 0 and depth < _MAX_FOLLOW:
                if src.name == "__init__.py" and locate(f"{module}.{part}") is not None:
                    if len(path) == 1:  # a submodule of a package
                        return ast.Module(body=[], type_ignores=[]), ""
                    return lookup(f"{module}.{part}", path[1:], depth + 1)
                for star in _star_sources(_parse(str(src)).body, module):  # ``from x import *``
                    found, missing = lookup(star, path, depth + 1)
                    if not missing:
                        return found, ""
            return None, ".".join(path[: i + 1])
        node = scope[part]
        if isinstance(node, ast.ImportFrom) and depth < _MAX_FOLLOW:
            origin = _imported_from(node, part, module)
            if origin and origin[1] != "*":
                found, missing = lookup(origin[0], (origin[1],) + path[i + 1:], depth + 1)
                if missing.startswith("module "):  # source not found: trust the import
                    return node, ""
                if missing:  # say it in the target's terms
                    return None, ".".join(path[: i + 1] + tuple(missing.split(".")[1:]))
                return found, ""
    return node, ""


def _from_bases(module: str, cls: ast.ClassDef, path: tuple[str, ...], i: int, depth: int):
    """Look ``path[i:]`` up in the bases of ``cls`` (defined in ``module``). A base that cannot be
    resolved from source (compiled, generic, dynamic) is trusted."""
    missing_here = ".".join(path[: i + 1])
    if depth >= _MAX_FOLLOW:
        return None, ""
    for base in cls.bases:
        dotted = ast.unparse(base)
        if not all(p.isidentifier() for p in dotted.split(".")):
            return None, ""  # Generic[T], call results...: not resolvable, trusted
        if hasattr(builtins, dotted.split(".")[0]):  # object, Exception, dict...: no source
            obj = builtins
            if all((obj := getattr(obj, p, None)) is not None for p in dotted.split(".") + list(path[i:])):
                return None, ""
            continue
        if _imported_from_elsewhere(module, dotted.split(".")[0]):
            continue  # a base from another distribution (msgspec.Struct, torch.nn.Module...) does
            #           not define the engine's members: not searched (``--import`` sees them)
        found, missing = lookup(module, tuple(dotted.split(".")) + path[i:], depth + 1)
        if not missing or missing.startswith("module "):
            return found, ""
        if missing.split(".")[: len(dotted.split("."))] == dotted.split("."):
            continue  # the base has no such attribute: try the next one
        return None, ""  # the base itself could not be found in the source: trusted
    return None, missing_here


def _imported_from_elsewhere(module: str, name: str) -> bool:
    """True when ``name`` is bound in ``module`` by an import from another top-level package."""
    src = locate(module)
    node = _names(_parse(str(src)).body).get(name) if src else None
    top = module.split(".")[0]
    if isinstance(node, ast.Import):
        return next((a.name for a in node.names if (a.asname or a.name).split(".")[0] == name),
                    name).split(".")[0] != top
    if isinstance(node, ast.ImportFrom):
        origin = _imported_from(node, name, module)
        return origin is not None and origin[0].split(".")[0] != top
    return False


def check_feature(feature: Feature) -> StaticResult:
    """Check every ``requires`` entry of ``feature`` against the target's source (no import)."""
    src = locate(feature.target)
    if src is None:
        return StaticResult(feature.name, feature.target, None, (f"module {feature.target}",))
    missing: list[str] = []
    for req in feature.parsed_requires:
        try:
            missing.extend(check_require(feature.target, req))
        except Unreadable as exc:  # reported as drift (the requirement cannot be verified)
            missing.append(f"{'.'.join(req.path)} (unverifiable: {exc})")
        except RecursionError:
            missing.append(f"{'.'.join(req.path)} (unverifiable: the source's imports form a cycle)")
    return StaticResult(feature.name, feature.target, str(src), tuple(missing))


def check_require(target: str, req: Require) -> list[str]:
    """Missing pieces for one requires entry (empty when present)."""
    node, missing = lookup(target, req.path)
    if missing:
        return [missing]
    if req.params:
        if isinstance(node, ast.ClassDef):  # a class: its __init__, else its annotated fields
            init = _names(node.body).get("__init__")
            params = (_params(init) if isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef))
                      else {n for n, v in _names(node.body).items() if isinstance(v, ast.AnnAssign)})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = _params(node)
        else:  # an assignment or an import we could not follow: the source cannot tell
            return []
        return [f"{'.'.join(req.path)}({p})" for p in req.params if p not in params]
    return []
