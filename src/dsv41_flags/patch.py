"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The patch ledger and the install context handed to each feature's ``install(module, ctx)``.

Every attribute a feature replaces goes through ``ctx.patch``, which records the original, so
that installing twice leaves exactly one wrapper level and ``uninstall`` restores the originals
(the instrument/uninstrument pair of OpenTelemetry's BaseInstrumentor). The ledger also answers
whether each patch is still what the engine calls (``Ledger.lost``: the reachability audit).

On a class hierarchy every patch composes: a patch of an attribute a class inherits receives an
original that calls through to the attribute its bases hold at call time (``through``), so a base
patched later, or restored, is seen by the subclass; an inherited attribute that cannot be called
through that way (a builtin, a callable object, a descriptor other than a function, classmethod,
staticmethod or property) is captured as it is, and a base patch that its subclass's patch would
then never reach is refused (``PatchConflict``).
"""
from __future__ import annotations

import functools
import inspect
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from dsv41_flags.errors import PatchConflict
from dsv41_flags.live import gated
from dsv41_flags.text import exception_text
from dsv41_flags.wrappers import (CALLABLE, CLASSMETHOD, COROUTINE, FUNCTION, PLAIN, PROPERTY,
                                  STATICMETHOD, FallBack, as_declared, call_kind, iterating_wrapper,
                                  kind_mismatch, stored_kind)

_MISSING = object()
#: attribute set on each replacement: ``(feature, original, had_own, owner)``
_MARK = "__dsv41_patch__"

def _keeps_kind(original: Any, replacement: Any) -> bool:
    """``replacement`` is of ``original``'s ``stored_kind`` (another descriptor: an instance of
    the original's type)."""
    kind = stored_kind(original)
    if kind.startswith("descriptor "):
        return isinstance(replacement, type(original))
    return stored_kind(replacement) == kind


def _where(owner: Any, attr: str) -> str:
    """``Owner.attr`` for reports (qualified name of the owner)."""
    return f"{getattr(owner, '__qualname__', getattr(owner, '__name__', repr(owner)))}.{attr}"


@dataclass
class PatchRecord:
    """One applied patch: ``owner.attr`` was ``original`` (own attribute or inherited, as stored)
    and is now ``replacement``, applied by ``feature``.

    composes: the replacement was built over ``through`` (an inherited attribute: it calls the
    bases' attribute of call time, not ``original``); path: the names leading from the feature's
    target module to ``owner`` (``Ledger.anchor``; None: not reached from it, checked as
    recorded); failure: why the last restore of this record raised ("" when none did); seq: the
    ledger's application order."""

    feature: str
    owner: Any
    attr: str
    original: Any
    had_own: bool
    replacement: Any
    composes: bool = False
    path: tuple[str, ...] | None = None
    failure: str = ""
    seq: int = 0

    @property
    def where(self) -> str:
        """``Owner.attr`` for reports (qualified name of the owner)."""
        return _where(self.owner, self.attr)


def _static_get(owner: Any, attr: str) -> Any:
    """The attribute as stored, or _MISSING: for a class, the raw descriptor of the first class
    of its MRO that defines it (an inherited ``classmethod`` / ``staticmethod`` / ``property``
    is found as such, not bound through the subclass); for anything else, its own ``__dict__``
    entry or ``getattr``."""
    d = getattr(owner, "__dict__", {})
    if attr in d:
        return d[attr]
    if isinstance(owner, type):
        for klass in owner.__mro__[1:]:
            if attr in vars(klass):
                return vars(klass)[attr]
    return getattr(owner, attr, _MISSING)


def _next_stored(start: Any, owner: type, attr: str) -> Any:
    """``attr`` as stored in the first class after ``owner`` in the MRO of ``start`` (a class; the
    MRO of ``owner`` when ``start`` is not one of its subclasses), as ``super(owner, ...)`` finds
    it. Raises AttributeError naming ``Owner.attr`` when no base defines it any more."""
    mro = getattr(start, "__mro__", None)
    if not isinstance(mro, tuple) or owner not in mro:
        mro = owner.__mro__
    for klass in mro[mro.index(owner) + 1:]:
        stored = vars(klass)
        if attr in stored:
            return stored[attr]
    raise AttributeError(f"{_where(owner, attr)}: no base class of {owner.__qualname__} defines "
                         f"{attr!r} any more")


def _bases_bound(owner: type, attr: str, first: Any) -> Any:
    """The attribute ``owner``'s bases hold, bound to ``first`` by the descriptor protocol (where
    ``super(owner, first)`` refuses ``first``: neither an instance nor a subclass of ``owner``)."""
    stored = _next_stored(owner, owner, attr)
    get = getattr(type(stored), "__get__", None)
    return stored if get is None else get(stored, first, type(first))


def _calling_through(fn: Callable, owner: type, attr: str, static: bool) -> Callable:
    """A function of ``fn``'s kind (function, coroutine, generator, async generator function),
    name, doc and signature (``__wrapped__ = fn``) whose calls run ``super(owner, first).attr``
    looked up at each call, with the other arguments: ``first`` is the call's first argument (the
    instance of a method, the class of a classmethod), or ``owner`` itself for a staticmethod
    (then every argument is passed on)."""
    kind = call_kind(fn)
    if kind == FUNCTION and static:
        def through(*args: Any, **kwargs: Any) -> Any:
            return getattr(super(owner, owner), attr)(*args, **kwargs)
    elif kind == FUNCTION:
        def through(first: Any, /, *args: Any, **kwargs: Any) -> Any:
            try:
                view = super(owner, first)
            except TypeError:  # called through the class with another object: bound to it
                return _bases_bound(owner, attr, first)(*args, **kwargs)
            return getattr(view, attr)(*args, **kwargs)
    else:
        def current(args: tuple) -> tuple[Callable, tuple]:
            if static:
                return getattr(super(owner, owner), attr), args
            if not args:
                raise TypeError(f"{_where(owner, attr)}() missing its first argument")
            try:
                return getattr(super(owner, args[0]), attr), args[1:]
            except TypeError:
                return _bases_bound(owner, attr, args[0]), args[1:]

        if kind == COROUTINE:
            async def through(*args: Any, **kwargs: Any) -> Any:
                target, rest = current(args)
                return await target(*rest, **kwargs)
        else:
            def prepare(args: tuple, kwargs: dict):
                target, rest = current(args)
                return (lambda: target(*rest, **kwargs)), PLAIN

            through = iterating_wrapper(kind, prepare)
    return functools.update_wrapper(through, fn)


def through(owner: type, attr: str, stored: Any) -> Any:
    """What a patch of ``attr`` inherited by class ``owner`` hands to ``make``: of ``stored``'s
    kind (its bases' attribute at patch time), calling through to the attribute the bases hold at
    CALL time, as ``super(owner, ...)`` finds it (an override calling ``super()`` does the same),
    so a base patched, or restored, after this patch is what the subclass runs.

    - a function (method): a function ``(self, *args, **kwargs)`` of the original's call kind
      (an ``async def`` stays an ``async def``...);
    - a classmethod / staticmethod: the function under it, ``(cls, ...)`` / ``(...)``;
    - a property: a property whose getter, setter and deleter (those ``stored`` has) run the
      bases' property of call time.

    Returns None for anything else (a builtin, a callable object, a plain value, another
    descriptor): it is handed as stored (captured), see ``Ledger.patch``. A call costs one
    ``super`` lookup more than a captured original (``bench/b8_patch_check.py``)."""
    if isinstance(stored, property):
        def get(self):
            return getattr(super(owner, self), attr)

        def put(self, value):
            _next_stored(type(self), owner, attr).__set__(self, value)

        def delete(self):
            _next_stored(type(self), owner, attr).__delete__(self)

        return property(get if stored.fget else None, put if stored.fset else None,
                        delete if stored.fdel else None, stored.__doc__)
    fn = stored.__func__ if isinstance(stored, (classmethod, staticmethod)) else stored
    if not inspect.isfunction(fn):
        return None
    return _calling_through(fn, owner, attr, isinstance(stored, staticmethod))


def through_instance(instance: Any, attr: str, bound: Any) -> Any:
    """What a patch of ``attr`` on an object that does not hold it itself (its class does) hands
    to ``make``: a function of the call kind of ``bound`` (what ``getattr(instance, attr)`` gave
    at patch time) that calls the attribute its class holds at CALL time, bound to ``instance``
    (the descriptor protocol), so a patch of the class applied later, or restored, is what the
    object runs. None when ``bound`` is not callable or the class does not hold ``attr``
    (handed as it is then)."""
    klass = type(instance)
    if not callable(bound) or _stored(klass, attr) is None:
        return None

    def current() -> Callable:
        stored = _stored(klass, attr)
        if stored is None:
            raise AttributeError(f"{_where(klass, attr)}: the class of the patched object no "
                                 f"longer defines {attr!r}")
        get = getattr(type(stored), "__get__", None)
        return stored if get is None else get(stored, instance, klass)

    kind = call_kind(bound)
    if kind == FUNCTION:
        def call(*args: Any, **kwargs: Any) -> Any:
            return current()(*args, **kwargs)
    elif kind == COROUTINE:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await current()(*args, **kwargs)
    else:
        def prepare(args: tuple, kwargs: dict):
            target = current()
            return (lambda: target(*args, **kwargs)), PLAIN

        call = iterating_wrapper(kind, prepare)
    try:
        return functools.update_wrapper(call, bound)
    except (AttributeError, TypeError):
        return call


def _stored(obj: Any, name: str) -> Any:
    """``obj.name`` as stored, without running any code of ``obj``'s (no descriptor binding, no
    module or class ``__getattr__``): its own ``__dict__`` entry, else the entry of the first
    class in its MRO (a class) or its type's MRO (anything else) that defines it; None when none
    does."""
    try:
        own = object.__getattribute__(obj, "__dict__")  # never a __getattr__ of obj's
    except AttributeError:
        own = None
    if isinstance(own, (dict, MappingProxyType)) and name in own:
        return own[name]
    for klass in obj.__mro__ if isinstance(obj, type) else type(obj).__mro__:
        stored = vars(klass)
        if name in stored:
            return stored[name]
    return None


def _walk(obj: Any, path: Sequence[str]) -> Any:
    """``obj.a.b.c`` as stored (no descriptor binding); None when a step is missing."""
    for part in path:
        obj = _stored(obj, part)
        if obj is None:
            return None
    return obj


def _path_in(module: Any, owner: Any) -> tuple[str, ...] | None:
    """Names leading from ``module`` to ``owner`` (``()`` for the module itself, the qualified name
    of a class defined or imported there, else a module-level name bound to it), or None when the
    module does not reach it."""
    if owner is module:
        return ()
    qualname = getattr(owner, "__qualname__", None)
    if isinstance(qualname, str) and "<locals>" not in qualname:
        path = tuple(qualname.split("."))
        if _walk(module, path) is owner:
            return path
    for name, value in list(vars(module).items()):
        if value is owner:
            return (name,)
    return None


class Ledger:
    """Per-process record of every patch, in application order per attribute.

    The ledger is part of the per-process runtime (the one mutable object)."""

    def __init__(self) -> None:
        self._stacks: dict[tuple[int, str], list[PatchRecord]] = {}
        self._seq = itertools.count(1)

    def stack(self, owner: Any, attr: str) -> list[PatchRecord]:
        """Records on ``owner.attr``, first applied first."""
        return self._stacks.get((id(owner), attr), [])

    def records(self, feature: str | None = None) -> list[PatchRecord]:
        """Every record (of ``feature`` when given), in application order per attribute."""
        return [r for stack in self._stacks.values() for r in stack
                if feature is None or r.feature == feature]

    def patch(self, feature: str, owner: Any, attr: str, make: Callable[[Any], Any]) -> PatchRecord:
        """Set ``owner.attr = make(original)``.

        For a ``classmethod`` / ``staticmethod``, ``make`` receives the underlying function and its
        result (a function) is wrapped back into the same descriptor kind. Any other original is
        handed as stored (a ``property`` as the property object) and ``make`` returns one of the
        same ``stored_kind``. On a class that inherits ``attr``, a function, classmethod,
        staticmethod or property is handed as ``through``: it calls the bases' attribute of call
        time, so patches on a class hierarchy compose in any order (a base patched later or
        restored is what the subclass's patch calls); on an object whose class holds ``attr``,
        a callable is handed as ``through_instance`` (the class's attribute of call time). Any other inherited attribute is handed as
        stored (captured); patching a base class whose attribute a subclass's patch of another
        kind has so captured raises PatchConflict (the base patch would never reach the subclass).

        ``original`` is the value before this feature patched it (so a second install by the same
        feature wraps the original again, leaving one wrapper level; also when the first install
        went through another runtime's ledger in this process). Whether ``owner`` had its own
        ``attr`` (restored by ``uninstall``) or inherited it (removed by ``uninstall``, so a
        subclass follows its base again) is read from ``vars(owner)`` only, whatever was patched
        on its bases before. Raises AttributeError when ``owner`` has no ``attr``; TypeError
        naming the feature and ``Owner.attr`` when ``make`` returns another kind than the
        original's (a property for a function, a function for a property, a staticmethod for a
        classmethod, a callable for a plain value...); PatchConflict as above; whatever ``make``
        raises propagates. On any error nothing is changed.
        """
        key = (id(owner), attr)
        stack = self._stacks.setdefault(key, [])
        try:
            return self._apply(feature, owner, attr, make, stack)
        finally:
            if not stack:
                del self._stacks[key]

    def _apply(self, feature: str, owner: Any, attr: str, make: Callable[[Any], Any],
               stack: list[PatchRecord]) -> PatchRecord:
        """``patch`` on the record stack of ``owner.attr``."""
        mine = next((r for r in stack if r.feature == feature), None)
        if mine is not None and stack[-1] is not mine:
            raise RuntimeError(f"{feature}: cannot re-patch {mine.where}: feature(s) "
                               f"{[r.feature for r in stack[stack.index(mine) + 1:]]} patched it after")
        if isinstance(owner, type):
            self._refuse_unreached(feature, owner, attr)
        if mine is not None:
            below, had_own = mine.original, mine.had_own
        else:
            below = _static_get(owner, attr)
            if below is _MISSING:
                raise AttributeError(f"{owner!r} has no attribute {attr!r} to patch")
            own = getattr(owner, "__dict__", {})
            had_own = attr in own
            mark = getattr(below, _MARK, None) if had_own and own[attr] is below else None
            if (isinstance(mark, tuple) and len(mark) == 4 and mark[0] == feature
                    and mark[3] is owner):
                # this feature's replacement on this very owner, applied by another runtime's
                # ledger in this process: wrap what that one wrapped (one wrapper level). A mark
                # seen through inheritance (a base's replacement) is the base's, never adopted.
                below, had_own = mark[1], mark[2]
        kind = type(below) if isinstance(below, (classmethod, staticmethod)) else None
        handed = None if had_own else (through(owner, attr, below) if isinstance(owner, type)
                                       else through_instance(owner, attr, below))
        composes = handed is not None
        replacement = make(handed if composes else below.__func__ if kind else below)
        if kind and not isinstance(replacement, kind):  # keep the descriptor kind of the original
            if stored_kind(replacement) != CALLABLE:
                raise TypeError(self._kind_error(feature, owner, attr, below, replacement))
            replacement = kind(replacement)
        elif not _keeps_kind(below, replacement):
            raise TypeError(self._kind_error(feature, owner, attr, below, replacement))
        try:  # who made this replacement, on which owner, over what (read by another ledger, above)
            setattr(replacement, _MARK, (feature, below, had_own, owner))
        except (AttributeError, TypeError):
            pass
        fn = replacement.__func__ if kind else replacement
        if callable(fn) and not hasattr(fn, "__wrapped__"):
            try:  # lets inspect.signature (and the drift check of a re-install) see the original
                fn.__wrapped__ = below.__func__ if kind else below
            except (AttributeError, TypeError):
                pass
        set_name = getattr(type(replacement), "__set_name__", None)
        if isinstance(owner, type) and set_name is not None:
            set_name(replacement, owner, attr)  # as the class statement does (cached_property...)
        setattr(owner, attr, replacement)
        if mine is not None:
            mine.replacement, mine.composes, mine.failure = replacement, composes, ""
            return mine
        record = PatchRecord(feature, owner, attr, below, had_own, replacement, composes,
                             seq=next(self._seq))
        stack.append(record)
        return record

    def _refuse_unreached(self, feature: str, owner: type, attr: str) -> None:
        """Raise PatchConflict when a patch of ``owner.attr`` would not reach a subclass: another
        record on a subclass inheriting ``attr`` captured what ``owner`` holds now (it does not
        compose: ``through`` cannot stand for it)."""
        current = _static_get(owner, attr)
        for record in self.records():
            if (record.attr == attr and record.owner is not owner and not record.composes
                    and not record.had_own and isinstance(record.owner, type)
                    and issubclass(record.owner, owner) and record.original is current):
                raise PatchConflict(
                    f"feature {feature!r}: patching {_where(owner, attr)} is refused: feature "
                    f"{record.feature!r} patched the subclass's inherited {record.where} (a "
                    f"{stored_kind(record.original)}, which cannot call through to its base at "
                    f"call time), so this patch would never run for {record.owner.__qualname__}; "
                    f"patch {_where(owner, attr)} first (declare after=({feature!r},) on "
                    f"{record.feature!r}), or patch {record.where} in this feature too")

    def overlapping(self, record: PatchRecord) -> list[PatchRecord]:
        """Every record on ``record.attr`` of the same owner or of a class related to it by
        inheritance (a base or a subclass of it), ``record`` included, in application order: the
        patches that compose on one call (``feature.conflict`` reports them)."""
        def related(other: PatchRecord) -> bool:
            if other.owner is record.owner:
                return True
            return (isinstance(other.owner, type) and isinstance(record.owner, type)
                    and (issubclass(other.owner, record.owner) or issubclass(record.owner, other.owner)))

        return sorted((r for r in self.records() if r.attr == record.attr and related(r)),
                      key=lambda r: r.seq)

    @staticmethod
    def _kind_error(feature: str, owner: Any, attr: str, original: Any, replacement: Any) -> str:
        """The message of a replacement of another ``stored_kind`` than the original's."""
        kind = stored_kind(original)
        expected = (f"a function (wrapped back into the {kind}) or a {kind}"
                    if kind in (CLASSMETHOD, STATICMETHOD) else f"a {kind}")
        return (f"feature {feature!r}: {_where(owner, attr)} is a {kind} but the replacement is a "
                f"{stored_kind(replacement)} ({type(replacement).__name__}): a patch keeps the "
                f"kind of the attribute it replaces (make must return {expected})")

    def above(self, record: PatchRecord) -> list[str]:
        """The other features whose patches sit on ``record``'s: patched later on the same
        attribute, or on a subclass (an instance) inheriting it, whose replacement captured
        ``record``'s (sorted names; a subclass's patch that calls through, ``through``, is not
        one: it follows whatever its base holds)."""
        stack = self.stack(record.owner, record.attr)
        later = stack[stack.index(record) + 1:] if record in stack else []
        wrapping = [r for r in self.records()
                    if r.original is record.replacement and not r.composes]
        return sorted({r.feature for r in later + wrapping if r.feature != record.feature})

    def uninstall(self, feature: str) -> list[PatchRecord]:
        """Restore every attribute ``feature`` patched (last patched first): an attribute the owner
        had as its own is set back, an inherited one is deleted (the owner inherits again).

        Every restore is tried, each independent of the others. Returns the records left in
        place, still patched: one with another feature's patch above it (``above``: on the same
        attribute, or on a subclass that captured its replacement), and one whose owner refused
        the restore (``setattr`` / ``delattr`` raised: a locked metaclass...), its ``failure``
        saying why. Never raises over a restore."""
        kept = []
        for key, stack in list(self._stacks.items()):
            for record in [r for r in stack if r.feature == feature]:
                if stack[-1] is not record or self.above(record):
                    kept.append(record)
                    continue
                try:
                    if record.had_own:
                        setattr(record.owner, record.attr, record.original)
                    else:
                        try:
                            delattr(record.owner, record.attr)
                        except AttributeError:
                            pass
                except Exception as exc:  # noqa: BLE001 - reported by the caller, the rest go on
                    record.failure = exception_text(exc)
                    kept.append(record)
                    continue
                record.failure = ""
                stack.pop()
            if not stack:
                del self._stacks[key]
        return kept

    # ------------------------------------------------------------------ the reachability audit
    def anchor(self, feature: str, module: Any) -> None:
        """Record how the engine reaches each patch of ``feature`` from ``module`` (its target, as
        imported): ``PatchRecord.path``, the names from the module to the patched owner (the
        module itself, a class defined or imported there by its qualified name, another
        module-level name), read by ``lost``."""
        for record in self.records(feature):
            record.path = _path_in(module, record.owner)

    def lost(self, feature: str, module: Any) -> list[str]:
        """``Owner.attr`` of every patch of ``feature`` that the engine would not call now, given
        ``module``, its target as it stands in ``sys.modules`` (None: no longer imported, every
        patch counts as lost). Each attribute is reached from the module as the engine reaches it
        (module -> owner by its ``path`` -> attribute, as stored), so a class replaced by a reload,
        a reloaded module's rebound function or an overwritten attribute all count; an owner the
        module does not reach (``path`` None) is checked as recorded. An attribute with another
        feature's patch above ours must hold that one (which wraps ours).

        Cost: per patch, ``len(path) + 1`` dictionary lookups along MROs (``_stored``); reads only,
        never imports, never runs the engine's code (no descriptor, no ``__getattr__``)."""
        out = []
        for record in self.records(feature):
            if module is None:
                out.append(record.where)
                continue
            top = self.stack(record.owner, record.attr)[-1]
            now = (_stored(record.owner, record.attr) if record.path is None
                   else _walk(module, record.path + (record.attr,)))
            if now is not top.replacement:
                out.append(record.where)
        return out


@dataclass(frozen=True)
class InstallContext:
    """What ``install(module, ctx)`` receives.

    feature: the Feature; options: option name -> resolved value; fingerprint: the launch
    Fingerprint (from the snapshot in children); log: a structlog logger bound with
    ``feature=<name>`` (the feature's own events, filtered by ``log_level``); ledger: the
    runtime's patch ledger (use ``patch``); gate: for a live feature (``Feature(live=True)``), its
    switch (``gate.on``), else None. Every ``patch`` of a live feature is bypassed while
    ``gate.on`` is False (see ``live.gated``), so the feature file stays only the patch; read
    ``gate.on`` yourself only for state that is not a patched callable. report: the logger of the
    framework's report events (never filtered; ``guard`` reports through it; ``log`` when not
    given).
    """

    feature: Any
    options: Mapping[str, Any]
    fingerprint: Any
    log: Any
    ledger: Ledger = field(repr=False)
    gate: Any = None
    report: Any = field(default=None, repr=False)

    def patch(self, owner: Any, attr: str, make: Callable[[Any], Any], *, guard: bool = False) -> Any:
        """Replace ``owner.attr`` by ``make(original)`` through the ledger; returns the replacement.

        Installing twice leaves one wrapper level; ``Runtime.uninstall`` restores the original.
        A function, method, ``staticmethod`` or ``classmethod`` may be patched (``make`` receives
        the function under a staticmethod/classmethod; the result is wrapped back), and so may a
        property, another descriptor or a plain value (``make`` receives it as stored and returns
        one of the same kind: ``stored_kind``). Give a replacement of the original's kind
        (``dsv41_flags.wrappers``: an ``async def`` for an ``async def``...) or a plain function
        returning what the original's calls return.
        For a live feature the replacement is a bypass wrapper (``live.gated``) of the original's
        kind that calls ``make``'s result while ``ctx.gate`` is on and the original otherwise.
        Raises AttributeError when ``owner`` has no ``attr``; SwitchError when a live feature
        patches something that is not callable (a property, a plain value); TypeError (guard,
        plain) / SwitchError (live) naming the feature and ``Owner.attr`` when ``make`` returns
        another kind than the original's (a function for a property...), and TypeError when
        guard=True meets what it cannot guard (a plain value, a descriptor other than a
        classmethod, staticmethod or property). A patch never changes the kind silently.

        guard: the replacement runs under ``guard`` with the original as fallback, in a wrapper
        of the original's kind (see ``guard`` for coroutines and generators): an exception raised
        by the feature's code is reported (``<feature>.error``) and the original is called with
        the same arguments, as the stock engine would; an exception raised by the original that
        ``make`` received (the engine's own code) propagates unchanged. A property stays a
        property: ``make`` receives the original property and returns a property, each accessor
        it defines is guarded with the original's same accessor as the fallback. Only for functions whose
        code has no side effect the original would repeat (no collective before the failure
        point); a context manager is guarded step by step with ``guard`` instead.
        """
        if guard:
            unguarded = make

            def make(original):
                where = _where(owner, attr)
                kind = stored_kind(original)
                if kind == PROPERTY:
                    return self._guarded_property(unguarded, original, attr, where)
                if kind != CALLABLE:
                    raise TypeError(f"feature {self.feature.name!r}: {where} is a {kind}: guard=True "
                                    f"guards only functions, methods, classmethods, staticmethods "
                                    f"and properties (patch it without guard=True)")
                replacement = unguarded(_engine_code(original))
                if stored_kind(replacement) != CALLABLE:
                    raise TypeError(f"feature {self.feature.name!r}: {where}: under guard=True make "
                                    f"must return a function (the ledger keeps a classmethod or "
                                    f"staticmethod around it), not a {stored_kind(replacement)} "
                                    f"({type(replacement).__name__})")
                guarded = self.guard(replacement, original, step=attr)
                guarded.__wrapped__ = original  # inspect.signature and the drift check see the original
                return guarded

        if self.gate is not None:
            make = gated(make, self.gate, f"{getattr(owner, '__qualname__', getattr(owner, '__name__', owner))}.{attr}")
        return self.ledger.patch(self.feature.name, owner, attr, make).replacement

    def _guarded_property(self, make: Callable[[Any], Any], original: property, attr: str,
                          where: str) -> property:
        """``make``'s property with each accessor it defines (getter, setter, deleter) guarded,
        the original's same accessor as the fallback (skipped when the original has none).
        ``make`` receives the original property whose accessors mark what they raise as the
        engine's own. Raises TypeError naming the feature and ``where`` when ``make`` returns
        anything but a property."""
        seen = property(*(None if f is None else _engine_code(f)
                          for f in (original.fget, original.fset, original.fdel)), doc=original.__doc__)
        replacement = make(seen)
        if not isinstance(replacement, property):
            raise TypeError(f"feature {self.feature.name!r}: {where} is a property but the "
                            f"replacement is a {stored_kind(replacement)} "
                            f"({type(replacement).__name__}): a patch keeps the kind of the "
                            f"attribute it replaces (make must return a property)")
        guarded = replacement
        for field_name, copy in (("fget", "getter"), ("fset", "setter"), ("fdel", "deleter")):
            fn = getattr(replacement, field_name)
            if fn is not None:
                accessor = self.guard(fn, getattr(original, field_name), step=f"{attr}.{copy}")
                accessor.__wrapped__ = getattr(original, field_name) or fn
                guarded = getattr(guarded, copy)(accessor)
        return guarded

    def guard(self, fn: Callable, fallback: Callable | None = None, *, step: str = "") -> Callable:
        """``fn`` made safe for the engine, in a wrapper of the kind of ``fallback`` (of ``fn``
        when no fallback; ``dsv41_flags.wrappers``) with ``fn``'s name and doc.

        - A function: a call runs ``fn(*args, **kwargs)``; when it raises an ``Exception`` (a
          malformed file, a filesystem fault, a bug of the feature) the cause is reported as
          ``<feature>.error`` (fields ``step``, ``cause``, ``action``) through the report logger,
          and ``fallback(*args, **kwargs)`` is returned instead (None when no fallback).
        - A coroutine function: the same when the coroutine is awaited (``await fallback(...)``).
        - A generator / async generator function: an exception from ``fn``'s iteration before
          its first item is reported and the iteration goes on with ``fallback(*args, **kwargs)``
          from its start (an empty one without fallback). After the first item the original
          cannot take over without repeating what the caller already received: the cause is
          reported (action "raised to the caller after N item(s)") and raised to the caller.
          ``send`` / ``throw`` / ``close`` and the return value pass through.

        Exceptions raised by code wrapped with ``patch(guard=True)``'s original pass through, so
        do ``BaseException``s that are not ``Exception`` (KeyboardInterrupt, SystemExit,
        ``asyncio.CancelledError``) and an exception the caller threw into a generator. Never
        raises itself over ``fn``'s failure; the fallback's own exceptions propagate (they are the
        engine's). Raises TypeError when ``fn`` is of another kind than ``fallback`` (a plain
        function may stand for any kind)."""
        name, step = self.feature.name, step or getattr(fn, "__name__", "step")
        events = self.report if self.report is not None else self.log
        kind = call_kind(fn if fallback is None else fallback)
        mismatch = kind_mismatch(kind, fn)
        if mismatch:
            raise TypeError(f"feature {name!r}: {step}: {mismatch}")

        def report(cause: BaseException, action: str) -> None:
            try:
                events.error(f"{name}.error", feature=name, step=step,
                             cause=f"{type(cause).__name__}: {cause}", action=action)
            except Exception:
                pass

        fell_back = ("called the engine's original" if fallback is not None
                     else "step skipped") + ", as without this feature"

        if kind == FUNCTION:
            def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return fn(*args, **kwargs)
                except Exception as exc:
                    if getattr(exc, _ENGINE_MARK, False):
                        raise
                    report(exc, fell_back)
                return None if fallback is None else fallback(*args, **kwargs)
        elif kind == COROUTINE:
            async def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(*args, **kwargs)
                except Exception as exc:
                    if getattr(exc, _ENGINE_MARK, False):
                        raise
                    report(exc, fell_back)
                return None if fallback is None else await fallback(*args, **kwargs)
        else:
            def prepare(args: tuple, kwargs: dict):
                rest = ((lambda: ()) if fallback is None
                        else (lambda: fallback(*args, **kwargs)))
                return (lambda: fn(*args, **kwargs)), _GuardedSteps(report, fell_back, rest)

            call = iterating_wrapper(kind, prepare)
        return as_declared(functools.update_wrapper(call, fn), fn if fallback is None else fallback)


class _GuardedSteps:
    """The step of a guarded generator: counts the items ``fn``'s iteration produced; a feature
    exception before the first one falls back (``FallBack`` to ``rest``), after it is reported
    and raised."""

    __slots__ = ("report", "fell_back", "rest", "items", "thrown")

    def __init__(self, report: Callable[[BaseException, str], None], fell_back: str,
                 rest: Callable[[], Any]):
        self.report, self.fell_back, self.rest = report, fell_back, rest
        self.items, self.thrown = 0, None

    def __call__(self, thrown: BaseException | None) -> "_GuardedSteps":
        self.thrown = thrown
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, etype: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            self.items += 1
            return False
        if (not isinstance(exc, Exception) or isinstance(exc, (StopIteration, StopAsyncIteration))
                or exc is self.thrown or getattr(exc, _ENGINE_MARK, False)):
            return False
        if self.items == 0:
            self.report(exc, self.fell_back)
            raise FallBack(self.rest, PLAIN)
        self.report(exc, f"raised to the caller after {self.items} item(s): the engine's "
                         f"original cannot take over mid-iteration without repeating them")
        return False


class _EngineSteps:
    """The step of the engine's generator handed to a guarded feature: marks what it raises."""

    __slots__ = ()

    def __call__(self, thrown: BaseException | None) -> "_EngineSteps":
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, etype: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is not None and not isinstance(exc, (StopIteration, StopAsyncIteration, GeneratorExit)):
            _mark_engine(exc)
        return False


_ENGINE_MARK = "__dsv41_engine_raised__"


def _mark_engine(exc: BaseException) -> None:
    try:
        setattr(exc, _ENGINE_MARK, True)
    except Exception:
        pass


def _engine_code(original: Callable) -> Callable:
    """``original`` (same kind) marking what it raises as the engine's own (``guard`` lets it
    through)."""
    if not callable(original):
        return original
    kind = call_kind(original)
    if kind == FUNCTION:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                _mark_engine(exc)
                raise
    elif kind == COROUTINE:
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return await original(*args, **kwargs)
            except BaseException as exc:
                _mark_engine(exc)
                raise
    else:
        steps = _EngineSteps()

        def prepare(args: tuple, kwargs: dict):
            return (lambda: original(*args, **kwargs)), steps

        call = iterating_wrapper(kind, prepare)
    return as_declared(functools.update_wrapper(call, original), original)
