"""The static check, one minimal input per kind of requirement it must catch (and the rules around
them).

Each test writes a tiny package ``pkgx`` into a temporary source tree and checks requirements
against it with a ``Checker`` over that tree; no engine is involved.
"""
import json
import textwrap
from pathlib import Path

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


def test_assignment_expressions_bind_where_their_statement_runs(verdict):
    """``if arch := env.get(): ...`` at module level binds ``arch`` whatever the branch (sglang's
    ``model_config.external_mm_model_arch``); under ``and`` / ``or`` or in a comprehension it may
    not run."""
    check = verdict("""
        import os
        if arch := os.environ.get("A"):
            pass
        while (line := os.environ.get("B")) and False:
            pass
        if os.environ.get("C") and (late := 1):
            pass
        squares = [y := x for x in range(3)]
        fn = lambda: (never := 1)
    """)
    assert states(check, "arch", "line", "late", "y", "never", "archh") == \
        ["ok", "ok", "undecided", "undecided", "missing", "missing"]


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
    # defstruct with literal fields says every name: the rest is missing (msgspec.Struct's own
    # attributes excepted); a namespace not read from the source leaves names undecided
    assert states(check, "ServerArgs.resolve_once", "ServerArgs.tp_size", "Other.nope") == \
        ["missing"] * 3
    assert states(check, "ServerArgs.__struct_fields__", "Other.__struct_config__") == ["ok", "ok"]
    assert states(check, "Filtered.keep") == ["undecided"]


# a class rebuilt by msgspec.defstruct from fields collected over namespace classes (sglang's
# ServerArgs): the fields are read from the source
COLLECTOR = """
    import msgspec
    def collect_input_fields(sources):
        annotations, defaults = {}, {}
        for source in sources:
            for f in msgspec.structs.fields(source):
                annotations[f.name] = f.type
        return annotations, defaults, {}
"""
PARALLEL = """
    import msgspec
    from typing import ClassVar
    class Parallel(msgspec.Struct):
        _NS_PATH = "parallel"
        derived = object()
        tp_size: int = 1
        dp_size: int = 1
        limit: ClassVar[int] = 4
    class Base(msgspec.Struct):
        seed: int = 0
    class Model(Base):
        model_path: str = ""
"""
REBUILT = """
    import msgspec
    from pkgx.fields import collect_input_fields
    from pkgx.parallel import Parallel, Model
    class ServerArgs:
        def resolve_once(self): ...
    _INPUT_NAMESPACES = [Parallel, Model]
    {between}
    _annotations, _defaults, _namespaces = collect_input_fields(_INPUT_NAMESPACES)
    ServerArgs.__annotations__ = {{**_annotations, **ServerArgs.__annotations__}}
    ServerArgs._NS_BY_FIELD = _namespaces
    ServerArgs = msgspec.defstruct(
        "ServerArgs",
        [(_n, _a, _defaults[_n]) if _n in _defaults else (_n, _a)
         for _n, _a in ServerArgs.__annotations__.items()],
        namespace={{_k: _v for _k, _v in vars(ServerArgs).items()
                   if _k not in ("__dict__", "__weakref__", "__annotations__")}},
        dict=True,{extra}
    )
"""


def test_class_rebuilt_by_defstruct_from_collected_fields_has_those_fields(verdict):
    check = verdict(REBUILT.format(between="", extra=""), fields=COLLECTOR, parallel=PARALLEL)
    assert states(check, "ServerArgs.tp_size", "ServerArgs.model_path", "ServerArgs.seed",
                  "ServerArgs.resolve_once", "ServerArgs._NS_BY_FIELD", "ServerArgs(tp_size, seed)",
                  "ServerArgs.__struct_fields__") == ["ok"] * 7
    assert states(check, "ServerArgs.tp_sizes", "ServerArgs.derived", "ServerArgs.limit",
                  "ServerArgs._NS_PATH", "ServerArgs(nope)") == ["missing"] * 5
    assert check("ServerArgs.tp_sizes").closest == "ServerArgs.tp_size"


@pytest.mark.parametrize("between,extra", [
    ("_INPUT_NAMESPACES.append(Parallel)", ""),                 # the list changed in place
    ("_INPUT_NAMESPACES = _INPUT_NAMESPACES + extra()", ""),    # rebound to something computed
    ("ServerArgs.__annotations__.update(more())", ""),          # annotations changed in place
    ("setattr(ServerArgs, '__annotations__', more())", ""),
    ("collect_input_fields = lambda s: ({}, {}, {})", ""),      # not the collector any more
    ("", "\n        bases=(Other,),"),                          # bases not read
])
def test_defstruct_fields_not_read_from_the_source_stay_undecided(verdict, between, extra):
    check = verdict(REBUILT.format(between=between, extra=extra), fields=COLLECTOR, parallel=PARALLEL)
    assert states(check, "ServerArgs.resolve_once") == ["ok"]
    assert states(check, "ServerArgs.tp_size", "ServerArgs.nope", "ServerArgs(tp_size)") == \
        ["undecided"] * 3


# ---------------------------------------------------------------- undecided is not drift
UNDECIDED_TARGETS = {
    # a class rebuilt by a call the source cannot follow (the shape of sglang's ServerArgs)
    "rebuilt class": ("def rebuild(cls):\n    cls.tp_size = 1\n    return cls\n"
                      "class ServerArgs:\n    pass\nServerArgs = rebuild(ServerArgs)\n",
                      "ServerArgs.tp_size"),
    "module __getattr__": ("def __getattr__(name):\n    return name.upper()\n", "Anything"),
    "bound under a condition": ("import sys\nif sys.maxsize > 1:\n    tp_size = 1\n", "tp_size"),
}
BLOCKING_TARGETS = {
    "missing": ("class ServerArgs:\n    pass\n", "ServerArgs.tp_size"),
    "absorbed by **kwargs": ("def launch(**kwargs):\n    pass\n", "launch(tp_size)"),
}


@pytest.fixture
def strict_launch(tmp_path, monkeypatch):
    """``write(source, requirement)``: a module ``undecided_target_<n>`` with ``source`` and one
    feature requiring ``requirement`` on it, armed, strict (the default); returns the env."""
    import os
    import uuid

    for key in [k for k in os.environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def write(source: str, requirement: str) -> dict:
        target = f"undecided_target_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{target}.py").write_text(source)
        feats = tmp_path / "features"
        feats.mkdir(exist_ok=True)
        (feats / "ff.py").write_text(
            "from dsv41_flags import Feature\n"
            f"FEATURE = Feature(name='ff', target={target!r}, install=lambda m, c: None, summary='s',\n"
            f"    engine='', requires=({requirement!r},))\n")
        settings = tmp_path / "settings.toml"
        settings.write_text("[default]\nff = true\n")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("DSV41_")},
               "DSV41_SETTINGS": str(settings), "HOME": str(tmp_path),
               "PYTHONPATH": os.pathsep.join([str(tmp_path)] + [p for p in os.environ.get(
                   "PYTHONPATH", "").split(os.pathsep) if p]),
               "XDG_CACHE_HOME": str(tmp_path / "cache"), "TARGET": target}
        monkeypatch.setenv("DSV41_SETTINGS", str(settings))
        return env
    return write


def _cli(*args):
    r = CliRunner().invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def _ff(rows: list[dict], key: str = "name") -> dict:
    """The local feature ``ff`` among the rows (the shipped features sit beside it)."""
    (row,) = [r for r in rows if r[key] == "ff"]
    return row


@pytest.mark.parametrize("kind", sorted(UNDECIDED_TARGETS))
def test_an_undecided_requirement_reads_as_undecided_never_as_drift(strict_launch, kind):
    import subprocess
    import sys
    from pathlib import Path

    env = strict_launch(*UNDECIDED_TARGETS[kind])
    r = _cli("status", "--json")
    row = _ff(json.loads(r.stdout)["features"])
    assert r.exit_code == 0, r.output
    assert row["state"] == "armed" and row["missing"] == [] and len(row["undecided"]) == 1, row
    r = _cli("status")
    assert r.exit_code == 0 and "drifted" not in r.output and "would stop" not in r.output
    assert "undecided:" in r.output and "check --import" in r.output
    r = _cli("check", "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 0 and not data["drifted"] and not data["ok"], data   # never counted ok
    assert _ff(data["features"], "feature")["missing"] == [] and _ff(data["features"], "feature")["undecided"]
    r = _cli("check")
    assert r.exit_code == 0 and "DRIFT" not in r.output and "UNDECIDED" in r.output
    assert _cli("validate", "--only").exit_code == 0
    # run starts the command; the boot imports the target and its live check decides
    cli = str(Path(sys.executable).with_name("dsv41-flags"))
    code = ("import importlib, os, dsv41_flags\n"
            "importlib.import_module(os.environ['TARGET'])\nprint('started')\n")
    proc = subprocess.run([cli, "run", "--", sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=120)
    assert "would stop" not in proc.stderr and "not starting" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and "started" in proc.stdout, proc.stderr


@pytest.mark.parametrize("kind", sorted(BLOCKING_TARGETS))
def test_a_requirement_the_boot_would_stop_on_is_drift(strict_launch, kind):
    strict_launch(*BLOCKING_TARGETS[kind])
    r = _cli("status", "--json")
    row = _ff(json.loads(r.stdout)["features"])
    assert r.exit_code == 1 and row["state"] == "drifted" and row["missing"], row
    assert "would stop" in _cli("status").output
    r = _cli("check")
    assert r.exit_code == 1 and "DRIFT" in r.output


# ---------------------------------------------------------------- compiled extension modules
@pytest.fixture
def compiled(tmp_path, monkeypatch):
    """``pkgx._csv``: a copy of the standard library's compiled ``_csv`` module inside package
    ``pkgx`` (its init function is named for the last component, so it imports there), and
    ``pkgx.mod`` importing names from it."""
    import _csv
    import shutil

    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(_csv.__file__, pkg / Path(_csv.__file__).name)
    (pkg / "mod.py").write_text("from pkgx._csv import reader, Dialect\nfrom pkgx._csv import *\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


REQS_ON_COMPILED = [("pkgx.mod", "Dialect.delimiter", "ok"), ("pkgx.mod", "Dialect.nope", "missing"),
                    ("pkgx.mod", "writer", "ok"), ("pkgx.mod", "QUOTE_ALL", "ok"),
                    ("pkgx.mod", "nope", "missing"), ("pkgx._csv", "field_size_limit", "ok"),
                    ("pkgx._csv", "readers", "missing"), ("pkgx._csv", "Error.args", "ok"),
                    ("pkgx.mod", "reader(nope)", "undecided")]   # a builtin without a signature


@pytest.mark.parametrize("target,text,live", REQS_ON_COMPILED)
def test_names_of_a_compiled_module_are_decided_by_a_live_look_when_allowed(compiled, target, text, live):
    assert Checker().verdict(target, Require.parse(text)).verdict == "undecided"
    v = Checker(live_extensions=True).verdict(target, Require.parse(text))
    assert v.verdict == live, v
    if live == "missing" and target == "pkgx._csv":
        assert "looked at live" in v.why


def test_check_live_extensions_option(compiled, tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "ff.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='ff', target='pkgx.mod', install=lambda m, c: None, summary='s',\n"
        "    engine='', requires=('Dialect.delimiter', 'writer'))\n")
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\n")
    base = ["check", "--all", "--json", "-s", str(settings)]
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 0 and not json.loads(r.stdout)["ok"]            # undecided, not drift
    assert "--live-extensions" in _ff(json.loads(r.stdout)["features"], "feature")["undecided"][0]
    r = CliRunner().invoke(app, base + ["--live-extensions"])
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"], r.stdout
    r = CliRunner().invoke(app, base + ["--live-extensions", "--engine", str(tmp_path)])
    assert r.exit_code == 1 and "--live-extensions" in json.loads(r.stdout)["problems"][0]["message"]


# ------------------------------------------------------------------ the import probe
def test_the_probe_never_imports_the_engine_a_release_or_code_of_no_distribution(tmp_path):
    from dsv41_flags.upgrade_gate.releases import TreeView
    from dsv41_flags.upgrade_gate.static_check import Checker

    installed = Checker()
    assert "engine" in installed.probe_refused("sglang.srt.server_args", "sglang")
    assert "unknown" in installed.probe_refused("packaging.version", "")   # engine unknown
    assert installed.probe_refused("packaging.version", "sglang") == ""    # a dependency
    assert "not a package of an installed distribution" in \
        installed.probe_refused("no_such_top_level_here", "sglang")
    (tmp_path / "packaging").mkdir()
    release = Checker(TreeView(tmp_path, "tree"))
    assert "release" in release.probe_refused("packaging.version", "sglang")
    assert "off" in Checker(probe=False).probe_refused("packaging.version", "sglang")


def test_the_probe_decides_what_a_dependency_serves_through_its_module_getattr():
    """``packaging`` is a real installed distribution; its names are looked up live in a child,
    with the boot's rule (``drift.verdicts_on``)."""
    from dsv41_flags.requires import Require
    from dsv41_flags.upgrade_gate.static_check import Checker

    got = Checker().probe("packaging.version", ["Version", "Versoin", "Version.public"])
    assert [v.verdict for v in got] == ["ok", "missing", "ok"], got
    assert got[1].closest == "Version"
    checker = Checker()
    reqs = [Require.parse("Version"), Require.parse("Versoin")]
    assert [v.verdict for v in checker.verdicts("packaging.version", reqs, "sglang")] == ["ok", "missing"]


def test_a_probe_that_cannot_import_says_why():
    from dsv41_flags.upgrade_gate.static_check import Checker

    why = Checker().probe("packaging.no_such_module_here", ["X"])
    assert isinstance(why, str) and "importing packaging.no_such_module_here failed" in why
    assert "ModuleNotFoundError" in why


def test_a_child_that_does_not_finish_in_time_is_stopped():
    from dsv41_flags.upgrade_gate.probe import run_child

    why = run_child("import time; time.sleep(60)", ["m"], 1)
    assert why == "importing m did not finish within 1 s"
