"""Live switches: switch a live-safe feature on or off while the process serves.

A feature declared ``Feature(live=True)`` gets one ``Gate`` per process. Every patch it makes
through ``ctx.patch`` is wrapped in a bypass (``gated``) of the original's kind that reads
``gate.on`` once per call of the feature (and pins it for the patches that call enters) and
calls the original while it is off, so a live feature whose flag is off at boot is installed
*bypassed* and switching it on later needs no re-patch. The ``Switchboard`` (owned by the
per-process runtime, the one mutable object) holds the gates, the generation number (how many
switches this process applied; lockstep ranks agree on it), the bounded history of switches
(the audit record) and the lock that serialises switches. Every switch path (``Runtime.switch``,
``dsv41-flags set``, the HTTP route) reads names with ``feature_name`` and values with
``parse_value``. Engine-specific transport (sglang RPC, HTTP routes) lives in
``dsv41_flags.engines.sglang``.

Settings files stay the source of truth at boot: a live switch is an override until the next
launch.
"""

import collections
import contextvars
import datetime
import threading
import unicodedata
from typing import Any, Callable, NamedTuple

from dsv41_flags.errors import NotLiveError, SwitchError
from dsv41_flags.text import UNSAFE_CATEGORIES, quoted, safe_text
from dsv41_flags.values import FALSE_WORDS, TRUE_WORDS, CastError, cast_bool
from dsv41_flags.wrappers import (CALLABLE, COROUTINE, FUNCTION, as_declared, call_kind,
                                  copy_identity, iterating_wrapper, kind_mismatch, stored_kind)

__all__ = ["Toggle", "SwitchError", "NotLiveError"]

#: the ledger name of the framework's own patches (the engine adapter's live-switch RPC)
BUILTIN = "dsv41_flags"


class Gate:
    """The per-process switch of one live feature: ``on`` is read once per call of the feature's
    patches (only the runtime writes it, ``Runtime.switch``); ``pin`` holds, while a call of one
    of the feature's patches runs, the value that call read (see ``gated``); ``patches`` names the
    attributes gated by it and ``alone`` is True while there is at most one."""

    __slots__ = ("on", "feature", "pin", "patches", "alone")

    def __init__(self, feature: str, on: bool):
        self.feature = feature
        self.on = bool(on)
        self.pin: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
            f"dsv41_flags.gate.{feature}", default=None)
        self.patches: set[str] = set()
        self.alone = True

    def add(self, where: str) -> None:
        """Count ``where`` among the gated attributes (``alone`` becomes False at the second)."""
        self.patches.add(where)
        self.alone = len(self.patches) <= 1

    def __repr__(self) -> str:
        return f"Gate({self.feature!r}, on={self.on})"


class _Pinned:
    """The step of a gated generator: every resume runs with the gate's pin set to ``on``."""

    __slots__ = ("pin", "on", "token")

    def __init__(self, pin: contextvars.ContextVar, on: bool):
        self.pin, self.on, self.token = pin, on, None

    def __call__(self, thrown: BaseException | None) -> "_Pinned":
        return self

    def __enter__(self) -> None:
        self.token = self.pin.set(self.on)

    def __exit__(self, *exc: Any) -> bool:
        _unpin(self.pin, self.token)
        return False


def _unpin(pin: contextvars.ContextVar, token: contextvars.Token) -> None:
    try:
        pin.reset(token)
    except ValueError:  # resumed in another context than the one it started in
        pin.set(None)


def gated(make: Callable[[Any], Any], gate: Gate, where: str = "") -> Callable[[Any], Any]:
    """Wrap a feature's ``make(original) -> replacement`` so that the replacement is bypassed
    while the gate is off: the wrapper calls ``replacement`` when on, ``original`` when off.

    One state per call: a call of any of the feature's gated patches that is not already inside
    one (the outermost entry) reads ``gate.on`` once and pins it (``gate.pin``, a ContextVar) for
    everything it runs, so every patch of the feature entered during that call (A calling B)
    sees the same state. A call that starts after ``Runtime.switch`` returned sees the new state
    in every patch; a call in flight across a switch finishes in the state it started with. The
    pin follows the context: threads start unpinned, an asyncio task created inside a call
    inherits the call's pin. A coroutine reads the gate when it starts running (first awaited),
    a generator at its first step, and keeps that state in every later step. A feature with a
    single gated function or coroutine function (``gate.alone``) has no other patch to agree
    with: its calls read ``gate.on`` without pinning (the patched-call cost stays one attribute
    read); only a recursive re-entry of that one function reads the gate again.

    The wrapper is of the original's kind (``dsv41_flags.wrappers``: function, coroutine function,
    generator function, async generator function; ``inspect.iscoroutinefunction`` & co. answer as
    for the original) and carries the replacement's ``__module__``, ``__name__``,
    ``__qualname__`` and ``__doc__``, ``__wrapped__ = original`` (``inspect.signature`` sees the
    original) and ``__dsv41_gate__ = gate``. Raises SwitchError when the original or the
    replacement is not callable (a live feature may only patch functions and methods; not a property
    or a plain value), the replacement is a classmethod / staticmethod (``make`` returns a
    function) or of another kind than the original (a plain function may stand for any kind).
    """

    def make_gated(original):
        what = where or "the patched attribute"
        if not callable(original):
            raise SwitchError(f"live feature {quoted(gate.feature)}: {what} is not callable "
                              f"({type(original).__name__}); a live feature may only patch "
                              f"functions and methods (declare it without live=True)")
        patched = make(original)
        if not callable(patched):
            raise SwitchError(f"live feature {quoted(gate.feature)}: the replacement for {what} is not "
                              f"callable")
        if stored_kind(patched) != CALLABLE:
            raise SwitchError(f"live feature {quoted(gate.feature)}: the replacement for {what} is a "
                              f"{stored_kind(patched)}: make must return a function (the ledger keeps "
                              f"a classmethod or staticmethod around it)")
        kind = call_kind(original)
        mismatch = kind_mismatch(kind, patched)
        if mismatch:
            raise SwitchError(f"live feature {quoted(gate.feature)}: {what}: {mismatch}")
        pin = gate.pin
        gate.add(where or f"{type(original).__name__} at {id(original):#x}")

        if kind == FUNCTION:
            def bypass(*args, **kwargs):
                if gate.alone:  # no other patch of the feature: nothing to agree with
                    if gate.on:
                        return patched(*args, **kwargs)
                    return original(*args, **kwargs)
                on = pin.get()
                if on is not None:  # inside a call of this feature: its state
                    return patched(*args, **kwargs) if on else original(*args, **kwargs)
                on = gate.on
                token = pin.set(on)
                try:
                    return patched(*args, **kwargs) if on else original(*args, **kwargs)
                finally:
                    pin.reset(token)
        elif kind == COROUTINE:
            async def bypass(*args, **kwargs):
                if gate.alone:
                    return await (patched if gate.on else original)(*args, **kwargs)
                on = pin.get()
                if on is not None:
                    return await (patched if on else original)(*args, **kwargs)
                on = gate.on
                token = pin.set(on)
                try:
                    return await (patched if on else original)(*args, **kwargs)
                finally:
                    _unpin(pin, token)
        else:
            def prepare(args, kwargs):
                on = pin.get()
                if on is None:
                    on = gate.on
                chosen = patched if on else original
                return (lambda: chosen(*args, **kwargs)), _Pinned(pin, on)

            bypass = iterating_wrapper(kind, prepare)

        bypass = copy_identity(as_declared(bypass, original), patched, original)
        bypass.__dsv41_gate__ = gate
        return bypass

    return make_gated


class Toggle(NamedTuple):
    """One switch: ``feature`` went from ``old`` to ``new`` as this process's ``generation``;
    ``requested_by`` who asked; ``step`` the engine step it took effect at (the scheduler's
    ``forward_ct``; None outside a scheduler); ``at`` UTC ISO time; ``request_id`` the id shared by
    every rank of one lockstep request ("" in-process); ``changed`` False for a switch to the value
    the feature already had (then ``old == new``, ``generation`` is the current one and nothing
    was recorded)."""

    feature: str
    old: bool
    new: bool
    generation: int
    requested_by: str
    step: int | None = None
    at: str = ""
    request_id: str = ""
    changed: bool = True

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return {"feature": self.feature, "old": self.old, "new": self.new,
                "generation": self.generation, "requested_by": self.requested_by,
                "step": self.step, "at": self.at, "request_id": self.request_id,
                "changed": self.changed}


#: switches kept in a process's history (the oldest are dropped first, counted in ``dropped``)
HISTORY_LIMIT = 256
#: longest ``requested_by`` text a switch accepts (characters)
REQUESTED_BY_LIMIT = 256


class Switchboard:
    """Gates, generation and switch history of one process (part of the runtime).

    ``generation`` starts at 0 at boot and becomes the generation of each applied switch;
    ``history`` holds the last ``HISTORY_LIMIT`` applied ``Toggle``s in order (``dropped``
    counts the older ones let go); ``lock`` serialises switches (``Runtime.switch`` holds it from
    its check to its event, so concurrent switches get generations 1..N once each, in order, each
    ``old`` the previous ``new``); ``reply`` is the transport's scratch slot (the JSON answer of
    the last engine RPC, read once by the engine adapter)."""

    def __init__(self, limit: int = HISTORY_LIMIT) -> None:
        self.gates: dict[str, Gate] = {}
        self.generation = 0
        self.history: collections.deque[Toggle] = collections.deque(maxlen=limit)
        self.dropped = 0
        self.lock = threading.RLock()
        self.reply: str | None = None
        self.transport: dict[str, Any] = {}  # engine adapter state (RPC endpoint, client)
        self._last: dict[str, Toggle] = {}
        self._undo: tuple[Toggle, int, Toggle | None] | None = None

    def gate(self, feature: str, on: bool) -> Gate:
        """The gate of ``feature`` (created with ``on`` the first time)."""
        gate = self.gates.get(feature)
        if gate is None:  # created where first used (an install, a switch): maybe by two threads at
            gate = self.gates.setdefault(feature, Gate(feature, on))  # once: one gate (atomic)
        return gate

    def last(self, feature: str) -> Toggle | None:
        """The last applied switch of ``feature`` (also when the history let it go), or None."""
        return self._last.get(feature)

    def apply(self, feature: str, new: bool, *, requested_by: str, generation: int | None = None,
              step: int | None = None, request_id: str = "") -> Toggle:
        """Set the gate and record the switch (generation: the next one unless given, then it
        must be above the current one). A switch to the gate's current value changes and records
        nothing: it returns a Toggle with ``changed=False`` and the current generation. Raises
        SwitchError for a generation that is not above the current one."""
        with self.lock:
            gate = self.gates[feature]
            if gate.on == bool(new):
                return Toggle(feature, gate.on, gate.on, self.generation, requested_by, step,
                              _now(), request_id, changed=False)
            if generation is None:
                generation = self.generation + 1
            elif isinstance(generation, bool) or not isinstance(generation, int) \
                    or generation <= self.generation:
                raise SwitchError(f"switch {feature}: generation {quoted(generation)} is not an integer "
                                  f"above this process's generation {self.generation}")
            toggle = Toggle(feature, gate.on, bool(new), generation, requested_by, step, _now(),
                            request_id)
            full = len(self.history) == self.history.maxlen
            self._undo = (toggle, self.generation, self._last.get(feature))
            gate.on = toggle.new
            self.generation = toggle.generation
            self.history.append(toggle)
            self.dropped += full
            self._last[feature] = toggle
            return toggle

    def rollback(self, toggle: Toggle) -> None:
        """Undo ``toggle`` (the last applied one): gate back to ``old``, generation and history as
        before it. Used when another rank failed to apply the same switch. A toggle that changed
        nothing (``changed=False``) or is not the last applied one is left alone."""
        with self.lock:
            if not toggle.changed or self._undo is None or self._undo[0] is not toggle:
                return
            _, generation, last = self._undo
            self._undo = None
            if self.history and self.history[-1] is toggle:
                self.history.pop()
            self.gates[toggle.feature].on = toggle.old
            self.generation = generation
            if last is None:
                self._last.pop(toggle.feature, None)
            else:
                self._last[toggle.feature] = last


def check_requested_by(requested_by: Any) -> str:
    """``requested_by`` of a switch: text of at most ``REQUESTED_BY_LIMIT`` characters without a
    control or format character (``text.UNSAFE_CATEGORIES``: ESC, newline, NUL, bidi overrides...;
    who asked, kept in every rank's history and event). Returns it; raises SwitchError naming the
    field, its type, length or first such character, and what is accepted."""
    if not isinstance(requested_by, str):
        raise SwitchError(f"requested_by must be text, got {type(requested_by).__name__} (who asked: "
                          f"a name, a host; at most {REQUESTED_BY_LIMIT} characters)")
    if len(requested_by) > REQUESTED_BY_LIMIT:
        raise SwitchError(f"requested_by is {len(requested_by)} characters long; at most "
                          f"{REQUESTED_BY_LIMIT} are accepted (who asked: a name, a host)")
    if not requested_by.isprintable():
        bad = next((c for c in requested_by if unicodedata.category(c) in UNSAFE_CATEGORIES), None)
        if bad is not None:
            raise SwitchError(f"requested_by holds the control character {safe_text(bad)} at "
                              f"position {requested_by.index(bad)}: printable text only (who asked: "
                              f"a name, a host)")
    return requested_by


#: the words a switch value may be (any case, surrounded by whitespace), besides True/False/1/0
SWITCH_WORDS = "one of " + ", ".join(f"{t}/{f}" for t, f in zip(TRUE_WORDS, FALSE_WORDS)) + " (any case)"


def parse_value(name: str, raw: Any) -> bool:
    """The new value of a switch: a bool, the ints 1/0, or a flag word (``SWITCH_WORDS``:
    true/false, 1/0, on/off, yes/no, any case). An empty text is refused (a switch says what it
    wants). The one value rule of every switch path (``Runtime.switch``, ``dsv41-flags set``, the
    HTTP route). Raises SwitchError naming the feature, the value and exactly these words."""
    try:
        if isinstance(raw, str) and not raw.strip():
            raise CastError(SWITCH_WORDS)
        return cast_bool(raw)
    except CastError:
        raise SwitchError(f"switch {name}={_shown(raw)}: the value is not {SWITCH_WORDS}") from None


def feature_name(name: Any) -> str:
    """The one spelling rule of every switch path: a feature given as ``folded_fence``,
    ``FOLDED_FENCE`` (its flag key) or ``DSV41_FOLDED_FENCE`` (its variable), any case, surrounded
    by whitespace, is ``folded_fence``. Raises SwitchError when ``name`` is not text."""
    if not isinstance(name, str):
        raise SwitchError(f"a feature name must be text (like folded_fence), got "
                          f"{type(name).__name__} {_shown(name)}")
    name = name.strip()
    if name.upper().startswith("DSV41_"):
        name = name[len("DSV41_"):]
    return name.lower()


def check_declared(features: dict, name: Any, value: Any):
    """The declaration half of a switch check (no runtime state needed, so the HTTP server process
    can refuse early): ``features`` name -> Feature; ``name`` in any spelling ``feature_name``
    accepts; ``value`` as ``parse_value`` accepts. Returns ``(feature, new bool)``. Raises
    SwitchError (unknown feature, bad value) or NotLiveError (declared without ``live=True``)."""
    feature = features.get(feature_name(name))
    if feature is None:
        live = [f.name for f in features.values() if f.live]
        raise SwitchError(f"no feature named {_shown(name)}; known: {', '.join(features) or 'none'}"
                          f" (live-safe: {', '.join(live) or 'none'})")
    new = parse_value(feature.name, value)
    if not feature.live:
        raise NotLiveError(
            f"feature {quoted(feature.name)} is not live-safe (declared without live=True: it acts at boot "
            f"or cannot change between two calls), so it cannot be switched while serving; set "
            f"{feature.flag} = {str(new).lower()} in settings.toml or {feature.env_var}="
            f"{int(new)} and relaunch")
    return feature, new


def parse_assignment(text: str) -> tuple[str, str]:
    """``"folded_fence=on"`` -> ``("folded_fence", "on")``; the name in any spelling
    ``feature_name`` accepts (``FOLDED_FENCE=1``, ``DSV41_FOLDED_FENCE=0``). Raises SwitchError
    when there is no ``=``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise SwitchError(f"{quoted(text)} is not NAME=VALUE (for example folded_fence=on)")
    return feature_name(name), value.strip()


def _shown(value: Any, limit: int = 80) -> str:
    """``value`` quoted bounded (``text.quoted``: an error never echoes a huge input whole)."""
    return quoted(value, limit)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
