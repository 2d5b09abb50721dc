"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Feature states: the words, the rules that move a feature between them, and which ones stop a
boot. The one home of the state vocabulary: the runtime records states by these rules, live
switching asks ``State.switchable``, ``status`` / ``check`` / ``run`` ask ``blocks_boot``, and the
upgrade gate's cells use ``Cell``.

``State`` and ``Cell`` are ``str`` enums: a state compares equal to its word (``State.OFF ==
"off"``), and JSON and log events carry the word itself.

A feature's life in one process (``Runtime``)::

    (flag off) off ──────────────────────────────► bypassed (live: installed, switched off)
    (flag on)  armed ─► pending (target still being imported, by another thread or up this stack)
               armed / pending ─► installed | drifted | failed     (its target is imported)
               armed / pending ─► missed     (target imported, install never ran: audit)
               installed / bypassed ─► lost   (the patched attribute was replaced: audit)
               armed / pending / installed / bypassed / lost ─► uninstalled
    fixed-upstream: the installed engine carries the fix (never hooked)
    not-armed: flag on but activation never registered its hook (armed ─► not-armed when the
               registration itself raised)

Every change of a feature's state goes through ``Runtime._move``, which checks ``may_move`` and
tells the runtime's ``state_listeners``.
"""
from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """The state of one feature in one process (see the module docstring for the transitions)."""

    OFF = "off"
    ARMED = "armed"
    NOT_ARMED = "not-armed"
    PENDING = "pending"
    INSTALLED = "installed"
    BYPASSED = "bypassed"
    DRIFTED = "drifted"
    FAILED = "failed"
    FIXED_UPSTREAM = "fixed-upstream"
    MISSED = "missed"
    LOST = "lost"
    UNINSTALLED = "uninstalled"

    @property
    def hooked(self) -> bool:
        """Its post-import hook is registered and has not installed yet (armed, pending; ``off``
        for a live feature is hooked too: see ``awaits_import``)."""
        return self in (State.ARMED, State.PENDING)

    @property
    def patched(self) -> bool:
        """Its patch is in place in this process (on, or bypassed while switched off)."""
        return self in (State.INSTALLED, State.BYPASSED)

    @property
    def switchable(self) -> bool:
        """A live switch means something: the patch is in place, or will be when its target is
        imported (a live feature off at boot is hooked and installs bypassed)."""
        return self in (State.OFF, State.ARMED, State.PENDING, State.INSTALLED, State.BYPASSED)


#: every transition a feature may make in one process: state -> the states it may move to
TRANSITIONS: dict[State, frozenset[State]] = {
    State.OFF: frozenset({State.ARMED, State.PENDING, State.BYPASSED, State.DRIFTED,
                          State.FAILED, State.UNINSTALLED}),
    State.ARMED: frozenset({State.OFF, State.PENDING, State.INSTALLED, State.BYPASSED,
                            State.DRIFTED, State.FAILED, State.MISSED, State.UNINSTALLED,
                            State.NOT_ARMED}),  # its hook could not be registered
    State.PENDING: frozenset({State.OFF, State.ARMED, State.INSTALLED, State.BYPASSED,
                              State.DRIFTED, State.FAILED, State.MISSED, State.UNINSTALLED}),
    State.INSTALLED: frozenset({State.BYPASSED, State.LOST, State.UNINSTALLED}),
    State.BYPASSED: frozenset({State.INSTALLED, State.LOST, State.UNINSTALLED}),
    State.LOST: frozenset({State.UNINSTALLED}),
    State.UNINSTALLED: frozenset({State.ARMED, State.OFF}),  # armed again by a later arm()
    State.DRIFTED: frozenset(),
    State.FAILED: frozenset(),
    State.MISSED: frozenset(),
    State.FIXED_UPSTREAM: frozenset(),
    State.NOT_ARMED: frozenset({State.ARMED}),  # armed again by a later arm()
}


def may_move(old: State | None, new: State) -> bool:
    """True when a feature may go from ``old`` (None: nothing recorded yet) to ``new``: the first
    state is any, a state may be recorded again (its detail changes), else ``TRANSITIONS``."""
    return old is None or old == new or State(new) in TRANSITIONS[State(old)]


def at_boot(on: bool, fixed_upstream: str) -> State:
    """The state rule before any target is imported: ``off`` (flag off), ``fixed-upstream``
    (``fixed_upstream`` is the reason the installed engine carries the fix; "" when it does not),
    else ``armed``. (A live feature off at boot is hooked all the same, to install bypassed.)"""
    if not on:
        return State.OFF
    return State.FIXED_UPSTREAM if fixed_upstream else State.ARMED


def after_install(on: bool) -> State:
    """The state of a feature whose install succeeded: ``installed``, or ``bypassed`` for a live
    feature whose flag is off."""
    return State.INSTALLED if on else State.BYPASSED


def after_switch(state: State, on: bool) -> State:
    """The state after a live switch to ``on``: a patch in place goes installed <-> bypassed; a
    hook still waiting goes armed <-> off (pending stays pending while on); any other state stays
    as it is (a switch is refused there: ``State.switchable``)."""
    state = State(state)
    if state.patched:
        return after_install(on)
    if state in (State.OFF, State.ARMED, State.PENDING):
        if not on:
            return State.OFF
        return State.PENDING if state == State.PENDING else State.ARMED
    return state


def after_uninstall(state: State) -> State | None:
    """The state of a feature after ``uninstall`` restored its originals: ``uninstalled`` for a
    feature that was hooked or patched, None (unchanged) for any other."""
    state = State(state)
    if state.hooked or state.patched or state == State.LOST:
        return State.UNINSTALLED
    return None


def blocks_boot(state: State | str, strict: bool) -> bool:
    """True when a feature in ``state`` stops a boot: strict mode, and the flag asked for a patch
    that cannot go on (``drifted`` or ``failed``). A requirement the static check cannot decide is
    never ``drifted`` (only the live check at import can tell), so it never blocks here."""
    return strict and state in (State.DRIFTED, State.FAILED)


class Cell(StrEnum):
    """The upgrade gate's verdict for one feature on one engine release (first match wins, in
    this order)."""

    UNREADABLE = "unreadable"          # the release could not be read (why)
    NOT_APPLICABLE = "n/a"             # the feature targets another engine distribution
    FIXED_UPSTREAM = "fixed-upstream"  # the release is in the feature's fixed_in range
    DRIFTED = "drifted"                # a requirement is missing
    UNDECIDED = "undecided"            # a requirement the static check cannot decide
    OUT_OF_RANGE = "out-of-range"      # the structure is there, the version is outside ``engine``
    OK = "ok"

    @property
    def failing(self) -> bool:
        """The feature would not install on that release (never counted as ok)."""
        return self in (Cell.DRIFTED, Cell.UNDECIDED, Cell.OUT_OF_RANGE, Cell.UNREADABLE)

