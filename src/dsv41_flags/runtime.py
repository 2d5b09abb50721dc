"""The per-process runtime: the one mutable object of the framework.

``activate()`` resolves (or reads the launch's snapshot), configures structlog, discovers the
features, arms the ones whose flag is on (a post-import hook per target) and emits
``flags.resolved``. The hooks run the drift check, then ``install(module, ctx)``, and emit
``feature.installed`` / ``feature.drifted`` / ``feature.failed``.
"""

import inspect
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.discovery import discover, install_order, with_engine_default
from dsv41_flags.drift import fixed_upstream, missing_on, version_problem
from dsv41_flags.errors import (ActivationError, DriftError, FlagsError, Problem, SettingsError,
                                SnapshotError, StateError)
from dsv41_flags.fingerprint import Fingerprint, compute, own_argv
from dsv41_flags.secrecy import MASK, is_secret, secret_names
from dsv41_flags.hooks import ImportWait, register_post_import_hook, watch_import
from dsv41_flags.live import (BUILTIN, SwitchError, Switchboard, Toggle, check_declared,
                              check_requested_by)
from dsv41_flags.logs import HEALTH as LOG_HEALTH, ProcessContext, configure, get_logger
from dsv41_flags.names import DECLARED_DEFAULT, ENV_PREFIX, LAUNCH_VAR, SNAPSHOT_VAR
from dsv41_flags.patch import InstallContext, Ledger
from dsv41_flags.resolution import Resolution
from dsv41_flags.snapshot import Launch, encode, read as read_snapshot
from dsv41_flags.state import (TRANSITIONS, State, after_install, after_switch, after_uninstall,
                              at_boot, may_move)
from dsv41_flags.status import FeatureStatus
from dsv41_flags.text import quoted, exception_text

# Every framework module a process uses is imported above, at import time: nothing of the
# framework is imported once a process runs (a fork while another thread imports a module would
# leave the child a module lock nobody releases). The settings loader (Dynaconf) is the one
# exception, imported by ``resolve_launch`` while a launch is resolved, before any feature is armed:
# a child activating from the launch's snapshot never loads it.

STRICT_HINT = "strict mode: set strict = false in settings.toml or DSV41_STRICT=0 to go on"


def default_features_dir(reserved: Mapping[str, Any], files: Sequence[Path]) -> Path:
    """The local features directory: ``FEATURES_DIR`` when set, else ``features/`` beside the
    first settings file when it exists, else the features shipped in the package
    (``dsv41_flags/_data/features``). Its features ADD to the shipped ones and the installed
    entry points (``discovery.discover``)."""
    if reserved.get("FEATURES_DIR"):
        return Path(reserved["FEATURES_DIR"])
    for f in files:
        if (f.parent / "features").is_dir():
            return f.parent / "features"
    import dsv41_flags.settings as settings  # see the note on imports at the top

    return settings.PROJECT_SETTINGS.parent / "features"


class Runtime:
    """Per-process runtime. Build it with ``activate()``; tests may build one directly.

    features: name -> Feature; resolution: Resolution; fingerprint: Fingerprint;
    from_snapshot: True when values came from the launch's snapshot.
    """

    def __init__(self, features: Sequence[Feature], launch: Launch, *, from_snapshot: bool = False,
                 context: ProcessContext | None = None):
        self.features = {f.name: f for f in install_order(with_engine_default(features))}
        self.launch = launch
        self.from_snapshot = from_snapshot
        self.context = context or ProcessContext()
        #: the patch ledger of this process
        self.ledger = Ledger()
        #: the live features' gates, generation and switch history
        self.live = Switchboard()
        #: serialises installs: a pending install settled by two threads (its helper thread, a
        #: fork, an audit) runs once
        self._installing = threading.RLock()
        self._states: dict[str, FeatureStatus] = {}  # changed by ``_move`` only
        self._hooked: set[str] = set()
        self._disarmed: set[str] = set()  # features whose pending hook must not install any more
        #: feature name -> the wait of a hook registered while its target's import was in progress
        self._import_waits: dict[str, ImportWait] = {}
        self._reach: dict[tuple[str, str], tuple[tuple[str, ...], str] | None] = {}
        self.pid = os.getpid()
        self.guard_registered = False
        self.announced = False
        self.snapshot_notes: list[str] = []
        self.snapshot_refused = ""  # why the launch's snapshot was refused (non-strict fallback)
        #: called with (FlagsError, feature name) when a strict failure happens at a target's
        #: import after activation, or a hook of an abandoned activation fires (``activate`` sets
        #: ``activation.import_failed``: flags.error, exit status 3); None (a runtime built
        #: directly, the test kit): the error is raised from the import statement
        self.on_import_failure: Callable[[BaseException, str], None] | None = None
        self.abandoned = ""  # why this runtime's activation was abandoned (forked mid-activation)
        #: called with each new FeatureStatus once it is recorded (``_move``: an install, a failure,
        #: a switch, a rollback, an audit's finding, an uninstall,
        #: at any time after arming): an engine adapter's gauges follow late installs. A listener
        #: that raises is reported (``flags.listener_failed``) and never stops the change.
        self.state_listeners: list[Callable[[FeatureStatus], None]] = []
        self._arming: int | None = None  # the thread arming (a hook firing there raises to arm)

    # ------------------------------------------------------------------ the launch
    @property
    def resolution(self) -> Resolution:
        """The launch's resolution."""
        return self.launch.resolution

    @property
    def fingerprint(self) -> "Fingerprint":
        """The launch fingerprint."""
        return self.launch.fingerprint

    @property
    def features_dir(self) -> Path | None:
        """Directory the launch's feature files were read from."""
        return Path(self.launch.features_dir) if self.launch.features_dir else None

    @property
    def launch_pid(self) -> int | None:
        """Pid of the process that resolved this launch."""
        return self.launch.pid

    @property
    def launch_env(self) -> Mapping[str, str]:
        """``DSV41_*`` variables of the launching process."""
        return self.launch.env

    @property
    def entry_points(self) -> set[tuple[str, str]]:
        """Entry points of group ``dsv41_flags.features`` the launch loaded."""
        return set(self.launch.entry_points)

    # ------------------------------------------------------------------ events
    @property
    def log(self):
        """The framework logger of the report events: this runtime's ``context`` is added to
        every event by a processor (pid, process, role, ranks as they are when the event is
        emitted); it never raises and no level filter silences it (see ``logs.get_logger``);
        features log through ``ctx.log``, which ``log_level`` filters."""
        return get_logger(self.context)

    # ------------------------------------------------------------------ flags
    @property
    def strict(self) -> bool:
        """Strict mode of this launch (the STRICT setting, default True)."""
        return self.resolution.strict

    def value(self, feature: Feature) -> bool:
        """The flag of ``feature`` now: a live feature's gate once armed, else the resolved value
        (False for a feature unknown to the snapshot)."""
        gate = self.live.gates.get(feature.name)
        if gate is not None:
            return gate.on
        resolved = self.resolution.values.get(feature.flag)
        return bool(resolved.value) if resolved else False

    def source(self, feature: Feature) -> str:
        """Where the flag's value came from (``default`` / ``<file> [<section>]`` / ``env DSV41_X``;
        after a live switch ``live switch generation N by WHO (boot: ...)``)."""
        resolved = self.resolution.values.get(feature.flag)
        boot = resolved.source if resolved else "not in snapshot"
        last = self.live.last(feature.name)
        if last is not None:
            return f"live switch generation {last.generation} by {last.requested_by} (boot: {boot})"
        return boot

    def options(self, feature: Feature) -> dict[str, Any]:
        """Option name -> resolved value."""
        return {o.name: (self.resolution.values[feature.option_key(o)].value
                         if feature.option_key(o) in self.resolution.values else o.default)
                for o in feature.options}

    def option_report(self, feature: Feature) -> dict[str, dict[str, Any]]:
        """Option name -> ``{"value", "source"}`` (source as for flags; ``default`` for an option
        the snapshot does not know), as reported (events, ``status``): the value of an option
        whose key marks a secret (``secrecy.is_secret``) is ``secrecy.MASK``."""
        secrets = secret_names(self.resolution)
        out = {}
        for o in feature.options:
            r = self.resolution.values.get(feature.option_key(o))
            out[o.name] = ({"value": r.value, "source": r.source} if r is not None
                           else {"value": o.default, "source": DECLARED_DEFAULT})
            if is_secret(feature.option_key(o), secrets):
                out[o.name]["value"] = MASK
        return out

    def armed(self) -> list[Feature]:
        """Features whose flag is on, in install order."""
        return [f for f in self.features.values() if self.value(f)]

    # ------------------------------------------------------------------ install
    def _move(self, feature: Feature, state: State, **kw) -> FeatureStatus:
        """The one way a feature's state changes: record ``state`` (with the flag's value and
        source now and ``kw``: detail, duration_ms, patches) when ``state.TRANSITIONS`` allows the
        move from the recorded one (``state.may_move``), then tell every ``state_listeners``
        callback. Raises StateError (nothing recorded) for a move the rule does not allow."""
        old = self._states.get(feature.name)
        if not may_move(old.state if old else None, state):
            allowed = ", ".join(sorted(TRANSITIONS[old.state])) or "none"
            raise StateError(f"feature {feature.name!r} cannot move from {old.state} to "
                             f"{State(state)} (state.TRANSITIONS allows: {allowed})")
        st = self._states[feature.name] = self._record(feature, state, **kw)
        for listener in self.state_listeners:
            try:
                listener(st)
            except Exception as exc:  # noqa: BLE001 - an observer never changes the outcome
                self.log.warning("flags.listener_failed", feature=feature.name,
                                 error=f"{exception_text(exc)}")
        return st

    def _record(self, feature: Feature, state: State, **kw) -> FeatureStatus:
        """The record of ``feature`` in ``state`` now (its flag's value and source), nothing kept."""
        return FeatureStatus(name=feature.name, state=state, value=self.value(feature),
                             source=self.source(feature), target=feature.target, live=feature.live,
                             **kw)

    def gate(self, feature: Feature) -> tuple[State, str]:
        """The state of ``feature`` before any target is imported, ``(state, detail)``, by
        ``state.at_boot``: ``off``, ``fixed-upstream`` (detail says why) or ``armed``. ``arm``
        acts on it, ``preview`` reports it."""
        on = self.value(feature)
        reason = fixed_upstream(feature) if on and feature.fixed_in else ""
        return at_boot(on, reason), reason

    def preview(self, missing: Mapping[str, Sequence[str]]) -> list[FeatureStatus]:
        """The state each feature would reach at boot before its target is imported (what
        ``dsv41-flags status`` shows), without arming anything: ``gate``'s state, and ``drifted``
        for an armed feature whose ``missing[name]`` (drift found without importing: the static
        check and the engine version) is not empty. Install order; nothing is recorded."""
        out = []
        for feature in self.features.values():
            state, detail = self.gate(feature)
            if state == State.ARMED and missing.get(feature.name):
                state, detail = State.DRIFTED, "; ".join(missing[feature.name])
            out.append(self._record(feature, state, detail=detail))
        return out

    def arm(self) -> None:
        """Register a post-import hook on the target of every armed feature (fires at once if the
        target is already imported). A feature whose engine is in its ``fixed_in`` range is
        skipped (state ``fixed-upstream``). A live feature whose flag is off gets its hook too and
        is installed bypassed (state ``off`` until its target is imported, then ``bypassed``).
        Raises DriftError in strict mode when an install that fires at once drifts or fails. A
        feature is ``armed`` only once its hook is registered; a target that another thread is
        still importing is ``pending`` until that import completes (then it installs: see
        ``hooks``)."""
        self._arming = threading.get_ident()
        try:
            self._arm()
        finally:
            self._arming = None

    def _arm(self) -> None:
        for feature in self.features.values():
            on = self.value(feature)
            state, reason = self.gate(feature)
            if state == State.OFF and feature.live:
                reason = fixed_upstream(feature)  # a live feature off at boot is hooked, unless
                if reason:                        # upstream carries the fix
                    self._move(feature, State.OFF, detail=reason)
                    continue
            elif state == State.OFF:
                self._move(feature, State.OFF)
                continue
            if state == State.FIXED_UPSTREAM:
                self._move(feature, State.FIXED_UPSTREAM, detail=reason)
                self.log.info("feature.fixed_upstream", feature=feature.name, target=feature.target,
                              reason=reason)
                continue
            self._disarmed.discard(feature.name)
            if feature.name in self._hooked:
                continue
            self._hooked.add(feature.name)
            # set before registering (a hook may fire at once); undone if no hook was registered
            self._move(feature, State.ARMED if on else State.OFF,
                      detail="" if on else "live: installed bypassed when its target is imported")
            try:
                wait = register_post_import_hook(lambda module, f=feature: self._on_import(f, module),
                                                 feature.target)
            except BaseException:
                st = self._states.get(feature.name)
                if st is not None and st.state in (State.ARMED, State.OFF):  # no hook: not armed
                    self._hooked.discard(feature.name)
                    self._move(feature, State.NOT_ARMED if on else State.OFF,
                               detail="its hook could not be registered")
                raise
            if wait is not None:
                self._import_waits[feature.name] = wait
            if wait is not None and self._states[feature.name].state == State.ARMED:
                detail = (f"its target {feature.target} is still being imported (by another "
                          f"thread, or further up this thread's stack): installs when that import "
                          f"completes")
                self._move(feature, State.PENDING, detail=detail)
                self.log.info("feature.pending", feature=feature.name, target=feature.target,
                              reason=detail)

    def _on_import(self, feature: Feature, module) -> FeatureStatus | None:
        """The post-import hook of ``feature``: install it unless it was disarmed (``uninstall``)
        or is already installed in this process (a forked child inherits the parent's patches and
        its hooks: the child's runtime is this same object, adopted at fork)."""
        st = self._states.get(feature.name)
        if self.abandoned and feature.name not in self._disarmed:
            self._disarmed.add(feature.name)
            exc = ActivationError(f"{self.abandoned}; feature {feature.name!r} is NOT installed on "
                                  f"{feature.target}")
            if self.on_import_failure is None:
                raise exc
            self.on_import_failure(exc, feature.name)
            return st
        try:
            with self._installing:  # once, whichever thread settles it first
                st = self._states.get(feature.name)
                if feature.name in self._disarmed or not self._waits(feature, st):
                    return st
                self.announce()
                return self.install(feature, module)
        except DriftError as exc:  # strict: drifted or failed
            if self._arming == threading.get_ident() or self.on_import_failure is None:
                raise  # to arm() -> activate(), which applies the policy; a runtime built directly
            self.on_import_failure(exc, feature.name)
            return self._states.get(feature.name)

    @staticmethod
    def _waits(feature: Feature, st: FeatureStatus | None) -> bool:
        """Whether the hook of ``feature`` in state ``st`` installs when its target is imported
        (armed, pending; a live feature off at boot installs bypassed)."""
        return st is not None and (st.state.hooked or (feature.live and st.state == State.OFF))

    def settle(self, timeout: float = 0.0) -> None:
        """Install every ``pending`` feature whose target's import (in progress when it was
        armed) has completed, here and now, instead of leaving it to the probe thread that
        watches it (``hooks.ImportWait``): before a fork (the child inherits the patch, never a
        wait in a thread it does not have) and at an audit. ``timeout``: how long in all to wait
        for such imports to complete (seconds; 0: look only). A strict failure follows
        ``on_import_failure`` as at any import."""
        deadline = time.monotonic() + timeout
        for feature in list(self.features.values()):
            st = self._states.get(feature.name)
            wait = self._import_waits.get(feature.name)
            if st is None or st.state != State.PENDING or wait is None:
                continue
            if wait.completed.wait(max(0.0, deadline - time.monotonic())) \
                    and wait.module is not None:
                self._on_import(feature, wait.module)

    def _importing(self, name: str) -> bool:
        """Whether the import of feature ``name``'s target that was in progress when it was armed
        is still in progress."""
        wait = self._import_waits.get(name)
        return wait is not None and not wait.completed.is_set()

    def abandon(self, reason: str) -> None:
        """In a child forked while another thread was activating this runtime: every hook it
        inherited installs nothing more; each reports ``flags.error`` (``reason``) when its target
        is imported (strict mode: the process stops with exit status 3)."""
        self.abandoned = reason
        self.pid = os.getpid()
        self.announced = True  # its flags.resolved would claim a launch this process does not run
        self.context.fields.clear()  # the same object: the configured log chain holds it too
        self.context.update(role="child")

    def adopt_in_child(self) -> None:
        """Called in a forked child: this runtime becomes the child's (its pid; role ``child``, the
        parent's ranks dropped; ``flags.resolved`` emitted again on first use). The child inherits
        the parent's patches and hooks, so states and ledger stay true as they are."""
        self.pid = os.getpid()
        self._installing = threading.RLock()  # another thread of the parent may have held it
        self.announced = False
        self.context.fields.clear()  # the same object: the configured log chain holds it too
        self.context.update(role="child")
        for name, wait in list(self._import_waits.items()):  # their probe threads stayed behind
            if not wait.completed.is_set():
                feature = self.features[name]
                self._import_waits[name] = watch_import(
                    lambda module, f=feature: self._on_import(f, module), feature.target)

    def announce(self) -> None:
        """Emit ``flags.resolved`` (and ``snapshot.mismatch`` notes) once for this process."""
        if self.announced:
            return
        self.announced = True
        self.log.info("flags.resolved", **self.report())
        if self.snapshot_refused:
            self.log.warning("snapshot.refused", reason=self.snapshot_refused,
                             outcome="settings resolved in this process (strict = false)")
        for note in self.snapshot_notes:
            self.log.warning("snapshot.mismatch", note=note)

    def install(self, feature: Feature, module) -> FeatureStatus:
        """Drift-check and install ``feature`` on the imported ``module``.

        Returns the new state. In strict mode raises DriftError naming the feature, the target and
        what is missing (drift) or what raised (failure); otherwise the failure is logged with its
        traceback and other features go on. A live feature that is off never stops the process
        (nothing was asked of it): its drift or failure is reported and it cannot be switched on.
        """
        start = time.perf_counter()
        strict = self.strict and self.value(feature)
        try:  # a declaration the checks cannot read (never validated here) fails, reported
            missing = missing_on(feature, module)
            bad_version = version_problem(feature)
        except Exception as exc:
            return self._failed(feature, exc, strict, "its drift check")
        if bad_version:
            missing.insert(0, bad_version)
        if missing:
            st = self._move(feature, State.DRIFTED, detail="; ".join(missing))
            self.log.error("feature.drifted", feature=feature.name, target=feature.target,
                           missing=missing, strict=strict)
            if strict:
                raise DriftError(f"feature {feature.name!r}: target {feature.target} drifted: missing "
                                 f"{', '.join(missing)} ({STRICT_HINT})")
            return st
        ctx = InstallContext(feature, self.options(feature), self.fingerprint,
                             get_logger(self.context, report=False, feature=feature.name), self.ledger,
                             self.live.gate(feature.name, self.value(feature)) if feature.live else None,
                             report=self.log.bind(feature=feature.name))
        try:
            feature.install(module, ctx)
        except Exception as exc:
            self.ledger.uninstall(feature.name)  # roll back what the failed install patched
            return self._failed(feature, exc, strict, "install")
        records = self.ledger.records(feature.name)
        for record in records:
            self._reach[(feature.name, record.where)] = (_path_in(module, record.owner), record.attr)
        duration_ms = round((time.perf_counter() - start) * 1000, 3)
        st = self._move(feature, after_install(self.value(feature)),
                       duration_ms=duration_ms, patches=tuple(r.where for r in records))
        self.log.info("feature.installed", feature=feature.name, target=feature.target,
                      duration_ms=duration_ms, patches=list(st.patches),
                      **({"live": True, "bypassed": st.state == State.BYPASSED} if feature.live else {}))
        for record in records:
            stack = self.ledger.stack(record.owner, record.attr)
            if len(stack) > 1:
                self.log.warning("feature.conflict", feature=feature.name, attribute=record.where,
                                 order=[r.feature for r in stack])
        return st

    def _failed(self, feature: Feature, exc: Exception, strict: bool, what: str) -> FeatureStatus:
        """Record and report (``feature.failed``, with the traceback) that ``what`` raised
        ``exc`` while installing ``feature``; in strict mode raise DriftError naming it."""
        st = self._move(feature, State.FAILED, detail=f"{exception_text(exc)}")
        self.log.error("feature.failed", feature=feature.name, target=feature.target,
                       error=f"{exception_text(exc)}", traceback=traceback.format_exc(),
                       strict=strict)
        if strict:
            raise DriftError(f"feature {feature.name!r}: {what} on {feature.target} raised "
                             f"{exception_text(exc)} ({STRICT_HINT})") from exc
        return st

    def uninstall(self, name: str | None = None) -> None:
        """Restore the originals patched by feature ``name`` (every feature when None), last
        installed first. A feature becomes ``uninstalled`` (its hook will not fire again), also when
        its target was never imported (armed/pending: disarmed, so a later import does not patch,
        like OpenTelemetry's ``uninstrument()``); one whose patch has another feature's patch on
        top stays ``installed`` and ``feature.uninstall_blocked`` names the features above it.
        With ``name=None`` the framework's own patches (the engine's live-switch RPC) are restored
        too."""
        if name is None:
            self.ledger.uninstall(BUILTIN)
        for feature in reversed(list(self.features.values())):
            if name is None or feature.name == name:
                self._disarmed.add(feature.name)  # a hook whose target was never imported too
                kept = self.ledger.uninstall(feature.name)
                st = self._states.get(feature.name)
                if st is not None and st.state.hooked and not kept:
                    self._move(feature, State.UNINSTALLED,
                              detail="disarmed before its target was imported")
                    continue
                if kept:
                    self.log.warning("feature.uninstall_blocked", feature=feature.name,
                                     attributes=[r.where for r in kept],
                                     above=sorted({name for r in kept for name in self.ledger.above(r)}))
                elif st is not None and after_uninstall(st.state) is not None:
                    self._move(feature, after_uninstall(st.state))

    # ------------------------------------------------------------------ live switches
    def check_switch(self, name: str, value: Any, requested_by: str = "") -> tuple[Feature, bool]:
        """Phase 1 of a switch: would ``switch(name, value)`` apply in this process? ``name`` in
        any spelling ``live.feature_name`` accepts. Returns ``(feature, new value)``; changes
        nothing. Raises SwitchError (unknown feature, bad value, ``requested_by`` not short text,
        patch not in place here: drifted / failed / fixed-upstream / uninstalled / lost) or
        NotLiveError (declared without ``live=True``), each naming the feature and what to do."""
        check_requested_by(requested_by)
        feature, new = check_declared(self.features, name, value)
        name = feature.name
        st = self._states.get(name)
        state = st.state if st is not None else "not armed"
        if name not in self._hooked or st is None or not st.state.switchable:  # hooked: in place or will be
            why = f" ({st.detail})" if st is not None and st.detail else ""
            raise SwitchError(
                f"feature {name!r} is {state} in this process{why}: its patch is not in place here, "
                f"so a switch would change nothing; fix the cause (dsv41-flags check) and relaunch")
        return feature, new

    def switch(self, name: str, value: Any, *, requested_by: str, generation: int | None = None,
               step: int | None = None, request_id: str = "") -> "Toggle":
        """Switch live feature ``name`` on or off in this process, from the next call on.

        name: the feature in any spelling ``live.feature_name`` accepts (``folded_fence``,
        ``FOLDED_FENCE``, ``DSV41_FOLDED_FENCE``); value: bool or a flag word (``live.SWITCH_WORDS``);
        requested_by: who asked, text of at most ``live.REQUESTED_BY_LIMIT`` characters (recorded
        and logged); generation: the generation to record (lockstep ranks pass the one they agreed
        on, above the current one; default: this process's next); step: the engine step it takes
        effect at. Switches are serialised (``Switchboard.lock``): concurrent callers get
        generations 1..N once each, in order. Emits ``feature.toggled`` (feature, old, new,
        generation, requested_by, step and the process fields pid, role, ranks) and returns the
        Toggle. A switch to the value the feature already has is a no-op: no generation, no
        history entry; it returns a Toggle with ``changed=False`` and emits
        ``feature.toggle_unchanged``. The resolved settings are not changed: the switch is an
        override until the next launch.
        Raises SwitchError / NotLiveError (see ``check_switch``); nothing is changed then.
        """
        with self.live.lock:
            feature, new = self.check_switch(name, value, requested_by)
            name = feature.name
            self.live.gate(name, self.value(feature))  # created at install, or here when switched before
            toggle = self.live.apply(name, new, requested_by=requested_by, generation=generation,
                                     step=step, request_id=request_id)
            if not toggle.changed:
                self.log.info("feature.toggle_unchanged", feature=name, value=toggle.new,
                              generation=toggle.generation, requested_by=requested_by, step=step,
                              request_id=request_id or None)
                return toggle
            self._restate(feature)
            self.log.info("feature.toggled", feature=name, old=toggle.old, new=toggle.new,
                          generation=toggle.generation, requested_by=requested_by, step=step,
                          request_id=request_id or None)
            return toggle

    def rollback(self, toggle: "Toggle", reason: str) -> None:
        """Undo ``toggle`` (the last switch applied here) because another rank could not apply
        it; emits ``feature.toggle_rolled_back``. A toggle that changed nothing is left alone."""
        if not toggle.changed:
            return
        with self.live.lock:
            self.live.rollback(toggle)
            self._restate(self.features[toggle.feature])
            self.log.warning("feature.toggle_rolled_back", feature=toggle.feature, value=toggle.old,
                             generation=self.live.generation, reason=reason)

    def _restate(self, feature: Feature) -> None:
        """Record the state a switch (or its rollback) leaves ``feature`` in (``after_switch``)."""
        st = self._states.get(feature.name)
        if st is None:
            return
        state = after_switch(st.state, self.value(feature))
        detail = "" if state != State.OFF else "live: installed bypassed when its target is imported"
        self._move(feature, state, duration_ms=st.duration_ms, patches=st.patches,
                   detail=detail if state in (State.OFF, State.ARMED, State.PENDING) else st.detail)

    # ------------------------------------------------------------------ report
    def states(self) -> list[FeatureStatus]:
        """Per feature (install order): name, state, flag value, source, target. A feature that
        arming never reached is ``off`` (flag off) or ``not-armed`` (flag on, no hook registered):
        ``armed`` always means a hook is registered."""
        out = []
        for f in self.features.values():
            st = self._states.get(f.name)
            if st is None:
                st = (self._record(f, State.NOT_ARMED, detail="activation did not register its hook")
                      if self.value(f) else self._record(f, State.OFF))
            out.append(st)
        return out

    def recorded_states(self) -> list[dict]:
        """Per feature (install order) what is true now, for ``flags.error``: ``{"name", "state",
        "detail"}`` picked from ``states()``."""
        return [s.model_dump(mode="json", include={"name", "state", "detail"}) for s in self.states()]

    def audit(self) -> list[FeatureStatus]:
        """Re-check every feature: an armed feature whose target was never imported becomes
        ``pending`` (also while another thread is still importing it); an armed one whose target
        IS imported but was never installed (its hook did not fire) becomes ``missed`` (an error);
        an installed one whose patched attribute no longer holds our replacement becomes
        ``lost``. A pending feature whose target's import has completed is installed first
        (``settle``). Emits ``feature.pending`` / ``feature.missed`` / ``feature.lost``; returns
        ``states()``."""
        self.settle()
        for feature in self.features.values():
            st = self._states.get(feature.name)
            if st is None:
                continue
            module = sys.modules.get(feature.target)
            if st.state.hooked and (module is None or self._importing(feature.name)):
                detail = "" if module is None else "its target is still being imported"
                self._move(feature, State.PENDING, detail=detail)
                self.log.warning("feature.pending", feature=feature.name, target=feature.target,
                                 **({"reason": detail} if detail else {}))
            elif st.state.hooked and feature.name not in self._disarmed:
                detail = ("its target is imported but the install never ran: the patch is NOT on"
                          + (f" ({self.abandoned})" if self.abandoned else ""))
                self._move(feature, State.MISSED, detail=detail)
                self.log.error("feature.missed", feature=feature.name, target=feature.target,
                               reason=detail)
            elif st.state.patched:
                lost = self._lost(feature)
                if lost:
                    self._move(feature, State.LOST, detail=", ".join(lost))
                    self.log.error("feature.lost", feature=feature.name, target=feature.target,
                                   attributes=lost)
        return self.states()

    def _lost(self, feature: Feature) -> list[str]:
        """``Owner.attr`` of every patch of ``feature`` that the engine would not call now: the
        attribute is reached from the target module as it stands (module -> owner by the name it
        had at install -> attribute), so a replaced class, a reloaded module or an overwritten
        attribute all count. An attribute with another feature's patch above ours must hold that
        one (which wraps ours)."""
        module = sys.modules.get(feature.target)
        out = []
        for record in self.ledger.records(feature.name):
            top = self.ledger.stack(record.owner, record.attr)[-1]
            reach = self._reach.get((feature.name, record.where))
            if module is None:
                out.append(record.where)
                continue
            if reach is None or reach[0] is None:  # owner not reachable from the module: as recorded
                now = _static(record.owner, record.attr)
            else:
                now = _walk(module, reach[0] + (record.attr,))
            if now is not top.replacement:
                out.append(record.where)
        return out

    def report(self) -> dict:
        """The ``flags.resolved`` payload."""
        return {
            "profile": self.resolution.profile,
            "settings_files": list(self.resolution.files),
            "from_snapshot": self.from_snapshot,
            "features": {st.name: st.replace(options=self.option_report(self.features[st.name]))
                         .model_dump(mode="json", include={"value", "source", "options"})
                         for st in self.states()},
            "armed": [f.name for f in self.armed()],
            "fingerprint": self.fingerprint.digest,
            "notes": list(self.resolution.notes),
            "warnings": [p.message for p in self.resolution.warnings],
            **({"log_errors": LOG_HEALTH.as_dict()} if LOG_HEALTH.failures else {}),
        }

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> str:
        """The ``DSV41_SNAPSHOT`` value handing this launch to children (``snapshot.encode``)."""
        return encode(self.launch)

    def launch_marker(self) -> str:
        """The ``DSV41_LAUNCH`` value set beside ``DSV41_SNAPSHOT``: ``<launch pid>:<fingerprint
        digest>``. A process that has it but no snapshot is a child of this launch that did not
        receive the snapshot (``build`` refuses to pass for the launch silently)."""
        return f"{self.launch_pid}:{self.fingerprint.digest}"

    def export(self, environ: "dict[str, str] | os._Environ[str]") -> None:
        """Hand this launch to child processes: ``DSV41_SNAPSHOT`` and ``DSV41_LAUNCH`` in
        ``environ``. Raises OSError when a large snapshot cannot be spilled to its file."""
        environ[SNAPSHOT_VAR] = self.snapshot()
        environ[LAUNCH_VAR] = self.launch_marker()


def _static(owner, attr: str):
    try:
        return inspect.getattr_static(owner, attr)
    except AttributeError:
        return None


def _walk(obj, path: Sequence[str]):
    """``obj.a.b.c`` as stored (no descriptor binding); None when a step is missing."""
    for part in path:
        obj = _static(obj, part)
        if obj is None:
            return None
    return obj


def _path_in(module, owner) -> tuple[str, ...] | None:
    """Names leading from ``module`` to ``owner`` (``()`` for the module itself, the qualified name
    of a class defined or imported there), or None when the module does not reach it."""
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


def build(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
          environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
          features_dir: Path | None = None, *, use_snapshot: bool = True,
          configure_logging: bool = True, context: ProcessContext | None = None) -> Runtime:
    """Resolve and build a Runtime without arming anything (used by ``activate`` and the CLI).

    With ``use_snapshot`` and a ``DSV41_SNAPSHOT`` (and no explicit files/profile), the launch is
    decoded from the snapshot (``snapshot``: schema, types, re-cast values, installed entry points,
    feature file digests) and no settings file is read. A refused snapshot, or none in a child of
    a launch (``DSV41_LAUNCH`` set without it): the settings are resolved in this process; in
    strict mode (of that resolution) SnapshotError is raised, else the runtime is built from the
    local resolution and ``snapshot_refused`` says why (``snapshot.refused`` event).
    ``configure_logging``: structlog is configured before any feature module runs, from the
    snapshot's or the settings' log format and level, with ``context`` (pid, process, role; the
    runtime's ``context``) on every line, so a process's log format holds from its first line.
    Raises SettingsError (every problem listed), DeclarationError or SnapshotError.
    """
    environ = os.environ if environ is None else environ
    settings_files = settings_file_list(settings_files)
    context = context if context is not None else ProcessContext()
    use = use_snapshot and settings_files is None and profile is None
    raw = environ.get(SNAPSHOT_VAR, "") if use else ""
    refused: SnapshotError | None = None
    if use and not raw and environ.get(LAUNCH_VAR):
        refused = SnapshotError(
            f"{SNAPSHOT_VAR} is missing, but {LAUNCH_VAR}={environ[LAUNCH_VAR][:120]!r} says this "
            f"process is a child of a launch (launching pid and fingerprint): the launch's "
            f"settings did not reach it (an environment filtered on the way?); pass "
            f"{SNAPSHOT_VAR} on, or unset {LAUNCH_VAR} to resolve this process on its own")

    def configure_from_snapshot(reserved: Mapping[str, Any], launch_pid: int | None) -> None:
        context.fields.setdefault("role", "launcher" if launch_pid == os.getpid() else "child")
        if configure_logging:
            configure(reserved["LOG_FORMAT"], reserved["LOG_LEVEL"], context=context)

    if raw:
        try:
            launch, features = read_snapshot(raw, before_feature_code=configure_from_snapshot)
        except SnapshotError as exc:
            refused = exc
        else:
            rt = Runtime(features, launch, from_snapshot=True, context=context)
            rt.snapshot_notes = snapshot_differences(launch.env, environ)
            marker = environ.get(LAUNCH_VAR)
            if marker is not None and marker != rt.launch_marker():
                rt.snapshot_notes.append(
                    f"{LAUNCH_VAR}={quoted(marker)} does not name the launch of {SNAPSHOT_VAR} "
                    f"({rt.launch_marker()[:24]}...): a variable left over from another launch, "
                    f"or set by hand; this process runs the snapshot's launch")
            return rt
    if refused is not None:  # the refused text is never read again (Dynaconf would parse it)
        environ = {k: v for k, v in environ.items() if k != SNAPSHOT_VAR}
    context.fields.setdefault("role", "launcher")
    try:
        features, resolution, fdir = resolve_launch(settings_files, profile, environ, features_dir,
                                                    configure_logging=configure_logging,
                                                    context=context)
        resolution.raise_for_errors()
    except FlagsError as exc:
        if refused is not None:
            raise SnapshotError(f"{refused}; resolving the settings in this process instead failed "
                                f"too: {exc}") from exc
        raise
    if refused is not None and resolution.strict:
        raise refused
    if argv is None:
        argv = own_argv()
    fingerprint = compute(resolution, features, argv, environ)
    rt = Runtime(features, Launch.of(resolution, fingerprint, features, fdir, _dsv41_vars(environ)),
                 context=context)
    if refused is not None:
        theirs = environ.get(LAUNCH_VAR, "").partition(":")[2]
        differs = (f"; its fingerprint {fingerprint.digest[:12]}... differs from the launch's "
                   f"{theirs[:12]}..." if theirs and theirs != fingerprint.digest else "")
        rt.snapshot_refused = (f"{refused}: strict = false, so the settings were resolved in this "
                               f"process instead (the launch's values may differ from these"
                               f"{differs})")
    return rt


def settings_file_list(value: Any) -> list[str] | None:
    """``settings_files`` as given to ``activate`` / ``build``: None (search as usual), one path
    (``str`` or ``os.PathLike``) or a list or tuple of paths; returns a list of ``str`` paths (or
    None). Raises SettingsError naming the argument, its value and what is accepted for anything
    else (a ``str`` is one path, never a sequence of one-letter paths; an ``os.PathLike`` whose
    ``__fspath__`` raises or gives no ``str`` is refused the same way)."""
    if value is None:
        return None
    items = [value] if isinstance(value, (str, os.PathLike)) else (
        list(value) if isinstance(value, (list, tuple)) else None)
    paths = []
    for item in items or ():
        try:
            path = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        except Exception:  # a hostile __fspath__
            path = None
        if not isinstance(path, str):
            items = None
            break
        paths.append(path)
    if items is None:
        try:
            shown = repr(value)
        except Exception:
            shown = f"<{type(value).__name__} whose repr raised>"
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise SettingsError([Problem("SETTINGS", "argument settings_files", (
            f"settings_files={shown} is not accepted: give one path (str or os.PathLike), a list "
            f"or tuple of paths, or None to search for settings.toml as usual"))])
    return paths


def _dsv41_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``DSV41_*`` variables a snapshot records: neither ``DSV41_SNAPSHOT``, ``DSV41_LAUNCH``
    nor a secret (``secrecy.is_secret``: ``DSV41_API_KEY`` and the like are kept nowhere)."""
    secrets = secret_names()
    return {k: v for k, v in environ.items()
            if k.startswith(ENV_PREFIX) and k not in (SNAPSHOT_VAR, LAUNCH_VAR)
            and not is_secret(k, secrets)}


def snapshot_differences(launch_env: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """Sentences for every ``DSV41_*`` variable (flags, options and reserved names alike) of this
    process that differs from the launching process's (the snapshot wins: one launch, one
    resolution; these say so instead of staying silent)."""
    here = _dsv41_vars(environ)
    out = []
    for name in sorted(set(here) | set(launch_env)):
        mine, theirs = here.get(name), launch_env.get(name)
        if mine == theirs:
            continue
        if mine is None:
            out.append(f"{name} is not set here, but the launch's snapshot was resolved with "
                       f"{name}={theirs!r}: the snapshot is used (a DSV41_SNAPSHOT left over from "
                       f"another launch? unset it)")
        else:
            out.append(f"{name}={mine!r} here, but the launch's snapshot was resolved with "
                       f"{'it unset' if theirs is None else f'{name}={theirs!r}'}: the snapshot is used")
    return out


def resolve_launch(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
                   environ: Mapping[str, str] | None = None, features_dir: Path | None = None, *,
                   configure_logging: bool = False, context: ProcessContext | None = None,
                   ) -> tuple[tuple[Feature, ...], Resolution, Path]:
    """Find and load the settings files, discover the features, resolve every key.

    Returns ``(features, resolution, features_dir)``; value problems and unknown keys are in
    ``resolution.problems`` (not raised). Raises SettingsError for a missing/unreadable settings
    file or an unknown profile, DeclarationError for bad feature declarations.
    """
    import dsv41_flags.settings as _settings  # see the note on imports at the top

    environ = os.environ if environ is None else environ
    files, _how = _settings.find_settings_files(settings_files, environ)
    settings, prof, profiles, notes = _settings.load(files, profile, environ)
    # reserved settings first: logging is configured before any feature module is imported
    reserved = _settings.reserved_settings(settings, environ)
    if configure_logging:
        configure(reserved["LOG_FORMAT"], reserved["LOG_LEVEL"], context=context)
    fdir = features_dir or default_features_dir(reserved, [Path(f) for f in files])
    if reserved.get("FEATURES_DIR") and not fdir.is_dir():
        raise SettingsError([Problem("FEATURES_DIR", "settings", f"features_dir {str(fdir)!r} is not a "
                                     f"directory (set by features_dir / DSV41_FEATURES_DIR; relative "
                                     f"paths are taken from the settings file's directory)")])
    features = discover(fdir)
    resolution = _settings.resolve(settings, prof, profiles, files, features, environ, notes, fdir)
    return features, resolution, fdir
