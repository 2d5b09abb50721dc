"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Activation: once per process, truly.

* ``activate()`` holds a lock: two threads get one runtime, one ``flags.resolved``, one install.
* A forked child owns its runtime: at fork (``os.register_at_fork``) the inherited runtime is
  adopted by the child (its pid, role ``child``, a fresh announcement), so the hooks it inherited
  report to the child's runtime and a later ``activate()`` in the child returns it (one install).
  Just before a fork the parent settles every pending install whose target's import has
  completed (``Runtime.settle``): the child inherits the patch, never a wait in a helper thread
  it does not have.
* A failed activation is remembered: ``activate()`` raises ``ActivationError`` again on retry
  instead of handing out a half-armed runtime.
* Every entry (``activate()``, ``activate_entry``, the engine plugin's ``activate_plugin``) follows
  the one error policy (``error_policy``).
"""
from __future__ import annotations

import atexit
import functools
import gc
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from dsv41_flags import rank_guard
from dsv41_flags.assembly import build
from dsv41_flags.engine import EngineAdapter
from dsv41_flags.error_policy import EXIT_STRICT, fail, import_failed
from dsv41_flags.errors import ActivationError
from dsv41_flags.logs import ProcessContext
from dsv41_flags.names import SNAPSHOT_VAR
from dsv41_flags.runtime import Runtime
from dsv41_flags.snapshot import spill_path
from dsv41_flags.text import exception_text

#: how long a fork waits, in all, for imports in progress at arming to complete so that the child
#: inherits their installs (seconds; an import still running then stays pending in the child)
SETTLE_BEFORE_FORK_S = 0.5

_LOCK = threading.RLock()
_RUNTIME: Runtime | None = None                  # the one per-process runtime, published complete
_FAILED: tuple[int, BaseException] | None = None  # (pid, error) of a failed activation
#: (pid, runtime or None) while a thread (holding _LOCK) is activating: never handed out; a fork
#: taken meanwhile marks the child's activation failed (``_after_fork_in_child``)
_ACTIVATING: tuple[int, Runtime | None] | None = None
#: (pid, runtime) of a failed activation's half-armed runtime: for ``flags.error``'s states only
_PARTIAL: tuple[int, Runtime] | None = None
_NO_RUNTIME_GUARD: int | None = None  # pid whose failed activation registered the rank guard


def activate(settings_files: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
             profile: str | None = None, *, role: str | None = None, context: Mapping[str, Any] | None = None,
             export: bool = True) -> Runtime:
    """Activate the framework in this process and return its runtime.

    Once per process and thread-safe: a second call (any thread) returns the same runtime
    (arguments given to it are ignored, with an ``activate.arguments_ignored`` warning).
    settings_files: a settings file path (str or os.PathLike) or a list of them (default None:
    the usual search, see ``settings``); profile: profile
    name (default ``DSV41_ENV``, else ``default``); role: process role added to every event
    (default ``launcher`` in the process that resolved the launch, else ``child``); context: more
    fields for every event from the first one on (``tp_rank``, ``pp_rank``, ...); export: hand the
    launch to child processes through ``DSV41_SNAPSHOT`` (first process only).
    Emits ``flags.resolved``, then arms the features whose flag is on.
    Raises SettingsError (bad values, unknown keys in strict mode, missing files, unknown
    profile), SnapshotError (the launch's snapshot refused, strict mode), DeclarationError (bad
    feature declarations), in strict mode DriftError; after any failure, ActivationError on every
    later call in this process. Any failure first emits ``flags.error`` (entry ``activate``); the
    caller decides what it does to the process (the framework's own entries, the sglang plugin
    and the ``run`` bootstrap, stop it with exit status 3 in strict mode: ``activate_entry``).
    """
    try:
        return _activate(settings_files, profile, role, context, export)
    except BaseException as exc:  # KeyboardInterrupt / SystemExit too: reported, then re-raised
        _report(exc, "activate", role, context)
        raise


def _activate(settings_files, profile, role, context, export) -> Runtime:
    """The once-per-process activation. The runtime is published (``_RUNTIME``) only once it is
    complete (built, announced, armed); meanwhile ``_ACTIVATING`` says an activation is in
    progress. ANY exception (KeyboardInterrupt and SystemExit included) latches the failure:
    it is re-raised, and every later call raises ActivationError."""
    global _RUNTIME, _FAILED, _ACTIVATING, _PARTIAL
    with _LOCK:
        pid = os.getpid()
        if _FAILED is not None and _FAILED[0] == pid:
            exc = _FAILED[1]
            raise ActivationError(f"activation of this process (pid {pid}) failed earlier: "
                                  f"{exception_text(exc)}") from exc
        rt = _RUNTIME
        if rt is not None and rt.pid == pid:
            if settings_files is not None or profile is not None:
                rt.log.warning("activate.arguments_ignored", settings_files=settings_files,
                               profile=profile, active_profile=rt.resolution.profile,
                               reason="already active in this process: the first activation wins")
            if not rt.announced:  # a forked child: its first explicit activation names it
                rt.context.update(role=role, **dict(context or {}))
            else:
                rt.context.update(**dict(context or {}))
            rt.announce()
            return rt
        rt = None
        try:
            _ACTIVATING = (pid, None)
            ctx = ProcessContext()
            ctx.update(role=role, **dict(context or {}))  # on every line, the first one too
            rt = build(settings_files, profile, context=ctx)
            _ACTIVATING = (pid, rt)
            rt.context.update(role=role or ("launcher" if rt.launch_pid == pid else "child"),
                              **dict(context or {}))
            if export and not rt.from_snapshot:
                rt.export(os.environ)
            _remove_spill_at_exit(rt)
            rt.announce()
            # a strict failure at a LATER import (or in another thread while arming: a target
            # whose import was in progress) follows the one error policy (flags.error, then exit
            # status 3), not an exception out of the engine's import statement
            rt.on_import_failure = functools.partial(import_failed, runtime=rt)
            rt.arm()
        except BaseException as exc:
            _FAILED = (pid, exc)
            if rt is not None:
                _PARTIAL = (pid, rt)
            raise
        finally:
            _ACTIVATING = None
        _RUNTIME = rt
        _keep_collection_schedule()
        return rt


def _keep_collection_schedule() -> None:
    """Hand the engine the garbage-collection schedule it would have had without the framework.

    CPython (3.11 ``gc_collect_generations``) runs a process's first full (generation 2)
    collection after 10 generation-1 collections, and each later one once the survivors grew by
    a quarter. Importing and activating the framework first runs about 8 generation-1
    collections, so the engine's first full collection comes early, over a small heap, and the
    series ends with one more full collection over the engine's final heap (``import
    sglang.srt.managers.scheduler``: 10 instead of 9, about 0.35 s each: bench/README.md,
    benchmark 4). One full collection here, while the heap is small, resets the counters.
    Only in a process that has had no full collection yet under the default thresholds (its
    heap is then at most a few generation-1 rounds, ~10 ms to collect); an engine process that
    activates later, or that set its own thresholds, keeps its schedule and pays nothing."""
    if gc.isenabled() and gc.get_threshold() == (700, 10, 10) and gc.get_stats()[2]["collections"] == 0:
        gc.collect()


def current_runtime() -> Runtime | None:
    """The runtime of this process, or None before ``activate`` (or when it failed before a
    runtime existed)."""
    rt = _RUNTIME
    return rt if rt is not None and rt.pid == os.getpid() else None


def process_state() -> tuple[Runtime | None, tuple[int, BaseException] | None]:
    """``(runtime, failed)`` of this process as held here (for ``dsv41_flags.testing``, which
    saves and restores them around a test)."""
    return _RUNTIME, _FAILED


def set_process_state(state: tuple[Runtime | None, tuple[int, BaseException] | None]) -> None:
    """Put back what ``process_state`` returned (``(None, None)``: never activated)."""
    global _RUNTIME, _FAILED, _PARTIAL
    with _LOCK:
        _RUNTIME, _FAILED = state
        _PARTIAL = None


def _report(exc: BaseException, entry: str, role: str | None,
            context: Mapping[str, Any] | None) -> bool:
    """``error_policy.fail`` with the runtime whose states ``flags.error`` reports: the published
    one, else the half-armed runtime of a failed or interrupted activation of this process (never
    handed out). True when the process must stop."""
    rt = current_runtime()
    if rt is None and _PARTIAL is not None and _PARTIAL[0] == os.getpid():
        rt = _PARTIAL[1]
    if rt is None and _ACTIVATING is not None and _ACTIVATING[0] == os.getpid():
        rt = _ACTIVATING[1]
    return fail(exc, entry, role, context, runtime=rt)


def _remove_spill_at_exit(rt: Runtime) -> None:
    """The launching process removes the launch's spill file (if any) when it exits."""
    path = spill_path(os.environ.get(SNAPSHOT_VAR, ""))
    if path and rt.launch_pid == os.getpid():
        pid = os.getpid()

        def remove():
            if os.getpid() == pid:  # not in a forked child that inherited the handler
                Path(path).unlink(missing_ok=True)

        atexit.register(remove)


# ----------------------------------------------------------------------------- fork
FORKED_MID_ACTIVATION = ("this process was forked while another thread of its parent (pid {ppid}) "
                         "was activating dsv41_flags: the activation it inherited is half done "
                         "(some features armed, some not) and that thread does not exist here")


def _before_fork() -> None:
    """``os.register_at_fork(before=...)``, in the forking thread of the parent: settle every
    pending install whose target's import has completed (``Runtime.settle``), so the child
    inherits the patch. Never raises (a strict failure stops the process as at any import)."""
    rt = _RUNTIME
    if rt is None or rt.pid != os.getpid() or _ACTIVATING is not None:
        return
    try:
        rt.settle(timeout=SETTLE_BEFORE_FORK_S)
    except Exception:  # reported by the install's own event; the fork goes on
        pass


def _after_fork_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: a fresh lock; the inherited runtime becomes
    the child's (its pid, role ``child``, ranks dropped, announced on first use). When another
    thread of the parent was activating at the fork (``_ACTIVATING``), the child's activation is
    failed instead: the half-armed runtime it inherited is disarmed (its hooks install nothing and
    report ``flags.error`` when their target is imported), and ``activate()`` raises
    ActivationError with a ``flags.error`` event (strict entries exit with status 3). Nothing is
    logged here: the parent's other thread may hold the stream's lock at the fork."""
    global _LOCK, _ACTIVATING, _FAILED, _PARTIAL
    _LOCK = threading.RLock()
    if _ACTIVATING is not None:
        half = _ACTIVATING[1]
        _ACTIVATING = None
        exc = ActivationError(FORKED_MID_ACTIVATION.format(ppid=os.getppid()))
        _FAILED = (os.getpid(), exc)
        if half is not None:
            half.on_import_failure = functools.partial(import_failed, runtime=half)
            half.abandon(str(exc))
            _PARTIAL = (os.getpid(), half)
        return
    rt = _RUNTIME
    if rt is not None:
        rt.adopt_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def activate_entry(entry: str, *, role: str | None = None,
                   context: Mapping[str, Any] | None = None) -> Runtime | None:
    """Activate through a framework entry with the error policy applied: returns the runtime, or
    None when activation failed in non-strict mode (reported by ``flags.error``); raises
    SystemExit(3) when it failed in strict mode (also for exceptions that are not FlagsError).
    KeyboardInterrupt and SystemExit pass through, reported by ``flags.error`` and latched (a
    later activation raises ActivationError)."""
    try:
        return _activate(None, None, role, context, True)
    except Exception as exc:
        if _report(exc, entry, role, context):
            raise SystemExit(EXIT_STRICT) from None
        return current_runtime()
    except BaseException as exc:
        _report(exc, entry, role, context)
        raise


def activate_plugin(engine: EngineAdapter) -> None:
    """The engine plugin loader's entry (``dsv41_flags_plugin.load``), in each engine process:
    activate once (entry ``<engine>-plugin``) with the role and ranks of ``process_context()``
    read first, so every event carries them; then, at the adapter's hook points: the live
    transport (``arm_live``, when a feature is live), ``on_serving`` and the rank guard
    (``on_world_ready``, outside ``no_world_roles``; after a failed non-strict activation too,
    with no runtime, so this rank joins the gather the others block in). A step that raises emits
    ``flags.error``; strict: ``SystemExit(3)``, which a plugin loader that swallows an
    ``Exception`` (and would boot with nothing armed) does not catch."""
    global _NO_RUNTIME_GUARD
    entry = f"{engine.name or 'engine'}-plugin"
    try:
        ctx = dict(engine.process_context())
    except Exception:  # an unexpected process shape: role and ranks unknown, activation goes on
        ctx = {}
    role = ctx.pop("role", None)
    rt = activate_entry(entry, role=role, context=ctx)
    if rt is None:  # failed, non-strict: the rank guard, once per process, with the reason
        if role in engine.no_world_roles or _NO_RUNTIME_GUARD == os.getpid():
            return
        _NO_RUNTIME_GUARD = os.getpid()
        try:
            rank_guard.register_guard(None, reason=_failure_reason(), engine=engine)
        except Exception as exc:
            _report(exc, entry, role, ctx)  # non-strict here: it runs on
        return

    def guard() -> None:
        if not rt.guard_registered and rt.context.fields.get("role") not in engine.no_world_roles:
            rt.guard_registered = rank_guard.register_guard(rt, engine=engine)

    arm_live(engine, rt, entry, role, ctx)
    for step in (lambda: engine.on_serving(rt), guard):
        _engine_step(step, entry, role, ctx)


def arm_live(engine: EngineAdapter, rt: Runtime, entry: str, role: str | None = None,
             context: Mapping[str, Any] | None = None) -> None:
    """The engine's live transport in this process (``engine.arm_live(rt)``) when a declared
    feature is live; else nothing. Called by the plugin entry and by the ``dsv41-flags run``
    bootstrap in the child processes the plugin loader never enters (``children``). A hook that
    raises emits ``flags.error`` (``entry``, ``role``, ``context``); strict: ``SystemExit(3)``."""
    if any(f.live for f in rt.features.values()):
        _engine_step(lambda: engine.arm_live(rt), entry, role, context)


def _engine_step(step, entry: str, role: str | None, context: Mapping[str, Any] | None) -> None:
    """Run one engine hook step under the error policy: an exception emits ``flags.error``;
    strict: ``SystemExit(3)``, else the process goes on."""
    try:
        step()
    except Exception as exc:
        if _report(exc, entry, role, context):
            raise SystemExit(EXIT_STRICT) from None


def _failure_reason() -> str:
    """Why this process has no runtime (its latched activation error), for the rank guard's view."""
    exc = _FAILED[1] if _FAILED is not None and _FAILED[0] == os.getpid() else None
    exc = exc.__cause__ if isinstance(exc, ActivationError) and exc.__cause__ is not None else exc
    return exception_text(exc)[:300] if exc is not None else "activation failed"
