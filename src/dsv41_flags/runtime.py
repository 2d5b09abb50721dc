"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The per-process runtime: the one mutable object of the framework.

``activate()`` resolves (or reads the launch's snapshot), configures structlog, discovers the
features, arms the ones whose flag is on (a post-import hook per target) and emits
``flags.resolved``. The hooks run the drift check, then ``install(module, ctx)``, and emit
``feature.installed`` / ``feature.drifted`` / ``feature.failed``.
"""

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.discovery import install_order, with_engine_default
from dsv41_flags.drift import drifted_text, fixed_upstream, missing_on, version_problem
from dsv41_flags.errors import ActivationError, DriftError, PatchConflict, RestoreError, StateError
from dsv41_flags.fingerprint import Fingerprint
from dsv41_flags.secrecy import MASK, is_secret, secret_names
from dsv41_flags.hooks import ImportWait, register_post_import_hook, watch_import, watch_reload
from dsv41_flags.live import (BUILTIN, SwitchError, Switchboard, Toggle, check_declared,
                              check_requested_by)
from dsv41_flags.logs import HEALTH as LOG_HEALTH, ProcessContext, get_logger
from dsv41_flags.names import DECLARED_DEFAULT, LAUNCH_VAR, SNAPSHOT_VAR
from dsv41_flags.patch import InstallContext, Ledger
from dsv41_flags.resolution import Resolution
from dsv41_flags.snapshot import Launch, encode
from dsv41_flags.state import (TRANSITIONS, State, after_install, after_switch, after_uninstall,
                              at_boot, may_move)
from dsv41_flags.status import FeatureStatus
from dsv41_flags.text import exception_text

# Every framework module a process uses is imported above, at import time: nothing of the
# framework is imported once a process runs (a fork while another thread imports a module would
# leave the child a module lock nobody releases). A runtime is built by ``assembly``.

STRICT_HINT = "strict mode: set strict = false in settings.toml or DSV41_STRICT=0 to go on"
#: the detail of a live feature switched off before its target is imported
LIVE_OFF_DETAIL = f"live: {State.INSTALLED} {State.BYPASSED} when its target is imported"




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
        #: serialises the patch check (``check_patches``): one ``feature.lost`` per loss
        self._checking = threading.RLock()
        #: feature name -> cancels the watch on its target's reload (``hooks.watch_reload``)
        self._reload_watches: dict[str, Callable[[], None]] = {}
        self.pid = os.getpid()
        self.guard_registered = False
        self.announced = False
        self.snapshot_notes: list[str] = []
        self.snapshot_refused = ""  # why the launch's snapshot was refused (non-strict fallback)
        #: called with (FlagsError, feature name) when a strict failure happens at a target's
        #: import after activation, or a hook of an abandoned activation fires (``activate`` sets
        #: ``error_policy.import_failed``: flags.error, exit status 3); None (a runtime built
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
                      detail="" if on else LIVE_OFF_DETAIL)
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
        self._checking = threading.RLock()
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
                raise DriftError(f"feature {feature.name!r}: "
                                 f"{drifted_text(feature.target, missing)} ({STRICT_HINT})")
            return st
        ctx = InstallContext(feature, self.options(feature), self.fingerprint,
                             get_logger(self.context, report=False, feature=feature.name), self.ledger,
                             self.live.gate(feature.name, self.value(feature)) if feature.live else None,
                             report=self.log.bind(feature=feature.name))
        try:
            feature.install(module, ctx)
        except Exception as exc:
            stuck = [r for r in self.ledger.uninstall(feature.name) if r.failure]  # roll back
            if stuck:
                self.log.error("feature.uninstall_failed", feature=feature.name,
                               target=feature.target, attributes=[r.where for r in stuck],
                               reason="; ".join(f"{r.where}: {r.failure}" for r in stuck),
                               during="the rollback of a failed install")
            if isinstance(exc, PatchConflict):
                self.log.error("feature.conflict", feature=feature.name, target=feature.target,
                               reason=str(exc), refused=True)
            return self._failed(feature, exc, strict, "install")
        records = self.ledger.records(feature.name)
        self.ledger.anchor(feature.name, module)
        if feature.name not in self._reload_watches:
            self._reload_watches[feature.name] = watch_reload(
                lambda reloaded, f=feature: self._on_reload(f), feature.target)
        duration_ms = round((time.perf_counter() - start) * 1000, 3)
        st = self._move(feature, after_install(self.value(feature)),
                       duration_ms=duration_ms, patches=tuple(r.where for r in records))
        self.log.info("feature.installed", feature=feature.name, target=feature.target,
                      duration_ms=duration_ms, patches=list(st.patches),
                      **({"live": True, "bypassed": st.state == State.BYPASSED} if feature.live else {}))
        for record in records:
            overlap = self.ledger.overlapping(record)
            if any(r.feature != feature.name for r in overlap):
                self.log.warning("feature.conflict", feature=feature.name, attribute=record.where,
                                 order=[r.feature for r in overlap],
                                 attributes=[r.where for r in overlap])
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
        too.

        Every restore is tried, each independent of the others: an attribute whose owner refuses
        it (``setattr`` / ``delattr`` raises: a locked metaclass, a read-only type) stays patched,
        its feature keeps its state with the reason as detail (``feature.uninstall_failed``, an
        error event naming the attributes), and every other feature is still restored. Raises
        RestoreError at the end, listing each attribute left patched, when any restore failed."""
        failures: list[tuple[str, str, str]] = []
        if name is None:
            failures += [(BUILTIN, r.where, r.failure) for r in self.ledger.uninstall(BUILTIN)
                         if r.failure]
        for feature in reversed(list(self.features.values())):
            if name is None or feature.name == name:
                self._disarmed.add(feature.name)  # a hook whose target was never imported too
                left = self.ledger.uninstall(feature.name)
                failed = [r for r in left if r.failure]
                kept = [r for r in left if not r.failure]
                st = self._states.get(feature.name)
                if not left and feature.name in self._reload_watches:
                    self._reload_watches.pop(feature.name)()
                if st is not None and State(st.state).hooked and not left:
                    self._move(feature, State.UNINSTALLED,
                              detail="disarmed before its target was imported")
                    continue
                if failed:
                    failures += [(feature.name, r.where, r.failure) for r in failed]
                    reason = "; ".join(f"{r.where}: {r.failure}" for r in failed)
                    self.log.error("feature.uninstall_failed", feature=feature.name,
                                   target=feature.target, attributes=[r.where for r in failed],
                                   reason=reason)
                    if st is not None:
                        self._move(feature, st.state, detail=f"still patched, the restore failed: "
                                  f"{reason}", duration_ms=st.duration_ms, patches=st.patches)
                if kept:
                    self.log.warning("feature.uninstall_blocked", feature=feature.name,
                                     attributes=[r.where for r in kept],
                                     above=sorted({name for r in kept for name in self.ledger.above(r)}))
                elif not failed and st is not None and after_uninstall(st.state) is not None:
                    self._move(feature, after_uninstall(st.state))
        if failures:
            raise RestoreError(failures)

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
        self.check_patches((feature,))  # a patch lost since it was installed is refused here
        st = self._states.get(name)
        state = st.state if st is not None else State.NOT_ARMED
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
        detail = "" if state != State.OFF else LIVE_OFF_DETAIL
        self._move(feature, state, duration_ms=st.duration_ms, patches=st.patches,
                   detail=detail if state in (State.OFF, State.ARMED, State.PENDING) else st.detail)

    # ------------------------------------------------------------------ report
    def states(self) -> list[FeatureStatus]:
        """Per feature (install order): name, state, flag value, source, target. A feature that
        arming never reached is ``off`` (flag off) or ``not-armed`` (flag on, no hook registered):
        ``armed`` always means a hook is registered. Every patched feature is checked first
        (``check_patches``): one whose patch the engine no longer calls reads ``lost``."""
        self.check_patches()
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
        return self.states()  # the patched ones: check_patches

    def check_patches(self, features: Sequence[Feature] | None = None) -> None:
        """The part of ``audit`` that runs by itself wherever a state is read or acted on
        (``states``, hence every status answer, the metrics and the serving report;
        ``check_switch``, before a switch; after ``importlib.reload`` of a target): each feature
        of ``features`` (default: every one) whose patch is in place (installed, bypassed) but
        that the engine would no longer call (``Ledger.lost``: a reloaded module, a replaced
        class, an overwritten attribute) becomes ``lost`` (``feature.lost``, an error event
        naming the attributes). Reads only: never imports, installs or runs the engine's code
        (``Ledger.lost``); a few microseconds per patch (``bench/b8_patch_check.py``); never on
        a call of a patched function, so never on a forward step."""
        with self._checking:
            for feature in self.features.values() if features is None else features:
                st = self._states.get(feature.name)
                if st is None or not State(st.state).patched:
                    continue
                lost = self.ledger.lost(feature.name, sys.modules.get(feature.target))
                if lost:
                    self._move(feature, State.LOST, detail=", ".join(lost))
                    self.log.error("feature.lost", feature=feature.name, target=feature.target,
                                   attributes=lost)

    def _on_reload(self, feature: Feature) -> None:
        """``feature``'s target was re-executed by ``importlib.reload``: check its patches now
        (``check_patches``). Never raises into the reload: a failure is reported
        (``flags.audit_failed``)."""
        try:
            self.check_patches((feature,))
        except Exception as exc:  # noqa: BLE001 - a reload of the engine's module never fails on us
            self.log.warning("flags.audit_failed", feature=feature.name, target=feature.target,
                             error=exception_text(exc))

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


