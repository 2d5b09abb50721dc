"""The patch ledger and the install context handed to each feature's ``install(module, ctx)``.

Every attribute a feature replaces goes through ``ctx.patch``, which records the original, so
that installing twice leaves exactly one wrapper level and ``uninstall`` restores the originals
(the instrument/uninstrument pair of OpenTelemetry's BaseInstrumentor).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dsv41_flags.live import gated
from dsv41_flags.wrappers import (COROUTINE, FUNCTION, PLAIN, FallBack, as_declared, call_kind,
                                  iterating_wrapper, kind_mismatch)

_MISSING = object()
#: attribute set on each replacement: ``(feature, original, had_own)``
_MARK = "__dsv41_patch__"


@dataclass
class PatchRecord:
    """One applied patch: ``owner.attr`` was ``original`` (own attribute or inherited) and is now
    ``replacement``, applied by ``feature``."""

    feature: str
    owner: Any
    attr: str
    original: Any
    had_own: bool
    replacement: Any

    @property
    def where(self) -> str:
        """``Owner.attr`` for reports (qualified name of the owner)."""
        return f"{getattr(self.owner, '__qualname__', getattr(self.owner, '__name__', repr(self.owner)))}.{self.attr}"


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


class Ledger:
    """Per-process record of every patch, in application order per attribute.

    The ledger is part of the per-process runtime (the one mutable object)."""

    def __init__(self) -> None:
        self._stacks: dict[tuple[int, str], list[PatchRecord]] = {}

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
        result is wrapped back into the same descriptor kind.

        ``original`` is the value before this feature patched it (so a second install by the same
        feature wraps the original again, leaving one wrapper level; also when the first install
        went through another runtime's ledger in this process). Raises AttributeError when
        ``owner`` has no ``attr``; whatever ``make`` raises propagates and nothing is changed.
        """
        key = (id(owner), attr)
        stack = self._stacks.setdefault(key, [])
        mine = next((r for r in stack if r.feature == feature), None)
        if mine is not None and stack[-1] is not mine:
            raise RuntimeError(f"{feature}: cannot re-patch {mine.where}: feature(s) "
                               f"{[r.feature for r in stack[stack.index(mine) + 1:]]} patched it after")
        if mine is not None:
            below, had_own = mine.original, mine.had_own
        else:
            below = _static_get(owner, attr)
            if below is _MISSING:
                if not stack:
                    del self._stacks[key]
                raise AttributeError(f"{owner!r} has no attribute {attr!r} to patch")
            had_own = attr in getattr(owner, "__dict__", {})
            mark = getattr(below, _MARK, None)
            if isinstance(mark, tuple) and len(mark) == 3 and mark[0] == feature:
                # this feature's replacement, applied by another runtime's ledger in this process:
                # wrap what that one wrapped, so the attribute still has one wrapper level
                below, had_own = mark[1], mark[2]
        kind = type(below) if isinstance(below, (classmethod, staticmethod)) else None
        replacement = make(below.__func__ if kind else below)
        if kind and not isinstance(replacement, kind):  # keep the descriptor kind of the original
            replacement = kind(replacement)
        try:  # who made this replacement, over what (read by another ledger, above)
            setattr(replacement, _MARK, (feature, below, had_own))
        except (AttributeError, TypeError):
            pass
        fn = replacement.__func__ if kind else replacement
        if callable(fn) and not hasattr(fn, "__wrapped__"):
            try:  # lets inspect.signature (and the drift check of a re-install) see the original
                fn.__wrapped__ = below.__func__ if kind else below
            except (AttributeError, TypeError):
                pass
        setattr(owner, attr, replacement)
        if mine is not None:
            mine.replacement = replacement
            return mine
        record = PatchRecord(feature, owner, attr, below, had_own, replacement)
        stack.append(record)
        return record

    def uninstall(self, feature: str) -> list[PatchRecord]:
        """Restore every attribute ``feature`` patched (last patched first). A record with another
        feature's patch above it is left in place (returned in the list of kept records)."""
        kept = []
        for key, stack in list(self._stacks.items()):
            for record in [r for r in stack if r.feature == feature]:
                if stack[-1] is not record:
                    kept.append(record)
                    continue
                if record.had_own:
                    setattr(record.owner, record.attr, record.original)
                else:
                    try:
                        delattr(record.owner, record.attr)
                    except AttributeError:
                        pass
                stack.pop()
            if not stack:
                del self._stacks[key]
        return kept

    def lost(self, feature: str) -> list[PatchRecord]:
        """Records of ``feature`` whose replacement is no longer what the attribute holds (someone
        else overwrote it) - only checked for the top record of each attribute."""
        out = []
        for stack in self._stacks.values():
            if stack and stack[-1].feature == feature:
                if _static_get(stack[-1].owner, stack[-1].attr) is not stack[-1].replacement:
                    out.append(stack[-1])
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
        the function under a staticmethod/classmethod; the result is wrapped back). Give a
        replacement of the original's kind (``dsv41_flags.wrappers``: an ``async def`` for an
        ``async def``...) or a plain function returning what the original's calls return.
        For a live feature the replacement is a bypass wrapper (``live.gated``) of the original's
        kind that calls ``make``'s result while ``ctx.gate`` is on and the original otherwise.
        Raises AttributeError when ``owner`` has no ``attr``; SwitchError when a live feature
        patches something that is not callable; TypeError (guard) / SwitchError (live) when
        ``make`` returns another kind than the original's.

        guard: the replacement runs under ``guard`` with the original as fallback, in a wrapper
        of the original's kind (see ``guard`` for coroutines and generators): an exception raised
        by the feature's code is reported (``<feature>.error``) and the original is called with
        the same arguments, as the stock engine would; an exception raised by the original that
        ``make`` received (the engine's own code) propagates unchanged. Only for functions whose
        code has no side effect the original would repeat (no collective before the failure
        point); a context manager is guarded step by step with ``guard`` instead.
        """
        if guard:
            unguarded = make

            def make(original):
                guarded = self.guard(unguarded(_engine_code(original)), original, step=attr)
                guarded.__wrapped__ = original  # inspect.signature and the drift check see the original
                return guarded

        if self.gate is not None:
            make = gated(make, self.gate, f"{getattr(owner, '__qualname__', getattr(owner, '__name__', owner))}.{attr}")
        return self.ledger.patch(self.feature.name, owner, attr, make).replacement

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
