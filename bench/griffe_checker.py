"""The static check written over griffe (``griffelib``), for ``static_accuracy.py --checker
griffe``: the same sources (``SourceView``, its caps), the same requirement syntax and parameter
rule (``drift.param_verdict``), with griffe's public API doing the reading.

griffe's loader cannot be used on sglang: ``sglang/srt`` has no ``__init__.py`` (an implicit
namespace package inside a regular one) and the loader finds no ``sglang.srt``. So each module is
read by ``griffe.visit(name, filepath, code)`` (griffe's own visitor over the source our view
read, with griffe's built-in extensions such as dataclasses), and this module follows what
griffe records across modules:

- a module's member is an alias: ``runtime`` False (imported under ``if TYPE_CHECKING:``) is
  missing; else its ``target_path`` is followed (its module read the same way);
- a name not among a module's members: looked up in its ``from x import *`` modules, undecided
  when the module has a ``__getattr__`` or the name is a submodule, else missing;
- a class: its members, then each base's ``canonical_path`` followed (standard-library and
  builtin bases looked at live, as the project's checker does); an unresolved base or a
  metaclass makes a name not found undecided; a name of ``type`` is ok;
- a griffe ``Attribute`` (a name bound to a value griffe does not follow), a function's
  attribute other than a plain function's: undecided;
- parameters: ``Function.parameters``; a class's from its ``__init__`` (griffe's dataclasses
  extension writes one for a dataclass), searched through its bases; a property: undecided.
"""
from __future__ import annotations

import builtins
import importlib
import inspect
import logging
import sys
from pathlib import Path

import griffe

from dsv41_flags.drift import MISSING, OK, UNDECIDED, Verdict, param_verdict
from dsv41_flags.upgrade_gate.sources import COMPILED, InstalledView, SourceView

logging.getLogger("griffe").setLevel(logging.CRITICAL)   # griffe logs every alias it cannot resolve

_MAX = 12


class _Unknown:
    def __init__(self, why: str) -> None:
        self.why = why


class _Live:
    def __init__(self, obj) -> None:
        self.obj = obj


def _plain():  # the attributes every function has
    pass


def _stdlib(top: str) -> bool:
    return top in sys.stdlib_module_names or top == "builtins"


class GriffeChecker:
    """``verdict(target, req)`` as ``Checker.verdict``, read through griffe."""

    def __init__(self, view: SourceView | None = None) -> None:
        self.view = view or InstalledView()
        self.installed = InstalledView()
        self.extensions = griffe.load_extensions()
        self.modules: dict[str, griffe.Module | _Unknown | None] = {}

    def module(self, name: str):
        """The griffe Module of ``name``, None when no source is found, _Unknown when it has
        none griffe can read (compiled, a namespace package, a parse error)."""
        if name in self.modules:
            return self.modules[name]
        view = self.view if self.view.owns(name.split(".")[0]) else self.installed
        found = view.find(name)
        if found is None:
            out = None
        elif not found[0]:
            out = _Unknown(f"{name} is a namespace package")
        elif found[0].endswith(COMPILED):
            out = _Unknown(f"{name} is compiled")
        else:
            try:
                out = griffe.visit(name, Path(found[0]), view.read(found[0]).decode("utf-8"),
                                   extensions=self.extensions)
            except Exception as exc:  # noqa: BLE001 - a source griffe cannot visit
                out = _Unknown(f"griffe cannot read {name}: {type(exc).__name__}")
        self.modules[name] = out
        return out

    def path(self, dotted: str, depth: int):
        """The thing at a dotted path (``pkg.mod.Cls.attr``): the longest module prefix, then
        attribute steps."""
        parts = dotted.split(".")
        if _stdlib(parts[0]) or len(parts) == 1 and parts[0] in vars(builtins):
            obj = builtins if len(parts) == 1 else None
            try:
                obj = importlib.import_module(parts[0]) if obj is None else obj
                for p in (parts if len(parts) == 1 else parts[1:]):
                    obj = getattr(obj, p)
                return _Live(obj)
            except Exception:  # noqa: BLE001
                return _Unknown(f"{dotted} cannot be looked up")
        for cut in range(len(parts), 0, -1):
            mod = self.module(".".join(parts[:cut]))
            if mod is None:
                continue
            thing = mod
            for p in parts[cut:]:
                verdict, thing = self.attr(thing, p, depth + 1)
                if verdict != OK:
                    return _Unknown(f"{dotted}: {getattr(thing, 'why', verdict)}")
            return thing
        return _Unknown(f"no source for {dotted}")

    def member(self, obj, depth: int):
        """A member, its alias followed."""
        if isinstance(obj, griffe.Alias):
            if depth > _MAX:
                return _Unknown("too many aliases")
            return self.path(obj.target_path, depth + 1)
        return obj

    def attr(self, thing, name: str, depth: int = 0):
        """``(verdict, thing or _Unknown with why)`` for ``name`` on ``thing``."""
        if depth > _MAX:
            return UNDECIDED, _Unknown("too deep")
        if isinstance(thing, _Live):
            try:
                return OK, _Live(inspect.getattr_static(thing.obj, name))
            except AttributeError:
                return (OK, _Live(None)) if hasattr(thing.obj, name) else (MISSING, _Unknown("no such attribute"))
        if isinstance(thing, griffe.Module):
            got = thing.members.get(name)
            if got is not None:
                if got.is_alias and not got.runtime:
                    return MISSING, _Unknown(f"{name} exists only under TYPE_CHECKING")
                return OK, self.member(got, depth)
            undecided = ""
            for alias in thing.members.values():
                if alias.is_alias and alias.wildcard and not name.startswith("_"):
                    star = self.path(alias.wildcard, depth + 1)
                    if isinstance(star, _Unknown):
                        undecided = star.why
                        continue
                    verdict, found = self.attr(star, name, depth + 1)
                    if verdict == OK:
                        return verdict, found
                    if verdict == UNDECIDED:
                        undecided = found.why
            if "__getattr__" in thing.members:
                return UNDECIDED, _Unknown(f"{thing.path} has a module __getattr__")
            view = self.view if self.view.owns(thing.path.split(".")[0]) else self.installed
            if view.find(f"{thing.path}.{name}") is not None:
                return UNDECIDED, _Unknown(f"{thing.path}.{name} is a submodule")
            if undecided:
                return UNDECIDED, _Unknown(undecided)
            return MISSING, _Unknown(f"{thing.path} has no {name}")
        if isinstance(thing, griffe.Class):
            got = thing.members.get(name)
            if got is not None:
                return OK, self.member(got, depth)
            undecided = ""
            for base in thing.bases or ["object"]:
                path = base if isinstance(base, str) else getattr(base, "canonical_path", None) or str(base)
                found = self.path(path.split("[")[0], depth + 1)
                if isinstance(found, _Unknown):
                    undecided = undecided or f"base {path}: {found.why}"
                    continue
                verdict, got = self.attr(found, name, depth + 1)
                if verdict == OK:
                    return verdict, got
                if verdict == UNDECIDED:
                    undecided = undecided or got.why
            if hasattr(type, name):
                return OK, _Live(getattr(type, name))
            if "metaclass" in (getattr(thing, "keywords", None) or ()):
                undecided = undecided or "a metaclass"
            if undecided:
                return UNDECIDED, _Unknown(undecided)
            return MISSING, _Unknown(f"{thing.path} has no {name}")
        if isinstance(thing, griffe.Function) and hasattr(_plain, name):
            return OK, _Live(getattr(_plain, name))
        why = thing.why if isinstance(thing, _Unknown) else f"{type(thing).__name__} {thing.path}"
        return UNDECIDED, _Unknown(f"{name} on {why}: not followed")

    def params(self, thing, depth: int = 0):
        """``(names, has **kwargs)`` or why unknown."""
        if depth > _MAX:
            return "too deep"
        if isinstance(thing, _Live):
            try:
                sig = inspect.signature(thing.obj)
            except (TypeError, ValueError) as exc:
                return f"signature unreadable ({exc})"
            return list(sig.parameters), any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        if isinstance(thing, griffe.Function):
            if "property" in thing.labels:
                return "a property"
            names = [p.name for p in thing.parameters]
            return names, any(p.kind is griffe.ParameterKind.var_keyword for p in thing.parameters)
        if isinstance(thing, griffe.Class):
            verdict, init = self.attr(thing, "__init__", depth + 1)
            if verdict != OK:
                return f"__init__: {init.why}"
            if isinstance(init, _Live) and init.obj is object.__init__:
                return [], False
            if isinstance(init, _Live) and init.obj is type.__init__:   # a base not followed
                return f"the constructor of {thing.path} is not in the source griffe read"
            got = self.params(init, depth + 1)
            return got if isinstance(got, str) else ([n for n in got[0] if n != "self"], got[1])
        return getattr(thing, "why", f"{type(thing).__name__} is not followed")

    def verdict(self, target: str, req) -> Verdict:
        mod = self.module(target)
        if mod is None:
            return Verdict(req.text, MISSING, f"no source for module {target}", f"module {target}")
        thing, done = mod, []
        for part in req.path:
            try:
                verdict, thing = self.attr(thing, part)
            except Exception as exc:  # noqa: BLE001 - griffe raising on an odd source
                verdict, thing = UNDECIDED, _Unknown(f"griffe raised {type(exc).__name__}")
            done.append(part)
            if verdict != OK:
                return Verdict(req.text, verdict, thing.why, ".".join(done))
        if not req.params:
            return Verdict(req.text, OK, "found by griffe")
        got = self.params(thing)
        owner = ".".join(req.path)
        if isinstance(got, str):
            return Verdict(req.text, UNDECIDED, got, f"{owner}({', '.join(req.params)})")
        return param_verdict(req.text, owner, req.params, got[0], got[1])
