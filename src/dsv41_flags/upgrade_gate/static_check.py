"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Static drift check: a verdict per ``requires`` entry from the engine's *source*, without
importing the engine (importing sglang takes seconds and, for many modules, a GPU).

Source comes from a ``SourceView``: the installed environment (``InstalledView``: found through
``find_spec`` of the top-level name only, which executes nothing), or a release read in place
(a wheel or a source tree, see ``_release``). Modules of the standard library are looked at
live (importing them is safe); other distributions are read from the installed environment's
source when it has some, else the answer is ``undecided``.

Rules (each kind has a unit test in ``tests/unit/test_static.py``):

- Module and class bodies are read in order, as Python runs them: the last binding of a name
  wins (an assignment expression ``:=`` in a statement's test or value binds too); a name bound
  only in one branch of an ``if`` / ``try`` / loop is *undecided*; names bound only under
  ``if TYPE_CHECKING:`` do not exist at run time (*missing*); ``del`` removes.
- ``Cls.attr = ...`` / ``setattr(Cls, "attr", ...)`` at module level add ``attr`` to the class; a
  ``setattr`` with a computed name makes unknown names of that class undecided. A name rebound to
  something the source cannot follow (``X = msgspec.defstruct(...)``) exists, but everything
  below it is undecided.
- Annotation-only names in a class body exist as class attributes only for dataclasses,
  ``typing.NamedTuple`` and ``msgspec.Struct`` classes (their fields); on a plain class they do
  not; under an unknown base they are undecided.
- Bases: engine classes are searched in source; standard-library bases (``IntEnum``,
  ``typing.NamedTuple``, ``Generic[T]``...) by live introspection of the stdlib class; a base that
  cannot be resolved makes a name not found elsewhere undecided. ``namedtuple(...)`` classes have
  their fields and the namedtuple API only.
- A module ``__getattr__`` that serves names from a literal dict (``_LAZY = {...}``;
  ``m = _LAZY.get(name)``; ``if m is None: raise AttributeError``) is followed; any other module
  ``__getattr__``, ``globals()`` writes at module level, or an unresolvable ``from x import *``
  make unknown names undecided.
- Parameters: the rule of ``drift.param_verdict`` (``**kwargs`` alone -> undecided).
- The import probe (``Checker.probe``, ``upgrade_gate.probe``): what the source leaves undecided
  on a target that belongs to an installed distribution other than the feature's engine (torch:
  a compiled package with a module ``__getattr__``, ``from torch._C import *`` and ``globals()``
  writes) is decided by importing that target in a child interpreter within
  ``probe.PROBE_TIMEOUT_S`` and applying the boot's own live rule (``drift.verdicts_on``). The
  engine, a release being checked and code of no installed distribution are never imported; a
  probe that fails or times out leaves the verdict undecided, saying why.
"""
from __future__ import annotations

import ast
import builtins
import collections
import importlib
import inspect
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from dsv41_flags.declare import Feature
from dsv41_flags.requires import Require
from dsv41_flags.drift import MISSING, OK, UNDECIDED, Verdict, _closest, param_verdict
from dsv41_flags.upgrade_gate.probe import decide, list_names
from dsv41_flags.upgrade_gate.sources import COMPILED, InstalledView, SourceView, Unreadable
from dsv41_flags.text import exception_text

_MAX_FOLLOW = 8
#: non-stdlib modules safe to import for live introspection (no side effects, fast)
_LIVE_SAFE = frozenset({"msgspec", "typing_extensions"})
_NT_PROTO = collections.namedtuple("_T", [])
_NT_API = frozenset(dir(_NT_PROTO))
_FIELD_BASES = {"typing.NamedTuple", "msgspec.Struct"}
#: decorators known to keep the decorated function's signature (``inspect.signature`` follows
#: ``__wrapped__``), by their last name
_KEEPS_SIGNATURE = frozenset({
    "wraps", "lru_cache", "cache", "contextmanager", "asynccontextmanager", "abstractmethod",
    "override", "overload", "final", "staticmethod", "classmethod", "singledispatch",
    "singledispatchmethod", "no_grad", "inference_mode", "enable_grad", "deprecated",
    "total_ordering", "dataclass", "runtime_checkable", "unique"})


#: the most tokens a parsed source may have: about five times the largest module of the engine
#: (its scheduler, 47,000). The parser's tree costs up to about 900 bytes per
#: token (``a\\n`` repeated), so a hostile source is refused before it can cost more than about
#: 230 MB; a source of fewer bytes than this has fewer tokens and is not counted
SOURCE_MAX_TOKENS = 250_000
_TOKEN = re.compile(rb"\w+|[^ \t\f\r\w]")   # a name, a number, a newline or one punctuation byte


def parse_source(data: bytes, filename: str) -> ast.Module:
    """``ast.parse(data)``, refused with ``Unreadable`` when ``data`` has more than
    ``SOURCE_MAX_TOKENS`` tokens (counted in chunks, stopping at the cap). Other failures
    propagate as the parser raises them (SyntaxError, ValueError, RecursionError, MemoryError)."""
    if len(data) > SOURCE_MAX_TOKENS:
        count, step = 0, 1 << 16
        for at in range(0, len(data), step):
            count += len(_TOKEN.findall(data, at, at + step))
            if count > SOURCE_MAX_TOKENS:
                raise Unreadable(f"{filename} has more than {SOURCE_MAX_TOKENS} tokens: not parsed")
    return ast.parse(data, filename=filename)


def _is_stdlib(module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top == "builtins"


def _live_module(module: str):
    top = module.split(".")[0]
    if not (_is_stdlib(module) or top in _LIVE_SAFE):
        return None
    try:
        return importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a stdlib module missing on this platform
        return None


# ---------------------------------------------------------------- bindings of a body, in order
@dataclass(frozen=True)
class _B:
    """How a name is bound after a body ran: ``state`` yes / maybe / tc (TYPE_CHECKING only) /
    deleted; ``node`` the binding statement; ``ambiguous`` when several bindings may hold."""

    state: str
    node: Any = None
    ambiguous: bool = False
    alts: tuple = ()   # every binding statement that may hold (several branches)
    grown: bool = False  # a literal only added to in place since (``__all__ += [...]``)
    prev: Any = None     # the binding this assignment replaced (``X = rebuild(vars(X))``)

    @property
    def exists(self) -> bool:
        return self.state in ("yes", "maybe")


@dataclass
class _Body:
    env: dict[str, _B] = field(default_factory=dict)
    stars: list[ast.ImportFrom] = field(default_factory=list)
    mutations: dict[str, set[str]] = field(default_factory=dict)   # class name -> attrs added
    open_classes: dict[str, str] = field(default_factory=dict)      # class name -> why
    opened: str = ""                                                 # why unknown names undecided
    function_globals: set[str] = field(default_factory=set)         # ``global x`` in a function


def _is_tc(test: ast.expr) -> int:
    """1 for ``TYPE_CHECKING``, -1 for ``not TYPE_CHECKING``, else 0."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -_is_tc(test.operand)
    name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
    return 1 if name == "TYPE_CHECKING" else 0


def _merge(branches: list[dict[str, _B]]) -> dict[str, _B]:
    out: dict[str, _B] = {}
    for name in set().union(*branches):
        seen = [b.get(name) for b in branches]
        first = seen[0]
        if all(s is first for s in seen):
            out[name] = first
            continue
        present = [s for s in seen if s is not None and s.exists]
        if not present:
            out[name] = next(s for s in seen if s is not None)
            continue
        certain = all(s is not None and s.state == "yes" for s in seen)
        alts: list = []
        for s in present:
            for n in s.alts or (s.node,):
                if all(n is not a for a in alts):
                    alts.append(n)
        grown = any(s.grown for s in present) or any(  # one branch added to the same literal
            first is not None and s is not None and s is not first and s.node is first.node
            for s in seen)
        out[name] = _B("yes" if certain else "maybe", present[-1].node,
                       any(s.ambiguous for s in present), tuple(alts) if len(alts) > 1 else (), grown)
    return out


def _ends_in_raise(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise)


def _walrus(node: ast.stmt) -> list[tuple[str, bool]]:
    """The names assignment expressions (``:=``) bind in what ``node`` evaluates before its body
    (its test, value, iterable, context managers or subject), each with whether it is bound
    whenever ``node`` runs: False in an operand of ``and`` / ``or`` after the first, in a
    conditional expression or in a comprehension; a lambda's body binds nothing here."""
    heads = [getattr(node, f, None) for f in ("test", "value", "iter", "subject")]
    heads = [h for h in heads if isinstance(h, ast.expr)]
    heads += [item.context_expr for item in getattr(node, "items", ())]
    out: list[tuple[str, bool]] = []

    def visit(e: ast.AST, certain: bool) -> None:
        if isinstance(e, ast.Lambda):
            return
        if isinstance(e, ast.NamedExpr) and isinstance(e.target, ast.Name):
            out.append((e.target.id, certain))
        if isinstance(e, ast.BoolOp):   # the first operand always runs, the others may not
            visit(e.values[0], certain)
            for later in e.values[1:]:
                visit(later, False)
            return
        certain = certain and not isinstance(e, (ast.IfExp, ast.ListComp, ast.SetComp,
                                                 ast.DictComp, ast.GeneratorExp))
        for child in ast.iter_child_nodes(e):
            visit(child, certain)
    for head in heads:
        visit(head, True)
    return out


def _scan(body: list[ast.stmt], env: dict[str, _B], acc: _Body) -> dict[str, _B]:
    """Bindings after running ``body`` from ``env`` (a new dict; ``env`` is not changed)."""
    env = dict(env)
    for node in body:
        for name, certain in _walrus(node):
            env[name] = _B("yes" if certain else "maybe", node, ambiguous=True)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            env[node.name] = _B("yes", node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    if isinstance(node, ast.AnnAssign) and node.value is None:
                        if t.id not in env or not env[t.id].exists:
                            env[t.id] = _B("ann", node)
                    elif not isinstance(node, ast.AugAssign):
                        env[t.id] = _B("yes", node, prev=env.get(t.id))
                    elif t.id in env and env[t.id].exists:  # ``__all__ += [...]``: changed
                        _changed(env, t.id, node, additive=isinstance(node.op, ast.Add))
                elif isinstance(t, (ast.Tuple, ast.List)):
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            env[n.id] = _B("yes", node, ambiguous=True)
                elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    acc.mutations.setdefault(t.value.id, set()).add(t.attr)
                elif isinstance(t, ast.Subscript) and _calls_globals(t.value):
                    acc.opened = f"writes globals() at line {node.lineno}"
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    _changed(env, t.value.id, node)   # ``_LAZY["x"] = ...``
        elif isinstance(node, ast.Import):
            for a in node.names:
                env[a.asname or a.name.split(".")[0]] = _B("yes", node)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name == "*":
                    acc.stars.append(node)
                else:
                    env[a.asname or a.name] = _B("yes", node)
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    env[t.id] = _B("deleted", node)
        elif isinstance(node, ast.If):
            tc = _is_tc(node.test)
            if tc:
                checking, runtime = (node.body, node.orelse) if tc > 0 else (node.orelse, node.body)
                for name in _scan(checking, {}, _Body()):
                    if name not in env or not env[name].exists:
                        env[name] = _B("tc", node)
                env = _scan(runtime, env, acc)
            else:
                env = _merge([_scan(node.body, env, acc), _scan(node.orelse, env, acc)])
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            after_try = _scan(node.body, env, acc)
            branches = [_scan(node.orelse, after_try, acc)]
            branches += [_scan(h.body, env, acc) for h in node.handlers if not _ends_in_raise(h.body)]
            env = _scan(node.finalbody, _merge(branches), acc)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            env = _scan(node.body, env, acc)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                for n in ast.walk(node.target):
                    if isinstance(n, ast.Name):
                        env[n.id] = _B("maybe", node, True)
            env = _merge([env, _scan(node.body + node.orelse, env, acc)])
        elif isinstance(node, ast.Match):
            env = _merge([env] + [_scan(c.body, env, acc) for c in node.cases])
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            _scan_call(node.value, acc)
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                    func.attr in _MUTATORS:
                _changed(env, func.value.id, node,   # ``__all__.extend([...])``
                         additive=func.attr in ("append", "extend", "insert", "add", "update"))
    return env


_MUTATORS = frozenset({"append", "extend", "update", "add", "insert", "setdefault", "pop",
                       "remove", "clear", "discard", "__setitem__"})


def _changed(env: dict[str, _B], name: str, node: ast.stmt, additive: bool = False) -> None:
    """``name``'s value was changed in place: it still exists, its literal value is unknown
    (``additive``: only added to, so what the literal holds is still there)."""
    old = env.get(name)
    if old is None or not old.exists:
        return
    if additive and not (old.ambiguous or old.alts):
        env[name] = _B(old.state, old.node, grown=True)
    else:
        env[name] = _B(old.state, node, ambiguous=True)


def _calls_globals(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and \
        expr.func.id in ("globals", "vars", "locals")


def _scan_call(call: ast.Call, acc: _Body) -> None:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) >= 2 and \
            isinstance(call.args[0], ast.Name):
        name = call.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            acc.mutations.setdefault(call.args[0].id, set()).add(name.value)
        else:
            acc.open_classes[call.args[0].id] = f"setattr with a computed name at line {call.lineno}"
    elif isinstance(func, ast.Name) and func.id == "setattr":
        acc.opened = f"setattr on a computed object at line {call.lineno}"
    elif isinstance(func, ast.Attribute) and _calls_globals(func.value):
        acc.opened = f"changes globals() at line {call.lineno}"
    elif isinstance(func, ast.Name) and func.id == "exec":
        acc.opened = f"exec() at line {call.lineno}"


# ---------------------------------------------------------------- things found along a path
@dataclass(frozen=True)
class _Mod:
    name: str
    imported: frozenset = frozenset()   # submodules known to be imported (``import a.b``)


@dataclass(frozen=True)
class _Cls:
    module: str
    node: ast.ClassDef
    extra: frozenset = frozenset()
    opened: str = ""


@dataclass(frozen=True)
class _Fn:
    module: str
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class _Live:
    obj: Any


@dataclass(frozen=True)
class _NT:
    fields: tuple[str, ...]


@dataclass(frozen=True)
class _Alt:
    """One of several things, depending on which branch ran (``if is_mps(): ... else: ...``)."""

    things: tuple


@dataclass(frozen=True)
class _Rebuilt:
    """A class rebuilt from its own namespace (``X = msgspec.defstruct("X", FIELDS, namespace=
    {k: v for k, v in vars(X).items() if k not in (...)})``): what its body bound is carried
    over (less ``excluded``). ``fields``: the field names when ``FIELDS`` can be read from the
    source (then every other name is missing unless ``msgspec.Struct`` has it), else None
    (``fields_why`` says why: every other name is undecided)."""

    old: Any
    excluded: frozenset
    why: str
    fields: frozenset | None = None
    fields_why: str = ""


@dataclass(frozen=True)
class _Ext:
    """An object of a compiled module, looked at live in a child process: ``attrs`` its
    attribute names (``dir``; None when not listed), ``closed`` when no ``__getattr__`` /
    ``__getattribute__`` of its metaclass can serve others, ``params`` ``(names, has **kwargs)``
    of its signature (None when unreadable)."""

    name: str
    attrs: frozenset | None = None
    closed: bool = False
    params: tuple | None = None


@dataclass(frozen=True)
class _Opaque:
    why: str


@dataclass(frozen=True)
class _R:
    """Result of one step: verdict, the thing found (ok), why, closest existing name."""

    verdict: str
    thing: Any = None
    why: str = ""
    closest: str = ""
    stops_boot: bool = False


@dataclass
class _ModInfo:
    name: str
    key: str
    is_package: bool
    tree: ast.Module
    body: _Body
    lazy: dict[str, tuple[str, str]] | None = None  # module __getattr__: name -> (module, attr)
    lazy_exhaustive: bool = False
    live: dict | None = None  # a compiled module looked at live (``probe.list_names``)


class Checker:
    """Static checks against one ``SourceView`` (parsed modules are cached per checker).

    ``view``: where sources come from; the default is the installed environment. Names of
    top-level packages the view does not own are read from the installed environment.
    ``live_extensions``: a compiled extension module of the installed environment, whose names
    are in no source, is imported in a child process and its names looked at live
    (``probe.list_names``); without it they are undecided.
    ``probe``: requirements the source leaves undecided on a target of an installed dependency
    (not the engine) are decided by importing that target in a child process (``probe``); off,
    they stay undecided.
    """

    def __init__(self, view: SourceView | None = None, *, live_extensions: bool = False,
                 probe: bool = True) -> None:
        self.view = view or InstalledView()
        self.live_extensions = live_extensions
        self.probing = probe
        self._probed: dict[tuple[str, str], Verdict | str] = {}
        self._distributions: dict[str, list[str]] | None = None
        self._installed = InstalledView()
        self._infos: dict[str, _ModInfo | Exception | None] = {}
        #: why each source looked at since the last ``check`` began could not be read or parsed
        self.failures: list[str] = []

    # ------------------------------------------------------------ modules
    def _find(self, module: str) -> tuple[SourceView, tuple[str, bool]] | None:
        top = module.split(".")[0]
        view = self.view if self.view.owns(top) else self._installed
        found = view.find(module)
        return (view, found) if found else None

    def info(self, module: str) -> _ModInfo | None:
        """Parsed bindings of ``module`` (None when no source is found). Raises ``Unreadable``
        (only) for a source that cannot be read or parsed, whatever the reader or the parser
        raised (a size cap, a symlink out of a tree, a corrupt archive member, SyntaxError,
        RecursionError or MemoryError of a pathological expression): the reason is kept in
        ``failures``."""
        if module in self._infos:
            cached = self._infos[module]
            if isinstance(cached, Exception):
                self.failures.append(str(cached))
                raise cached
            return cached
        found = self._find(module)
        if found is None:
            self._infos[module] = None
            return None
        view, (key, is_pkg) = found
        acc = _Body()
        live = None
        if key.endswith(COMPILED):
            tree = ast.Module(body=[], type_ignores=[])
            acc.opened = "is a compiled extension module: its names are not in any source"
            if self.live_extensions and isinstance(view, InstalledView):
                live = list_names(module, key)
                if isinstance(live, str):
                    acc.opened += f" (the live look failed: {live})"
                    live = None
            elif isinstance(view, InstalledView):
                acc.opened += " (`check --live-extensions` looks at it live)"
        else:
            try:
                tree = parse_source(view.read(key), key or module)
                acc.env = _scan(tree.body, {}, acc)
            except SyntaxError as exc:
                self._unreadable(module, f"source {key or module} cannot be parsed: "
                                         f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})")
            except Unreadable as exc:
                self._unreadable(module, f"source {exc}")
            except Exception as exc:  # noqa: BLE001 - bad encoding, null bytes, RecursionError
                self._unreadable(module, f"source {key or module} cannot be read: "   # or
                                         f"{exception_text(exc)}")              # MemoryError
        acc.function_globals = {n for f in ast.walk(tree) if isinstance(f, ast.Global) for n in f.names}
        info = _ModInfo(module, key, is_pkg, tree, acc, live=live)
        getattr_node = acc.env.get("__getattr__")
        if getattr_node and getattr_node.exists and isinstance(getattr_node.node, ast.FunctionDef):
            info.lazy, info.lazy_exhaustive = _lazy_map(getattr_node.node, acc.env)
        self._infos[module] = info
        return info

    # ------------------------------------------------------------ the import probe
    def probe_refused(self, target: str, engine: str) -> str:
        """Why ``target`` may not be imported by the probe ("" when it may): only a module of a
        distribution installed in this environment, found there (not in the release checked),
        and not of ``engine`` (the engine is never imported by the static check)."""
        top = target.split(".")[0]
        if not self.probing:
            return "the import probe is off"
        if not isinstance(self.view, InstalledView) and self.view.owns(top):
            return f"{top} is in the release checked: a release is never imported"
        if self._distributions is None:
            import importlib.metadata

            self._distributions = importlib.metadata.packages_distributions()
        dists = self._distributions.get(top, [])
        if not dists:
            return f"{top} is not a package of an installed distribution"
        if not engine:
            return "the feature's engine is unknown: nothing is imported"
        if canonicalize_name(engine) in {canonicalize_name(d) for d in dists}:
            return f"{top} is the engine's ({engine}): the static check never imports it"
        return ""

    def probe(self, target: str, texts: list[str], key: str = "") -> list[Verdict] | str:
        """``probe.decide`` of each requirement text on ``target`` (``key``: the file the source
        view found for it), kept per checker: a text already decided on ``target`` is not asked
        again. Or why the probe failed."""
        todo = [t for t in dict.fromkeys(texts) if (target, t) not in self._probed]
        if todo:
            got = decide(target, todo, key)
            for i, text in enumerate(todo):
                self._probed[target, text] = got if isinstance(got, str) else got[i]
        out = [self._probed[target, t] for t in texts]
        failed = next((r for r in out if isinstance(r, str)), None)
        return failed if failed is not None else out

    def _decided_by_probe(self, target: str, verdicts: list[Verdict], engine: str) -> list[Verdict]:
        """``verdicts`` with every one the source left undecided (and the live check would not
        refuse anyway) replaced by the probe's live verdict, where ``probe_refused`` allows;
        a failed probe leaves them undecided, saying why."""
        todo = [i for i, v in enumerate(verdicts) if v.verdict == UNDECIDED and not v.stops_boot]
        if not todo or self.probe_refused(target, engine):
            return verdicts
        found = self._find(target)
        key = found[1][0] if found else ""
        got = self.probe(target, [verdicts[i].requirement for i in todo], key)
        out = list(verdicts)
        for n, i in enumerate(todo):
            v = out[i]
            if isinstance(got, str):
                out[i] = Verdict(v.requirement, UNDECIDED, f"{v.why}; the import probe failed: "
                                 f"{got}", v.piece)
            else:
                live = got[n]
                out[i] = Verdict(live.requirement, live.verdict, f"{live.why} ({target} imported in "
                                 "a child process: a dependency, not the engine)", live.piece,
                                 live.closest, live.stops_boot)
        return out

    def verdicts(self, target: str, reqs, engine: str) -> tuple[Verdict, ...]:
        """One verdict per ``Require`` of ``reqs`` on module ``target``: from the source, then
        the ones it leaves undecided by the import probe (see ``probe_refused``); ``engine``:
        the distribution name of the engine (never imported)."""
        return tuple(self._decided_by_probe(target, [self.verdict(target, r) for r in reqs], engine))

    def _unreadable(self, module: str, why: str) -> None:
        """Record and raise ``Unreadable(why)`` for ``module`` (every later look raises it too)."""
        self._infos[module] = exc = Unreadable(why)
        self.failures.append(why)
        raise exc from None

    def source_of(self, module: str) -> str | None:
        """The file (or archive member) holding ``module``'s source, or None."""
        found = self._find(module)
        if not found:
            return None
        view, (key, _) = found
        return key if isinstance(view, InstalledView) else f"{view.label}:{key}"

    def _module_thing(self, module: str, imported: frozenset = frozenset()):
        if _is_stdlib(module) or module.split(".")[0] in _LIVE_SAFE:
            obj = _live_module(module)
            return _Live(obj) if obj is not None else _Opaque(f"module {module} cannot be imported here")
        if self._find(module) is None:
            return _Opaque(f"no source for module {module}")
        return _Mod(module, imported)

    # ------------------------------------------------------------ steps
    def attr(self, thing, name: str, depth: int = 0) -> _R:
        """Verdict for ``name`` on ``thing``."""
        if depth > _MAX_FOLLOW:
            return _R(UNDECIDED, why="too many re-exports to follow")
        if isinstance(thing, _Alt):
            results = [self.attr(t, name, depth + 1) for t in thing.things]
            if all(r.verdict == OK for r in results):
                return _R(OK, _Alt(tuple(r.thing for r in results)))
            if all(r.verdict == MISSING for r in results):
                return results[0]
            return _R(UNDECIDED, why=next((r.why for r in results if r.verdict == UNDECIDED),
                                          f"{name} exists in some branches only"))
        if isinstance(thing, _Rebuilt):
            return self._rebuilt_attr(thing, name, depth)
        if isinstance(thing, _Mod):
            return self._mod_attr(thing, name, depth)
        if isinstance(thing, _Cls):
            return self._cls_attr(thing, name, depth)
        if isinstance(thing, _Live):
            try:
                return _R(OK, _Live(inspect.getattr_static(thing.obj, name)))
            except AttributeError:
                pass
            try:
                return _R(OK, _Live(getattr(thing.obj, name)))
            except Exception:  # noqa: BLE001
                return _R(MISSING, why=f"{getattr(thing.obj, '__name__', thing.obj)!s} has no "
                          f"attribute {name}", closest=_closest(name, dir(thing.obj)))
        if isinstance(thing, _NT):
            if name in thing.fields:
                return _R(OK, _Opaque("a namedtuple field"))
            if name in _NT_API:
                return _R(OK, _Live(getattr(_NT_PROTO, name)))
            return _R(MISSING, why="a namedtuple class has its fields and the namedtuple API only",
                      closest=_closest(name, list(thing.fields) + sorted(_NT_API)))
        if isinstance(thing, _Ext):
            if thing.attrs is None:
                return _R(UNDECIDED, why=f"{thing.name} is an object of a compiled module: its "
                          "attributes were not listed")
            if name in thing.attrs:
                return _R(OK, _Ext(f"{thing.name}.{name}"), "looked at live")
            if hasattr(type, name):
                return _R(OK, _Live(getattr(type, name)))
            if not thing.closed:
                return _R(UNDECIDED, why=f"{thing.name}'s metaclass may serve other attributes")
            return _R(MISSING, why=f"{thing.name} has no attribute {name} (looked at live)",
                      closest=_closest(name, sorted(thing.attrs)))
        if isinstance(thing, _Fn):
            if hasattr(_plain_function, name):
                return _R(OK, _Opaque("a function attribute"))
            return _R(UNDECIDED, why=f"{thing.node.name} is a function: its attributes are not "
                      "in the source")
        return _R(UNDECIDED, why=thing.why if isinstance(thing, _Opaque) else "not followable")

    def _rebuilt_attr(self, thing: _Rebuilt, name: str, depth: int) -> _R:
        old, when = thing.old, thing.why.split(" is ", 1)[1]
        b = None
        if isinstance(old, _Cls) and name not in thing.excluded:
            b = _scan(old.node.body, {}, _Body()).get(name)
            if b is not None and b.state == "yes" and not name.startswith("__"):
                return _R(OK, self._value(old.module, name, b, _Body(), depth + 1),
                          f"carried over when {when}")
            if name in old.extra:
                return _R(OK, _Opaque(f"{name} is set at module level before the rebuild"))
        if thing.fields is not None and name in thing.fields:
            return _R(OK, _Opaque(f"{name} is a field of the class rebuilt at {when}"),
                      f"a field of the class {when}")
        if thing.fields is None or not isinstance(old, _Cls):
            return _R(UNDECIDED, why=f"{thing.why}; {name} is not in that body"
                      + (f" ({thing.fields_why})" if thing.fields_why else ""))
        r = self.attr(_Live(_live_module("msgspec").Struct), name, depth + 1)
        if r.verdict == OK:
            return r
        if (b is not None and b.exists and name not in thing.excluded) or old.opened:
            return _R(UNDECIDED, why=f"{thing.why}; whether it keeps {name} is not read")
        carried = [n for n, v in _scan(old.node.body, {}, _Body()).items()
                   if v.exists and n not in thing.excluded]
        return _R(MISSING, why=f"{old.node.name} has no attribute {name}: no field of the class "
                  f"{when}, nor carried over from its body, nor on msgspec.Struct",
                  closest=_closest(name, sorted(thing.fields) + carried + sorted(old.extra)))

    # ------------------------------------------------------------ a class rebuilt by defstruct
    def _defstruct_fields(self, module: str, name: str, cls_node: ast.ClassDef, rebuild: ast.Assign,
                          depth: int) -> tuple[frozenset | None, str]:
        """The field names ``msgspec.defstruct`` gives the class ``name`` rebuilt at ``rebuild``
        (module level), when the source says them: a literal list of names or ``(name, type
        [, default])`` tuples, or a comprehension over ``name.__annotations__`` that keeps each
        key as the field name. ``name.__annotations__`` is followed through the class body's
        annotations and module-level assignments of a dict literal built from other dicts and
        ``**`` unpackings, down to a known field collector (``_FIELD_COLLECTORS``) over a literal
        list of struct classes. ``(None, why)`` for anything else.

        The one collector known (``_FIELD_COLLECTORS``) is sglang's
        ``srt.arg_groups.fields.collect_input_fields(sources)``: it returns ``(annotations,
        defaults, namespaces)`` with every field of every listed ``msgspec.Struct`` class, and
        ``srt/server_args.py`` rebuilds ``ServerArgs`` from them."""
        call = rebuild.value
        msgspec = _live_module("msgspec")
        func = self._expr(module, call.func, depth + 1)
        if msgspec is None or not (isinstance(func, _Live) and func.obj is getattr(msgspec, "defstruct", None)):
            return None, f"{_short(call.func)} is not msgspec.defstruct"
        if any(k.arg in (None, "bases") for k in call.keywords) or len(call.args) > 2:
            return None, "its bases cannot be read"
        arg = call.args[1] if len(call.args) == 2 else next(
            (k.value for k in call.keywords if k.arg == "fields"), None)
        if arg is None:
            return None, "its fields are not given"
        try:
            literal = ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            literal = None
        if isinstance(literal, (list, tuple)):
            names = [f if isinstance(f, str) else f[0] if isinstance(f, (tuple, list)) and f else None
                     for f in literal]
            if all(isinstance(n, str) for n in names):
                return frozenset(names), ""
            return None, "its fields are not literal names"
        if not (isinstance(arg, (ast.ListComp, ast.GeneratorExp)) and len(arg.generators) == 1
                and not arg.generators[0].ifs and not arg.generators[0].is_async):
            return None, f"its fields {_short(arg)} are not read from the source"
        gen = arg.generators[0]
        key, it = None, gen.iter
        if isinstance(gen.target, ast.Tuple) and len(gen.target.elts) == 2 and \
                isinstance(gen.target.elts[0], ast.Name) and isinstance(it, ast.Call) and \
                isinstance(it.func, ast.Attribute) and it.func.attr == "items" and not it.args:
            key, it = gen.target.elts[0].id, it.func.value
        elif isinstance(gen.target, ast.Name):
            key = gen.target.id
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                    it.func.attr == "keys" and not it.args:
                it = it.func.value

        def keeps_key(elt: ast.expr) -> bool:
            if isinstance(elt, ast.IfExp):
                return keeps_key(elt.body) and keeps_key(elt.orelse)
            if isinstance(elt, ast.Tuple) and elt.elts:
                elt = elt.elts[0]
            return isinstance(elt, ast.Name) and elt.id == key

        if key is None or not keeps_key(arg.elt) or not _is_annotations_of(it, name):
            return None, f"its fields {_short(arg)} are not read from the source"
        info = self.info(module)
        body = info.tree.body if info else []
        at = [i for i, stmt in enumerate(body) if stmt is cls_node or stmt is rebuild]
        if len(at) != 2:
            return None, "the class or its rebuild is not at module level"
        names: set[str] = set()
        for stmt in cls_node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if _is_classvar(stmt):
                    return None, f"{name}.{stmt.target.id} is a ClassVar"
                names.add(stmt.target.id)
            elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    any(isinstance(n, ast.AnnAssign) for n in ast.walk(stmt)):
                return None, f"{name} has an annotation under a condition (line {stmt.lineno})"
        for i in range(at[0] + 1, at[1]):
            stmt = body[i]
            if not _touches_annotations(stmt, name):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                    _is_annotations_of(stmt.targets[0], name):
                got = self._dict_keys(module, stmt.value, body, i, names, depth + 1)
                if isinstance(got, str):
                    return None, got
                names = got
            else:
                return None, f"{name}.__annotations__ is changed at line {stmt.lineno}"
        return frozenset(names), ""

    def _dict_keys(self, module: str, expr: ast.expr, body: list, at: int, current: set[str],
                   depth: int) -> set[str] | str:
        """The keys of dict expression ``expr`` at statement ``at`` of ``body`` (``current``:
        the annotations so far), or why they cannot be read."""
        if depth > _MAX_FOLLOW:
            return "too many steps to follow"
        if isinstance(expr, ast.Dict):
            out: set[str] = set()
            for k, v in zip(expr.keys, expr.values):
                if k is None:
                    got = self._dict_keys(module, v, body, at, current, depth + 1)
                    if isinstance(got, str):
                        return got
                    out |= got
                elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                    out.add(k.value)
                else:
                    return f"a computed key {_short(k)} (line {expr.lineno})"
            return out
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and \
                expr.attr == "__annotations__":
            return set(current)
        if not isinstance(expr, ast.Name):
            return f"{_short(expr)} is not read from the source"
        found = _binding_before(body, at, expr.id)
        if isinstance(found, str):
            return found
        i, stmt = found
        target = stmt.targets[0]
        if isinstance(target, ast.Name):
            return self._dict_keys(module, stmt.value, body, i, current, depth + 1)
        pos = next(j for j, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == expr.id)
        return self._collected(module, stmt.value, pos, body, i, depth + 1)

    def _collected(self, module: str, call: ast.expr, pos: int, body: list, at: int,
                   depth: int) -> set[str] | str:
        """The field names item ``pos`` of a field collector's result holds (see
        ``_FIELD_COLLECTORS``), or why they cannot be read."""
        func = self._expr(module, call.func, depth + 1) if isinstance(call, ast.Call) else None
        if not (isinstance(func, _Fn) and _FIELD_COLLECTORS.get(func.node.name) == pos
                and len(call.args) == 1 and not call.keywords):
            return f"{_short(call)} is not a known field collector"
        listed = call.args[0]
        if isinstance(listed, ast.Name):
            found = _binding_before(body, at, listed.id)
            if isinstance(found, str):
                return found
            listed = found[1].value if isinstance(found[1].targets[0], ast.Name) else None
        if not isinstance(listed, (ast.List, ast.Tuple)):
            return f"the classes given to {func.node.name} are not a literal list"
        names: set[str] = set()
        for elt in listed.elts:
            cls = self._expr(module, elt, depth + 1) if _dotted(elt) else None
            if not isinstance(cls, _Cls) or self._field_kind(cls) != "fields" or any(
                    b.exists for n, b in _scan(cls.node.body, {}, _Body()).items()
                    if n in ("__init__", "__new__")):
                return f"{_short(elt)} given to {func.node.name} is not a struct class in the source"
            got = self.params(cls, _short(elt), depth + 1)
            if isinstance(got, str):
                return got
            names |= set(got[0])
        return names

    def _mod_attr(self, mod: _Mod, name: str, depth: int) -> _R:
        info = self.info(mod.name)
        if info is None:
            return _R(UNDECIDED, why=f"no source for module {mod.name}")
        if info.live is not None:
            entry = info.live["names"].get(name)
            if isinstance(entry, dict):
                attrs = entry.get("attrs")
                return _R(OK, _Ext(f"{mod.name}.{name}", frozenset(attrs) if attrs is not None else
                                   None, bool(entry.get("closed")),
                                   tuple(entry["params"]) if entry.get("params") else None),
                          f"looked at live: {mod.name} is a compiled module")
            if not info.live.get("closed"):
                return _R(UNDECIDED, why=f"compiled module {mod.name} has a module __getattr__")
            return _R(MISSING, why=f"compiled module {mod.name} has no {name} (looked at live)",
                      closest=_closest(name, list(info.live["names"])))
        b = info.body.env.get(name)
        if b is not None and b.state == "tc":
            return _R(MISSING, why=f"{name} is imported only under `if TYPE_CHECKING:` in "
                      f"{mod.name}: it does not exist at run time")
        if b is not None and b.state == "maybe":
            return _R(UNDECIDED, why=f"{name} is bound only under a condition in {mod.name} "
                      f"(line {getattr(b.node, 'lineno', '?')})")
        if b is not None and b.state == "yes":
            return _R(OK, self._value(mod.name, name, b, info.body, depth))
        if info.is_package:
            sub = f"{mod.name}.{name}"
            if self._find(sub) is not None:
                if sub in mod.imported:
                    return _R(OK, _Mod(sub))
                return _R(UNDECIDED, why=f"{sub} is a submodule: an attribute only once imported")
        undecided = ""
        for star in info.body.stars:
            origin = _origin(star, "*", mod.name, info.is_package)
            r = self._star_attr(origin, name, depth)
            if r.verdict == OK:
                return r
            if r.verdict == UNDECIDED:
                undecided = r.why
        if info.lazy is not None:
            if name in info.lazy:
                target, served = info.lazy[name]
                if target.startswith("."):
                    target = _origin(ast.ImportFrom(module=target.lstrip(".") or None, names=[],
                                                    level=len(target) - len(target.lstrip("."))),
                                     "", mod.name, info.is_package)
                r = self.attr(self._module_thing(target), served, depth + 1)
                if r.verdict == OK:
                    return _R(OK, r.thing, f"served lazily by {mod.name}.__getattr__ from {target}")
                return _R(UNDECIDED, why=f"served by {mod.name}.__getattr__ from {target}: {r.why}")
            if not info.lazy_exhaustive:
                undecided = undecided or f"{mod.name} has a module __getattr__"
        if name in info.body.function_globals:
            undecided = undecided or (f"{name} is assigned only inside a function of {mod.name} "
                                      "(`global`): it exists once that function ran")
        if undecided or info.body.opened:
            return _R(UNDECIDED, why=undecided or f"{mod.name} {info.body.opened}")
        if b is not None and b.state == "deleted":
            return _R(MISSING, why=f"{name} is deleted in {mod.name}")
        names = [n for n, v in info.body.env.items() if v.exists] + list(info.lazy or ())
        return _R(MISSING, why=f"module {mod.name} has no {name}", closest=_closest(name, names))

    def _star_attr(self, origin: str, name: str, depth: int) -> _R:
        thing = self._module_thing(origin)
        if isinstance(thing, _Opaque):
            return _R(UNDECIDED, why=f"re-exported with `from {origin} import *`: {thing.why}")
        if isinstance(thing, _Mod):
            info = self.info(origin)
            if info is not None and info.live is not None:
                listed = info.live.get("all")
                if (name not in listed) if isinstance(listed, list) else name.startswith("_"):
                    return _R(MISSING)
                return self.attr(thing, name, depth + 1)
            all_b = info.body.env.get("__all__") if info else None
            if all_b is not None and all_b.exists:
                if all_b.ambiguous or all_b.alts:
                    return _R(UNDECIDED, why=f"{origin}.__all__ is changed after it is set")
                try:
                    listed = ast.literal_eval(all_b.node.value)
                except (ValueError, AttributeError, TypeError, SyntaxError):
                    return _R(UNDECIDED, why=f"{origin}.__all__ is computed")
                if name not in listed:
                    if all_b.grown:
                        return _R(UNDECIDED, why=f"{origin}.__all__ is added to after it is set")
                    return _R(MISSING)
            elif name.startswith("_"):
                return _R(MISSING)
        elif isinstance(thing, _Live) and name.startswith("_"):
            return _R(MISSING)
        return self.attr(thing, name, depth + 1)

    def _value(self, module: str, name: str, b: _B, body: _Body, depth: int):
        """What a certain binding of ``name`` holds."""
        if b.alts and not b.ambiguous:
            return _Alt(tuple(self._value(module, name, _B("yes", n), body, depth + 1) for n in b.alts))
        node = b.node
        if b.ambiguous or b.grown:
            return _Opaque(f"{name} is bound in several ways in {module} (line "
                           f"{getattr(node, 'lineno', '?')})")
        if isinstance(node, ast.ClassDef):
            opened = body.open_classes.get(name, "")
            return _Cls(module, node, frozenset(body.mutations.get(name, ())), opened)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return _Fn(module, node)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname == name:
                    return self._module_thing(a.name)
            subs = frozenset(a.name for a in node.names if a.name.split(".")[0] == name)
            return self._module_thing(name, subs)
        if isinstance(node, ast.ImportFrom):
            info = self.info(module)
            origin = _origin(node, name, module, bool(info and info.is_package))
            orig_name = next(a.name for a in node.names if (a.asname or a.name) == name)
            src = self._module_thing(origin)
            if isinstance(src, _Opaque):
                return _Opaque(f"{name} comes from {origin}: {src.why}")
            r = self.attr(src, orig_name, depth + 1)
            if r.verdict == OK:
                return r.thing
            if self._find(f"{origin}.{orig_name}") is not None:
                return _Mod(f"{origin}.{orig_name}")
            return _Opaque(f"{name} is imported from {origin}, where the source does not decide "
                           f"it ({r.why})")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and b.prev is not None \
                and isinstance(b.prev.node, ast.ClassDef) and not (b.prev.ambiguous or b.prev.alts):
            excluded = _carried(node.value, name)
            if excluded is not None:
                old = self._value(module, name, b.prev, body, depth + 1)
                fields, why = self._defstruct_fields(module, name, b.prev.node, node, depth + 1)
                return _Rebuilt(old, excluded, f"{name} is rebuilt at line {node.lineno} by "
                                f"{_short(node.value.func)}(...) from its class body", fields, why)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            return self._expr(module, node.value, depth + 1) or \
                _Opaque(f"{name} is set to {_short(node.value)} (line {node.lineno}): not "
                        "followable in the source")
        return _Opaque(f"{name} cannot be followed in the source")

    def _expr(self, module: str, expr: ast.expr, depth: int):
        """Thing for an expression in ``module`` (a dotted name, a literal, a namedtuple call),
        or None when it cannot be followed."""
        if depth > _MAX_FOLLOW:
            return None
        if isinstance(expr, ast.Subscript):
            return self._expr(module, expr.value, depth)
        dotted = _dotted(expr)
        if dotted:
            parts = dotted.split(".")
            thing = _Mod(module)
            if parts[0] in vars(builtins) and parts[0] not in (self.info(module).body.env
                                                               if self.info(module) else {}):
                thing = _Live(builtins)
            for part in parts:
                r = self.attr(thing, part, depth + 1)
                if r.verdict != OK:
                    return None
                thing = r.thing
            return thing
        if isinstance(expr, ast.Call):
            fn = _dotted(expr.func) or ""
            if fn.split(".")[-1] in ("namedtuple", "NamedTuple"):
                fields = _nt_fields(expr)
                return _NT(fields) if fields is not None else None
            return None
        try:
            return _Live(ast.literal_eval(expr))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None

    # ------------------------------------------------------------ classes
    def _bases(self, cls: _Cls, depth: int) -> list:
        out = []
        for base in cls.node.bases:
            if isinstance(base, ast.Call):
                fn = _dotted(base.func) or ""
                fields = _nt_fields(base) if fn.split(".")[-1] in ("namedtuple", "NamedTuple") else None
                out.append(_NT(fields) if fields is not None else _Opaque(f"base {_short(base)} is a call"))
                continue
            dotted = _dotted(base.value if isinstance(base, ast.Subscript) else base)
            if dotted and self._base_name(cls, base) == "typing.NamedTuple":
                out.append(_NT(tuple(self._fields(cls))))
                continue
            thing = self._expr(cls.module, base, depth + 1) if dotted else None
            out.append(thing if thing is not None else _Opaque(f"base {_short(base)} cannot be "
                                                               "resolved from the source"))
        return out

    def _base_name(self, cls: _Cls, base: ast.expr) -> str:
        """``module.Name`` a base refers to when it is imported (``NamedTuple`` -> ``typing.NamedTuple``)."""
        dotted = _dotted(base.value if isinstance(base, ast.Subscript) else base) or ""
        info = self.info(cls.module)
        b = info.body.env.get(dotted.split(".")[0]) if info else None
        if b is None or not b.exists:
            return dotted
        if isinstance(b.node, ast.ImportFrom):
            orig = next((a.name for a in b.node.names if (a.asname or a.name) == dotted.split(".")[0]), "")
            return ".".join([_origin(b.node, orig, cls.module, info.is_package), orig] + dotted.split(".")[1:])
        if isinstance(b.node, ast.Import):
            return dotted
        return f"{cls.module}.{dotted}"

    def _field_kind(self, cls: _Cls, depth: int = 0) -> str:
        """``"fields"`` when annotation-only names of ``cls`` are class attributes (dataclass,
        NamedTuple, msgspec.Struct), ``"plain"`` when they are not, ``"unknown"``."""
        for dec in cls.node.decorator_list:
            d = _dotted(dec.func if isinstance(dec, ast.Call) else dec) or ""
            if d.split(".")[-1] == "dataclass":
                return "fields"
        kinds = []
        for base, thing in zip(cls.node.bases, self._bases(cls, depth)):
            if self._base_name(cls, base) in _FIELD_BASES:
                return "fields"
            if isinstance(thing, _Cls) and depth < _MAX_FOLLOW:
                kinds.append(self._field_kind(thing, depth + 1))
            elif isinstance(thing, _Live) and isinstance(thing.obj, type):
                kinds.append("fields" if getattr(thing.obj, "__struct_fields__", None) is not None
                             else "plain")
            elif isinstance(thing, _NT):
                kinds.append("fields")
            else:
                kinds.append("unknown")
        if "fields" in kinds:
            return "fields"
        return "unknown" if "unknown" in kinds else "plain"

    def _fields(self, cls: _Cls) -> list[str]:
        acc = _Body()
        env = _scan(cls.node.body, {}, acc)
        return [n for n, b in env.items() if b.state == "ann" or (
            b.exists and isinstance(b.node, ast.AnnAssign) and not _is_classvar(b.node))]

    def _cls_attr(self, cls: _Cls, name: str, depth: int) -> _R:
        acc = _Body()
        env = _scan(cls.node.body, {}, acc)
        b = env.get(name)
        where = f"{cls.module}.{cls.node.name}"
        if name in cls.extra:  # set (or replaced) at module level: exists, value unknown
            return _R(OK, _Opaque(f"{cls.node.name}.{name} is set at module level"))
        if b is not None and b.state == "maybe":
            return _R(UNDECIDED, why=f"{cls.node.name}.{name} is bound only under a condition")
        if b is not None and b.state == "yes":
            return _R(OK, self._value(cls.module, name, b, acc, depth))
        if name == "__slots__" or name in _slots(env):
            return _R(OK, _Opaque("a slot"))
        undecided = cls.opened or acc.opened
        if b is not None and b.state == "ann":
            kind = self._field_kind(cls, depth)
            if kind == "fields":
                return _R(OK, _Opaque(f"{name} is a field of {cls.node.name}"))
            if kind == "unknown":
                undecided = undecided or f"{name} is annotated in {cls.node.name}, whose bases " \
                                         "cannot be read: a field or not"
        names = [n for n, v in env.items() if v.exists] + sorted(cls.extra)
        bases = self._bases(cls, depth)
        meta = next((k.value for k in cls.node.keywords if k.arg == "metaclass"), None)
        if meta is not None and (_dotted(meta) or "").split(".")[-1] not in ("ABCMeta", "type"):
            bases.append(_Opaque(f"metaclass {_short(meta)}"))
        for base in bases or [_Live(object)]:
            if isinstance(base, _Opaque):
                undecided = undecided or f"{name} may come from {cls.node.name}'s {base.why}"
                continue
            if depth >= _MAX_FOLLOW:
                undecided = undecided or "too many base classes to follow"
                continue
            r = self.attr(base, name, depth + 1)
            if r.verdict == OK:
                return r
            if r.verdict == UNDECIDED:
                undecided = undecided or r.why
            elif r.closest:
                names.append(r.closest)
        if hasattr(type, name):  # the metaclass of every class: Cls.mro, Cls.__name__...
            return _R(OK, _Live(getattr(type, name)))
        if undecided:
            return _R(UNDECIDED, why=undecided)
        return _R(MISSING, why=f"{where} has no attribute {name} (bases searched)",
                  closest=_closest(name, names))

    # ------------------------------------------------------------ parameters
    def params(self, thing, owner: str, depth: int = 0) -> tuple[list[str], bool] | str:
        """``(names, has_var_keyword)`` of what calling ``thing`` accepts, or why unknown."""
        if isinstance(thing, _Fn):
            decos = {(_dotted(d.func if isinstance(d, ast.Call) else d) or "?").split(".")[-1]
                     for d in thing.node.decorator_list}
            if decos & {"property", "cached_property", "setter", "getter"}:
                return f"{owner} is a property"
            for dec in thing.node.decorator_list:
                changed = self._changes_signature(thing.module, dec, depth)
                if changed:
                    return f"{owner} is decorated with {_short(dec)}, which {changed}"
            a = thing.node.args
            names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
            return names, a.kwarg is not None
        if isinstance(thing, _Live):
            try:
                sig = inspect.signature(thing.obj)
            except (TypeError, ValueError) as exc:
                return f"signature of {owner} unreadable ({exc})"
            return list(sig.parameters), any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        if isinstance(thing, _NT):
            return list(thing.fields), False
        if isinstance(thing, _Alt):
            got = [self.params(t, owner, depth + 1) for t in thing.things]
            if all(g == got[0] for g in got) or all(isinstance(g, str) for g in got):
                return got[0]
            return f"{owner} has different signatures depending on the branch that ran"
        if isinstance(thing, _Cls):
            acc = _Body()
            env = _scan(thing.node.body, {}, acc)
            for ctor in ("__init__", "__new__"):
                b = env.get(ctor)
                if b is not None and b.exists:
                    value = self._value(thing.module, ctor, b, acc, depth)
                    got = self.params(value, owner, depth + 1)
                    if isinstance(got, tuple):
                        return [n for n in got[0] if n not in ("self", "cls")], got[1]
                    return got
            kind = self._field_kind(thing)
            if depth >= _MAX_FOLLOW:
                return f"too many base classes to follow for {owner}"
            bases = self._bases(thing, depth)
            if kind == "fields":  # generated constructor: the fields, base classes' first
                fields: list[str] = []
                for base in reversed(bases):
                    if isinstance(base, _NT):
                        fields += base.fields
                    elif isinstance(base, _Cls) and self._field_kind(base) == "fields":
                        got = self.params(base, owner, depth + 1)
                        if isinstance(got, str):
                            return got
                        fields += got[0]
                    elif isinstance(base, _Opaque) and "msgspec" not in base.why:
                        return f"{owner}'s constructor may come from {base.why}"
                return fields + self._fields(thing), False
            for base in bases:
                if isinstance(base, _Live) and base.obj is object:
                    continue
                if isinstance(base, _Opaque):
                    return f"{owner}'s constructor may come from {base.why}"
                if isinstance(base, _Live) and isinstance(base.obj, type) and (
                        type(base.obj) is not type or any("__init_subclass__" in vars(k)
                                                          for k in base.obj.__mro__[:-1])):
                    return (f"{owner}'s base {base.obj.__qualname__} changes its subclasses' "
                            "constructor (metaclass or __init_subclass__)")
                return self.params(base, owner, depth + 1)
            if kind == "unknown":
                return f"{owner}'s constructor cannot be read from the source"
            return [], False
        if isinstance(thing, _Ext):
            if thing.params is None:
                return f"the signature of {owner} (a compiled module's) cannot be read"
            return list(thing.params[0]), bool(thing.params[1])
        if isinstance(thing, _Rebuilt):
            if thing.fields is None:
                return f"{owner}'s constructor comes from {thing.why} ({thing.fields_why})"
            if isinstance(thing.old, _Cls) and any(
                    n in ("__init__", "__new__") and n not in thing.excluded
                    for n in _scan(thing.old.node.body, {}, _Body())):
                return f"{owner}'s constructor is carried over from its body: not read"
            return sorted(thing.fields), False
        if isinstance(thing, _Opaque):
            return thing.why
        return f"{owner} is not a function or class in the source"

    def _changes_signature(self, module: str, dec: ast.expr, depth: int) -> str:
        """Why decorator ``dec`` may change the signature ("" when it keeps it: a known
        signature-keeping decorator, or one in the source that uses ``functools.wraps`` /
        ``update_wrapper`` or returns the function itself)."""
        target = dec.func if isinstance(dec, ast.Call) else dec
        dotted = _dotted(target) or ""
        if dotted.split(".")[-1] in _KEEPS_SIGNATURE:
            return ""
        thing = self._expr(module, target, depth + 1) if dotted else None
        if isinstance(thing, _Live):
            return "" if getattr(thing.obj, "__name__", "") in _KEEPS_SIGNATURE else \
                "is not known to keep the signature"
        if isinstance(thing, _Fn):
            fn = thing.node
            if any(isinstance(n, ast.Call) and (_dotted(n.func) or "").split(".")[-1] in
                   ("wraps", "update_wrapper") for n in ast.walk(fn)):
                return ""
            params = {p.arg for p in fn.args.args}
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
            if not isinstance(dec, ast.Call) and returns and all(
                    isinstance(r, ast.Name) and r.id in params for r in returns):
                return ""  # registers the function and returns it unchanged
            return "does not use functools.wraps"
        return "cannot be read from the source"

    # ------------------------------------------------------------ requirements
    def verdict(self, target: str, req: Require) -> Verdict:
        """The verdict for one ``requires`` entry on module ``target``. Never raises: a failure
        of the check itself is an ``undecided`` verdict naming it."""
        try:
            return self._verdict(target, req)
        except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on a pathological source
            return Verdict(req.text, UNDECIDED, f"the static check failed on this requirement: "
                           f"{exception_text(exc)}", ".".join(req.path))

    def _verdict(self, target: str, req: Require) -> Verdict:
        try:
            if self.info(target) is None:
                return Verdict(req.text, MISSING, f"no source for module {target}", f"module {target}",
                               self._closest_module(target))
        except Unreadable as exc:
            return Verdict(req.text, UNDECIDED, f"unverifiable: {exc}", ".".join(req.path),
                           stops_boot=True)
        thing: Any = _Mod(target)
        done: list[str] = []
        for part in req.path:
            try:
                r = self.attr(thing, part)
            except Unreadable as exc:
                r = _R(UNDECIDED, why=f"unverifiable: {exc}", stops_boot=True)
            piece = ".".join(done + [part])
            if r.verdict == MISSING:
                return Verdict(req.text, MISSING, r.why, piece,
                               ".".join(done + [r.closest]) if r.closest else "")
            if r.verdict == UNDECIDED:
                return Verdict(req.text, UNDECIDED, r.why, piece, stops_boot=r.stops_boot)
            done.append(part)
            thing = r.thing
        if not req.params:
            why = r.why if r.why.startswith("looked at live") else \
                "found in the source" + (f" ({r.why})" if r.why else "")
            return Verdict(req.text, OK, why)
        owner = ".".join(req.path)
        got = self.params(thing, owner)
        if isinstance(got, str):
            return Verdict(req.text, UNDECIDED, got, f"{owner}({', '.join(req.params)})")
        return param_verdict(req.text, owner, req.params, got[0], got[1])

    def _closest_module(self, target: str) -> str:
        parent, _, leaf = target.rpartition(".")
        found = self._find(parent) if parent else None
        if not found:
            return ""
        view, _ = found
        names = getattr(view, "children", lambda m: [])(parent)
        close = _closest(leaf, names)
        return f"module {parent}.{close}" if close else ""

    def check(self, feature: Feature) -> "StaticResult":
        """Every ``requires`` entry of ``feature`` against the target's source (no import).
        Never raises: a source that cannot be read or parsed is in ``StaticResult.unreadable``
        and its verdicts are undecided ("unverifiable: why")."""
        self.failures = []
        verdicts = self.verdicts(feature.target, feature.parsed_requires, _engine_of(feature))
        try:
            source = self.source_of(feature.target) if self.info(feature.target) else None
        except Exception as exc:  # noqa: BLE001 - Unreadable, or a failure of the check itself
            source = None
            if not verdicts:
                verdicts = (Verdict(feature.target, UNDECIDED, f"unverifiable: {exc}",
                                    f"module {feature.target}", stops_boot=True),)
        if source is None and not verdicts:
            verdicts = (Verdict(feature.target, MISSING, f"no source for module {feature.target}",
                                f"module {feature.target}", self._closest_module(feature.target)),)
        return StaticResult(feature.name, feature.target, source, verdicts,
                            tuple(dict.fromkeys(self.failures)))


def _engine_of(feature: Feature) -> str:
    """The distribution name of ``feature``'s engine: its ``engine`` range's, the installed
    engine adapter's when not declared (None), "" when it targets no engine or no adapter
    loads."""
    if feature.engine is not None:
        return feature.engine_requirement.name if feature.engine else ""
    from dsv41_flags.engines import adapter

    try:
        return adapter().name
    except Exception:  # noqa: BLE001 - no adapter: the engine is unknown, nothing is probed
        return ""


def _carried(call: ast.Call, name: str) -> frozenset | None:
    """Names left out when ``call`` passes class ``name``'s own namespace on: ``vars(name)``,
    ``name.__dict__``, ``dict(vars(name))``, or ``{k: v for k, v in vars(name).items() if k not
    in (<literal>)}`` among its arguments; None when it passes no such namespace."""
    def is_ns(e: ast.expr) -> bool:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("vars", "dict") \
                and len(e.args) == 1 and not e.keywords:
            return (e.func.id == "vars" and isinstance(e.args[0], ast.Name) and e.args[0].id == name) \
                or (e.func.id == "dict" and is_ns(e.args[0]))
        return isinstance(e, ast.Attribute) and e.attr == "__dict__" and \
            isinstance(e.value, ast.Name) and e.value.id == name

    for arg in list(call.args) + [k.value for k in call.keywords]:
        if is_ns(arg):
            return frozenset()
        if isinstance(arg, ast.DictComp) and len(arg.generators) == 1:
            gen = arg.generators[0]
            it = gen.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
                    and it.func.attr == "items" and is_ns(it.func.value) and not it.args):
                continue
            if not (isinstance(gen.target, ast.Tuple) and len(gen.target.elts) == 2 and
                    all(isinstance(x, ast.Name) for x in gen.target.elts)):
                continue
            key, value = (x.id for x in gen.target.elts)
            if ast.unparse(arg.key) != key or ast.unparse(arg.value) != value:
                continue
            if not gen.ifs:
                return frozenset()
            test = gen.ifs[0]
            if len(gen.ifs) == 1 and isinstance(test, ast.Compare) and len(test.ops) == 1 and \
                    isinstance(test.ops[0], ast.NotIn) and ast.unparse(test.left) == key:
                try:
                    excluded = ast.literal_eval(test.comparators[0])
                except (ValueError, TypeError, SyntaxError):
                    continue
                if isinstance(excluded, (tuple, list, set, frozenset)):
                    return frozenset(str(x) for x in excluded)
    return None


#: functions of the engine that collect the fields of struct classes, by name -> the position,
#: in the tuple they return, of the ``{field name: annotation}`` dict (see ``_defstruct_fields``)
_FIELD_COLLECTORS = {"collect_input_fields": 0}


def _is_annotations_of(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "__annotations__" and \
        isinstance(expr.value, ast.Name) and expr.value.id == name


def _touches_annotations(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` mentions ``name.__annotations__`` or calls ``setattr`` on ``name``."""
    for n in ast.walk(stmt):
        if _is_annotations_of(n, name):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr" \
                and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == name:
            return True
    return False


def _binding_before(body: list, at: int, name: str) -> tuple[int, ast.Assign] | str:
    """``(index, statement)`` of the module-level ``name = ...`` / ``a, name, b = ...`` in effect
    at statement ``at`` of ``body``, when it is the only kind of binding and nothing between
    changes ``name`` in place; else why not."""
    found = None
    for i, stmt in enumerate(body[:at]):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and (
                (isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name) or
                (isinstance(stmt.targets[0], ast.Tuple) and any(
                    isinstance(e, ast.Name) and e.id == name for e in stmt.targets[0].elts) and
                 all(isinstance(e, ast.Name) for e in stmt.targets[0].elts))):
            found = (i, stmt)
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if stmt.name == name or any(isinstance(n, ast.Global) and name in n.names
                                        for n in ast.walk(stmt)):
                return f"{name} is bound in a function or class (line {stmt.lineno})"
            continue
        for n in ast.walk(stmt):
            if (isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)) or (
                    isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.value, ast.Name)
                    and n.value.id == name and (not isinstance(n.ctx, ast.Load) or (
                        isinstance(n, ast.Attribute) and n.attr in _MUTATORS))) or (
                    isinstance(n, ast.alias) and (n.asname or n.name) == name):
                return f"{name} is bound or changed at line {stmt.lineno}"
    return found if found else f"{name} is not bound at module level before it is used"


def _plain_function():  # the attributes every function has
    pass


def _dotted(expr: ast.expr) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return ".".join([expr.id] + parts[::-1])
    return None


def _short(expr: ast.expr) -> str:
    text = ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_classvar(node: ast.AnnAssign) -> bool:
    return "ClassVar" in ast.unparse(node.annotation)


def _slots(env: dict[str, _B]) -> list[str]:
    b = env.get("__slots__")
    if b is None or not b.exists or not isinstance(b.node, (ast.Assign, ast.AnnAssign)):
        return []
    try:
        value = ast.literal_eval(b.node.value)
    except (ValueError, TypeError, SyntaxError):
        return []
    return [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]


def _nt_fields(call: ast.Call) -> tuple[str, ...] | None:
    """Field names of a ``namedtuple(...)`` / ``NamedTuple(...)`` call, None when not literal."""
    arg = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg in ("field_names", "fields")), None)
    if any(k.arg == "rename" for k in call.keywords) or arg is None:
        return None
    try:
        value = ast.literal_eval(arg)
    except (ValueError, TypeError, SyntaxError):
        return None
    if isinstance(value, str):
        return tuple(value.replace(",", " ").split())
    try:
        out = tuple(v[0] if isinstance(v, (tuple, list)) else v for v in value)
    except TypeError:
        return None
    return out if all(isinstance(v, str) for v in out) else None


def _origin(node: ast.ImportFrom, name: str, module: str, is_package: bool) -> str:
    """The module an ImportFrom imports ``name`` from (relative imports resolved; ``module``'s
    package is itself when its source is a package ``__init__``)."""
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if not is_package:
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _lazy_map(fn: ast.FunctionDef, env: dict[str, _B]) -> tuple[dict[str, tuple[str, str]], bool]:
    """Names a module ``__getattr__`` serves from a literal dict -> ``(module, attribute)``, and
    whether it raises AttributeError for every other name. Two forms are read:
    ``v = D.get(name)`` then ``if v is None: raise ...``; and ``if name in D: ...`` with the
    function ending in ``raise``. Dict values: a module name (serving the same name from it) or
    a ``(module, attribute)`` pair. ``({}, False)`` for any other form."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    param = fn.args.args[0].arg if fn.args.args else None
    if len(body) < 2 or param is None:
        return {}, False
    first, second = body[0], body[1]
    dict_name, exhaustive = None, False
    if isinstance(first, ast.Assign) and isinstance(first.value, ast.Call) and \
            isinstance(first.value.func, ast.Attribute) and first.value.func.attr == "get" and \
            isinstance(first.value.func.value, ast.Name) and \
            [ast.unparse(x) for x in first.value.args[:1]] == [param]:
        dict_name = first.value.func.value.id
        var = first.targets[0].id if isinstance(first.targets[0], ast.Name) else None
        exhaustive = (isinstance(second, ast.If) and _ends_in_raise(second.body) and var is not None
                      and ast.unparse(second.test) in (f"{var} is None", f"not {var}"))
    elif isinstance(first, ast.If) and isinstance(first.test, ast.Compare) and \
            ast.unparse(first.test.left) == param and len(first.test.ops) == 1 and \
            isinstance(first.test.ops[0], ast.In) and isinstance(first.test.comparators[0], ast.Name):
        dict_name = first.test.comparators[0].id
        exhaustive = len(body) == 2 and isinstance(second, ast.Raise)
    if dict_name is None:
        return {}, False
    d = env.get(dict_name)
    if d is None or not d.exists or d.ambiguous or d.alts or \
            not isinstance(d.node, (ast.Assign, ast.AnnAssign)):
        return {}, False
    try:
        mapping = ast.literal_eval(d.node.value)
    except (ValueError, TypeError, SyntaxError):
        return {}, False
    if not isinstance(mapping, dict):
        return {}, False
    out: dict[str, tuple[str, str]] = {}
    for k, v in mapping.items():
        if isinstance(v, str):
            out[k] = (v, k)
        elif isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, str) for x in v):
            out[k] = (v[0], v[1])
        else:
            return {}, False
    return out, exhaustive


@dataclass(frozen=True)
class StaticResult:
    """Outcome of a static check of one feature.

    source: the target's file (None when not found); verdicts: one per ``requires`` entry;
    unreadable: why each source the check needed could not be read or parsed (the reason of an
    ``unreadable`` cell of the upgrade gate).
    ``missing``: the entries not decided ok, as short texts (``"module sglang.srt.x"``,
    ``"TargetVerifyExecutor.accept_and_finalize"``, ``"Cls.meth(param)"``, ``"X.y (undecided:
    why)"``).
    """

    feature: str
    target: str
    source: str | None
    verdicts: tuple[Verdict, ...] = ()
    unreadable: tuple[str, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        out = []
        for v in self.verdicts:
            if not v.ok and v.describe() not in out:
                out.append(v.describe())
        return tuple(out)

    @property
    def ok(self) -> bool:
        """True when every entry is decided ok."""
        return all(v.ok for v in self.verdicts)


#: the end of ``drift.param_verdict``'s reason for a parameter only ``**kwargs`` would absorb


def check_feature(feature: Feature, checker: Checker | None = None) -> StaticResult:
    """Check every ``requires`` entry of ``feature`` against the target's source (no import);
    ``checker`` defaults to one over the installed environment."""
    return (checker or Checker()).check(feature)
