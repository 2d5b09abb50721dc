"""Activation: once per process, truly, and one error policy for every entry.

* ``activate()`` holds a lock: two threads get one runtime, one ``flags.resolved``, one install.
* A forked child owns its runtime: at fork (``os.register_at_fork``) the inherited runtime is
  adopted by the child (its pid, role ``child``, a fresh announcement), so the hooks it inherited
  report to the child's runtime and a later ``activate()`` in the child returns it (one install).
  Just before a fork the parent settles every pending install whose target's import has
  completed (``Runtime.settle``): the child inherits the patch, never a wait in a helper thread
  it does not have.
* A failed activation is remembered: ``activate()`` raises ``ActivationError`` again on retry
  instead of handing out a half-armed runtime.
* Error policy (``fail``), the same for the sglang plugin, the ``dsv41-flags run`` bootstrap and
  a direct ``activate()``: any exception while activating emits a structured ``flags.error``
  event (cause, entry, pid, role, strict, outcome, and the state of every feature when a runtime
  exists). Strict mode: the process stops with exit status 3. Non-strict: it runs, and the
  event says which features are what.
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

import wrapt

from dsv41_flags.engines import adapter
from dsv41_flags.errors import ActivationError, FlagsError, SnapshotError
from dsv41_flags.logs import ProcessContext, configure, get_logger
from dsv41_flags.names import RESERVED, SNAPSHOT_VAR
from dsv41_flags.runtime import Runtime, build
from dsv41_flags.snapshot import spill_path
from dsv41_flags.values import CastError, cast_bool
from dsv41_flags.text import exception_text

EXIT_STRICT = 3
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
        fail(exc, "activate", role, context)
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
            rt.on_import_failure = import_failed
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


def _reporting_runtime() -> Runtime | None:
    """The runtime whose states ``flags.error`` reports: the published one, else the half-armed
    runtime of a failed or interrupted activation of this process (never handed out)."""
    rt = current_runtime()
    if rt is None and _PARTIAL is not None and _PARTIAL[0] == os.getpid():
        rt = _PARTIAL[1]
    if rt is None and _ACTIVATING is not None and _ACTIVATING[0] == os.getpid():
        rt = _ACTIVATING[1]
    return rt


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
        partial = _ACTIVATING[1]
        _ACTIVATING = None
        exc = ActivationError(FORKED_MID_ACTIVATION.format(ppid=os.getppid()))
        _FAILED = (os.getpid(), exc)
        if partial is not None:
            partial.on_import_failure = import_failed
            partial.abandon(str(exc))
            _PARTIAL = (os.getpid(), partial)
        return
    rt = _RUNTIME
    if rt is not None:
        rt.adopt_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------- policy
def _strict_when_unknown(environ: Mapping[str, str] | None = None) -> bool:
    """Strict mode when no resolution could be trusted: ``DSV41_STRICT`` when it is a valid flag
    value, else True (the default)."""
    environ = os.environ if environ is None else environ
    try:
        return cast_bool(environ.get(RESERVED["STRICT"].variable, "true") or "true")
    except CastError:
        return True


def fail(exc: BaseException, entry: str, role: str | None = None,
         context: Mapping[str, Any] | None = None) -> bool:
    """Report an exception raised while activating through ``entry`` (``sglang-plugin``,
    ``bootstrap``, ``activate``) and return True when the process must stop (strict mode: the
    caller exits with status 3). Emits ``flags.error`` with cause, entry, pid, role, strict,
    outcome and, when a runtime exists, the state of every feature; falls back to one plain line
    on stderr when the event cannot be written. Never raises.
    A KeyboardInterrupt / SystemExit is reported with outcome ``interrupted`` (it propagates)."""
    rt = _reporting_runtime()
    if isinstance(exc, ActivationError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if rt is not None:
        strict = rt.strict
    else:
        strict = True if isinstance(exc, SnapshotError) else _strict_when_unknown()
    if not isinstance(exc, Exception):
        outcome = (f"interrupted: {type(exc).__name__} propagates; every later activate() in this "
                   f"process raises ActivationError")
    elif entry == "activate":  # a direct call: the exception goes to its caller, who decides
        outcome = (f"raised {type(exc).__name__} to the caller of activate() ("
                   + ("strict" if strict else "non-strict") + " mode; "
                   + ("features as in 'states'" if rt is not None
                      else "no feature is applied in this process") + ")")
    else:
        outcome = (f"stopped: exit status {EXIT_STRICT} (strict mode)" if strict else
                   "running: " + ("every feature as in 'states'" if rt is not None
                                  else "no feature is applied in this process"))
    fields: dict[str, Any] = {
        "cause": f"{exception_text(exc)}", "error_type": type(exc).__name__,
        "entry": entry, "strict": strict, "outcome": outcome,
        "internal": not isinstance(exc, FlagsError),
    }
    if rt is not None:
        fields["states"] = rt.recorded_states()
    try:
        if rt is not None:
            log = rt.log
        else:
            ctx = ProcessContext()
            ctx.update(role=role or "unknown", **dict(context or {}))
            configure(os.environ.get(RESERVED["LOG_FORMAT"].variable, "auto") or "auto",
                      os.environ.get(RESERVED["LOG_LEVEL"].variable, "info") or "info", context=ctx)
            log = get_logger(ctx)
        if not isinstance(exc, FlagsError):
            fields["traceback"] = "".join(traceback.format_exception(exc))
        log.error("flags.error", **fields)
    except Exception:  # the event cannot be written: one plain line, never a second failure
        try:
            sys.stderr.write(f"dsv41_flags: flags.error pid={os.getpid()} entry={entry} "
                             f"{fields['cause']} -> {outcome}\n")
            sys.stderr.flush()
        except Exception:
            pass
    return strict


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
        if fail(exc, entry, role, context):
            raise SystemExit(EXIT_STRICT) from None
        return current_runtime()
    except BaseException as exc:
        fail(exc, entry, role, context)
        raise


def stop_process(status: int = EXIT_STRICT) -> None:
    """Stop this process NOW with ``status``, from wherever it is (an import statement in any
    thread, under a host's ``except BaseException``): flush stdout and stderr (the events are
    out), remove the launch's spill file when this is the launching process, then ``os._exit``.
    ``SystemExit`` is not used there: raised from an import in a thread it only ends the thread,
    and a host loop catching BaseException would go on unpatched. ``atexit`` handlers do not run."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        path = spill_path(os.environ.get(SNAPSHOT_VAR, ""))
        rt = current_runtime()
        if path and rt is not None and rt.launch_pid == os.getpid():
            Path(path).unlink(missing_ok=True)
    except Exception:
        pass
    os._exit(status)


def import_failed(exc: BaseException, feature_name: str) -> None:
    """The error policy for a failure at a target's import AFTER activation (the runtime's
    ``on_import_failure``: strict drift or a failed install, an abandoned activation's hook): a
    ``flags.error`` event (entry ``import``, the feature), then in strict mode ``stop_process``
    (exit status 3). Non-strict: returns (the feature's own event says what it is)."""
    if fail(exc, f"import of {feature_name}'s target"):
        stop_process(EXIT_STRICT)


# ------------------------------------------------------------------------- bootstrap
def _interpreter_argv() -> list[str]:
    return list(getattr(sys, "orig_argv", []) or [])


def is_multiprocessing_helper(argv: Sequence[str] | None = None) -> bool:
    """True for multiprocessing's resource tracker: it runs no user code and is not an engine
    process."""
    argv = _interpreter_argv() if argv is None else list(argv)
    return "from multiprocessing.resource_tracker import main" in " ".join(argv)


def is_forkserver(argv: Sequence[str] | None = None) -> bool:
    """True in multiprocessing's forkserver: it runs no user code itself, but forks the children
    that do (each then activates before its target, like a spawned child)."""
    argv = _interpreter_argv() if argv is None else list(argv)
    return "from multiprocessing.forkserver import main" in " ".join(argv)


def is_spawn_child(argv: Sequence[str] | None = None) -> bool:
    """True in a process started by multiprocessing's ``spawn`` (before its target runs)."""
    argv = _interpreter_argv() if argv is None else list(argv)
    return "--multiprocessing-fork" in argv and any("spawn_main" in a for a in argv)


def bootstrap() -> None:
    """Interpreter-start activation for ``dsv41-flags run`` (called by the bootstrap
    ``sitecustomize``). The resource tracker is left alone. Every other process marks the
    multiprocessing processes it creates (``mark_processes``). A spawned child (or a child of the
    forkserver, which itself does not activate) waits until its process object arrives from its
    parent: unpickling the mark activates it unless its target activates through the engine's
    plugin loader (which knows role and ranks before the first event; ``SpawnedChild``).
    Everything else activates now. A failure follows ``fail``: in strict mode the process exits
    with status 3 before running anything."""
    if is_multiprocessing_helper():
        return
    mark_processes()
    if is_spawn_child() or is_forkserver():
        return
    _bootstrap_activate()


def _bootstrap_activate(role: str | None = None) -> None:
    try:
        activate_entry("bootstrap", role=role)
    except SystemExit:
        try:
            sys.stderr.flush()
        finally:
            os._exit(EXIT_STRICT)  # never run the program unpatched


class SpawnedChild:
    """The mark a process under ``dsv41-flags run`` puts on each multiprocessing process object it
    creates (attribute ``dsv41_flags_child``). It travels with the pickled process object to a
    spawned or forkserver child, where unpickling it (``__reduce__`` ->
    ``activate_spawned_child``) activates the child before its target runs. ``deferred`` (bool):
    the target activates through the engine's plugin loader (``EngineAdapter.will_activate``,
    decided in the parent from the target passed to the process's constructor)."""

    __slots__ = ("deferred",)

    def __init__(self, deferred: bool) -> None:
        self.deferred = deferred

    def __reduce__(self):
        return activate_spawned_child, (self.deferred,)


def activate_spawned_child(deferred: bool) -> SpawnedChild:
    """Unpickling a ``SpawnedChild``: in a spawned or forkserver child that has no runtime yet
    (nor a failed activation), activate now unless ``deferred``. Anywhere else (a process object
    unpickled for another purpose) nothing happens. Returns the mark."""
    if not deferred and (is_spawn_child() or is_forkserver()) and current_runtime() is None \
            and not (_FAILED is not None and _FAILED[0] == os.getpid()):
        _bootstrap_activate()
    return SpawnedChild(deferred)


def _mark_process(wrapped, instance, args, kwargs):
    """wrapt wrapper of ``multiprocessing.process.BaseProcess.__init__(group, target, ...)``: the
    process object gets its ``SpawnedChild`` mark."""
    wrapped(*args, **kwargs)
    target = kwargs.get("target", args[1] if len(args) > 1 else None)
    try:
        deferred = bool(adapter().will_activate(target))
    except Exception:  # an engine adapter that cannot say: the child activates before its target
        deferred = False
    instance.dsv41_flags_child = SpawnedChild(deferred)


def mark_processes() -> None:
    """Wrap ``multiprocessing.process.BaseProcess.__init__`` (wrapt) so that every process
    object created here carries its ``SpawnedChild`` mark. Called once per interpreter, by
    ``bootstrap`` (a forked child inherits the wrapped class)."""
    import multiprocessing.process as mpp

    wrapt.wrap_function_wrapper(mpp, "BaseProcess.__init__", _mark_process)
