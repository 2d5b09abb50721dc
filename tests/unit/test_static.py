"""The static check, one minimal input per failing kind of issue 14 (and the rules around them).

Each test writes a tiny package ``pkgx`` into a temporary source tree and checks requirements
against it with a ``Checker`` over that tree; no engine is involved.
"""
import json
import textwrap

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.requires import Require
from dsv41_flags.upgrade_gate.releases import TreeView
from dsv41_flags.upgrade_gate.static_check import Checker


@pytest.fixture
def verdict(tmp_path):
    def write(source: str, **others: str):
        pkg = tmp_path / "pkgx"
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "mod.py").write_text(textwrap.dedent(source))
        for name, text in others.items():
            (pkg / f"{name}.py").write_text(textwrap.dedent(text))
        checker = Checker(TreeView(tmp_path, str(tmp_path)))
        return lambda text: checker.verdict("pkgx.mod", Require.parse(text))
    return write


def states(check, *texts):
    return [check(t).verdict for t in texts]


# 1. a module-level assignment to a class must not switch its checking off
def test_class_attribute_set_at_module_level_is_added_not_a_free_pass(verdict):
    check = verdict("""
        class Patched:
            def run(self, x): ...
        Patched.tag = 1
        setattr(Patched, "other", 2)
    """)
    assert states(check, "Patched.tag", "Patched.other", "Patched.run(x)") == ["ok"] * 3
    assert states(check, "Patched.nope", "Patched.run(y)") == ["missing", "missing"]
    assert check("Patched.nope").closest == ""
    assert check("Patched.runn").closest == "Patched.run"


def test_name_rebound_to_a_call_is_undecided_below_never_ok(verdict):
    check = verdict("""
        import msgspec
        class ServerArgs:
            tp_size: int = 1
        ServerArgs.__annotations__ = {}
        ServerArgs = msgspec.defstruct("ServerArgs", [])
    """)
    assert check("ServerArgs").verdict == "ok"
    for text in ("ServerArgs.tp_size", "ServerArgs.nope", "ServerArgs(tp_size)"):
        v = check(text)
        assert v.verdict == "undecided" and "defstruct" in v.why, v


def test_setattr_with_a_computed_name_opens_the_class(verdict):
    check = verdict("""
        class C:
            a = 1
        for n in ("x", "y"):
            setattr(C, n, 0)
    """)
    assert states(check, "C.a", "C.x") == ["ok", "undecided"]


# 2. *args / **kwargs: one rule
def test_param_named_args_or_kwargs_is_found(verdict):
    check = verdict("""
        def empty_context(*args, **kwargs): ...
        def plain(a, *, b): ...
    """)
    assert states(check, "empty_context(kwargs)", "empty_context(args)") == ["ok", "ok"]
    assert check("empty_context(anything)").verdict == "undecided"     # only **kwargs absorbs it
    assert "**kwargs" in check("empty_context(anything)").why
    assert states(check, "plain(a, b)", "plain(c)") == ["ok", "missing"]


# 3. bases from the standard library
def test_stdlib_bases_resolved_live(verdict):
    check = verdict("""
        import enum
        from typing import NamedTuple, Generic, TypeVar
        T = TypeVar("T")
        class Pair(NamedTuple):
            a: int
            b: int = 0
        class Mode(enum.IntEnum):
            X = 1
        class Box(Generic[T]):
            pass
        class Err(ValueError):
            pass
    """)
    assert states(check, "Pair._replace", "Pair.a", "Pair._fields", "Pair(a, b)",
                  "Mode.bit_length", "Mode.X", "Box.mro", "Err.with_traceback") == ["ok"] * 8
    assert states(check, "Pair.c", "Mode.Y", "Box.nope", "Err.nope") == ["missing"] * 4


# 4. TYPE_CHECKING imports do not exist at run time; namedtuple(...) classes are closed
def test_type_checking_names_are_missing_and_namedtuples_closed(verdict):
    check = verdict("""
        from __future__ import annotations
        from collections import namedtuple
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from pkgx.other import Runner
        else:
            Alt = 1
        Point = namedtuple("Point", ["x", "y"])
        class P3(namedtuple("P3", "x y z")):
            def norm(self): ...
    """, other="class Runner: ...\n")
    v = check("Runner")
    assert v.verdict == "missing" and "TYPE_CHECKING" in v.why
    assert states(check, "Alt", "Point.x", "Point._asdict", "Point(x, y)", "P3.z", "P3.norm") == ["ok"] * 6
    assert states(check, "Point.z", "P3.w") == ["missing", "missing"]


def test_conditional_and_try_bindings(verdict):
    check = verdict("""
        import os
        if os.environ.get("X"):
            only_if = 1
        if os.environ.get("Y"):
            both = 1
        else:
            both = 2
        try:
            import not_a_module_anywhere as maybe_mod
        except ImportError:
            pass
        try:
            from not_a_module_anywhere import thing
        except ImportError:
            thing = None
        gone = 1
        del gone
    """)
    assert states(check, "only_if", "both", "maybe_mod", "thing", "gone") == \
        ["undecided", "ok", "undecided", "ok", "missing"]


def test_annotation_only_names(verdict):
    check = verdict("""
        from dataclasses import dataclass
        class Plain:
            x: int
        @dataclass
        class Data:
            x: int
            y: int = 0
        module_level: int
    """)
    assert states(check, "Plain.x", "Data.x", "Data.y", "Data(x, y)", "module_level") == \
        ["missing", "ok", "ok", "ok", "missing"]


def test_engine_bases_reexports_and_aliases(verdict):
    check = verdict("""
        from .base import Base, helper as renamed
        from .base import *
        Alias = Base
        class Child(Base):
            def own(self): ...
    """, base="""
        __all__ = ["starred"]
        class Base:
            def inherited(self, a): ...
            @property
            def prop(self): ...
            @staticmethod
            def st(q): ...
            @classmethod
            def cm(cls, r): ...
        def helper(): ...
        def starred(): ...
        def not_starred(): ...
    """)
    assert states(check, "Child.inherited(a)", "Child.prop", "Child.st(q)", "Child.cm(r)",
                  "renamed", "starred", "Alias.inherited", "Child.own") == ["ok"] * 8
    assert states(check, "Child.nope", "not_starred", "Child.inherited(b)", "Alias.nope") == ["missing"] * 4


# 5. a module __getattr__
def test_module_getattr_followed_when_a_literal_dict(verdict):
    check = verdict("""
        import importlib
        _LAZY = {"Parser": "pkgx.other"}
        def __getattr__(name):
            module_name = _LAZY.get(name)
            if module_name is None:
                raise AttributeError(name)
            return getattr(importlib.import_module(module_name), name)
    """, other="class Parser:\n    def parse(self, text): ...\n")
    assert states(check, "Parser", "Parser.parse(text)") == ["ok", "ok"]
    assert states(check, "Nope") == ["missing"]


def test_other_module_getattr_is_undecided(verdict):
    check = verdict("""
        def __getattr__(name):
            return name.upper()
    """)
    assert check("Whatever").verdict == "undecided"


def test_live_check_uses_getattr_on_the_module(tmp_path, monkeypatch):
    from types import ModuleType

    from dsv41_flags import Feature
    from dsv41_flags.drift import missing_on, verdicts_on

    mod = ModuleType("lazy_mod")
    mod.__getattr__ = lambda name: 42 if name == "Served" else (_ for _ in ()).throw(AttributeError(name))
    f = Feature(name="lz", target="lazy_mod", install=lambda m, c: None, summary="s", engine="",
                requires=("Served", "Absent"))
    assert [v.verdict for v in verdicts_on(f, mod)] == ["ok", "missing"]
    assert missing_on(f, mod) == ["Absent"]


# 6. JSON: one verdict per declared requirement, as written
def test_check_json_has_one_verdict_per_requirement(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("class A:\n    def f(self, x, **kw): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "ff.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='ff', target='pkgx.mod', install=lambda m, c: None, summary='s',\n"
        "    engine='', requires=('A.g', 'A.g.h', 'A.f(x)', 'A.f(y)', 'A.f( x )'))\n")
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\n")
    r = CliRunner().invoke(app, ["check", "--all", "--json", "-s", str(settings)])
    data = json.loads(r.stdout)
    assert r.exit_code == 1
    verdicts = next(f for f in data["features"] if f["feature"] == "ff")["verdicts"]
    assert [(v["requirement"], v["verdict"]) for v in verdicts] == [
        ("A.g", "missing"), ("A.g.h", "missing"), ("A.f(x)", "ok"), ("A.f(y)", "undecided"),
        ("A.f( x )", "ok")]
    assert all(v["why"] for v in verdicts)


def test_getattr_with_membership_test_and_pairs(verdict):
    check = verdict("""
        import importlib
        _LAZY = {"Fast": ("pkgx.other", "Parser")}
        def __getattr__(name):
            if name in _LAZY:
                mod, attr = _LAZY[name]
                return getattr(importlib.import_module(mod), attr)
            raise AttributeError(name)
    """, other="class Parser:\n    def parse(self, text): ...\n")
    assert states(check, "Fast", "Fast.parse(text)", "Parser", "Fast.nope") == \
        ["ok", "ok", "missing", "missing"]


def test_changed_in_place_and_function_globals(verdict):
    check = verdict("""
        from .other import *
        __all__ = ["a"]
        __all__ += ["b"]
        a = b = 1
        def setup():
            global late
            late = 1
    """, other="__all__ = ['x']\n__all__.append('y')\nx = y = 1\n")
    assert states(check, "a", "b", "x", "y", "late") == ["ok", "ok", "ok", "undecided", "undecided"]


def test_decorators_that_replace_the_signature_make_parameters_undecided(verdict):
    check = verdict("""
        import functools
        def keeps(fn):
            @functools.wraps(fn)
            def inner(*args, **kwargs):
                return fn(*args, **kwargs)
            return inner
        def registers(fn):
            return fn
        def replaces(fn):
            def inner(*args, **kwargs):
                return fn(*args, **kwargs)
            return inner
        @keeps
        def a(x): ...
        @registers
        def b(x): ...
        @replaces
        def c(x): ...
        @functools.lru_cache(maxsize=None)
        def d(x): ...
    """)
    assert states(check, "a(x)", "b(x)", "c(x)", "d(x)", "a(y)", "c") == \
        ["ok", "ok", "undecided", "ok", "missing", "ok"]


def test_module_level_reassignment_of_a_method_and_namedtuple_subclass_constructor(verdict):
    check = verdict("""
        from collections import namedtuple
        class K:
            def run(self, x): ...
        K.run = lambda self, *a, **k: None
        class P(namedtuple("P", "x y")):
            pass
        fields = ["u"]
        Dyn = namedtuple("Dyn", fields)
    """)
    assert states(check, "K.run", "K.run(x)", "P(x, y)", "P(z)", "Dyn.u", "Dyn.zz") == \
        ["ok", "undecided", "ok", "missing", "undecided", "undecided"]


def test_compiled_module_and_unreadable_source_are_undecided(verdict, tmp_path):
    check = verdict("from pkgx.fast import thing\nfrom pkgx import broken\n")
    (tmp_path / "pkgx" / "fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    (tmp_path / "pkgx" / "broken.py").write_text("def (:\n")
    assert states(check, "thing", "thing.anything") == ["ok", "undecided"]
    v = check("broken.x")
    assert v.verdict == "undecided" and "cannot be parsed" in v.why, v


def test_class_rebuilt_from_its_own_namespace_keeps_its_body_only(verdict):
    check = verdict("""
        import msgspec
        class ServerArgs:
            def resolve_once(self, strict): ...
        ServerArgs._NS = {}
        ServerArgs = msgspec.defstruct("ServerArgs", [], namespace={
            _k: _v for _k, _v in vars(ServerArgs).items() if _k not in ("__dict__", "resolve_once")})
        class Other:
            def keep(self): ...
        Other = msgspec.defstruct("Other", [], namespace=dict(vars(Other)))
        class Filtered:
            def keep(self): ...
        Filtered = make(namespace={k: v for k, v in vars(Filtered).items() if k.startswith("x")})
    """)
    assert states(check, "ServerArgs._NS", "Other.keep", "Other.keep()") == ["ok", "ok", "ok"]
    assert states(check, "ServerArgs.resolve_once", "ServerArgs.tp_size", "Other.nope",
                  "Filtered.keep") == ["undecided"] * 4
