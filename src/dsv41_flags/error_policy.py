"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The error policy of every entry (the engine's plugin loader, the ``dsv41-flags run`` bootstrap,
a direct ``activate()``, a target's import after activation): one ``flags.error`` event, then in
strict mode exit status 3 (``EXIT_STRICT``); non-strict, the process runs and the event says
which features are what. The runtime reported is passed in: this module holds no process state.
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from dsv41_flags.errors import ActivationError, FlagsError, SnapshotError
from dsv41_flags.logs import ProcessContext, configure, get_logger
from dsv41_flags.names import RESERVED, SNAPSHOT_VAR
from dsv41_flags.snapshot import spill_path
from dsv41_flags.text import exception_text
from dsv41_flags.values import CastError, cast_bool

if TYPE_CHECKING:
    from dsv41_flags.runtime import Runtime

#: exit status of a process stopped by a failure in strict mode
EXIT_STRICT = 3


def _strict_when_unknown() -> bool:
    """Strict mode when no resolution could be trusted: ``DSV41_STRICT`` when it is a valid flag
    value, else True (the default)."""
    try:
        return cast_bool(os.environ.get(RESERVED["STRICT"].variable, "true") or "true")
    except CastError:
        return True


def fail(exc: BaseException, entry: str, role: str | None = None,
         context: Mapping[str, Any] | None = None, runtime: Runtime | None = None) -> bool:
    """Report an exception raised while activating through ``entry`` (``sglang-plugin``,
    ``bootstrap``, ``activate``) and return True when the process must stop (strict mode: the
    caller exits with status 3). Emits ``flags.error`` with cause, entry, pid, role, strict,
    outcome and, with ``runtime`` (the process's runtime, or the half-armed one of a failed
    activation), the state of every feature; falls back to one plain line on stderr when the
    event cannot be written. Never raises.
    A KeyboardInterrupt / SystemExit is reported with outcome ``interrupted`` (it propagates)."""
    if isinstance(exc, ActivationError) and exc.__cause__ is not None:
        exc = exc.__cause__
    strict = runtime.strict if runtime is not None else (
        isinstance(exc, SnapshotError) or _strict_when_unknown())
    if not isinstance(exc, Exception):
        outcome = (f"interrupted: {type(exc).__name__} propagates; every later activate() in this "
                   f"process raises ActivationError")
    elif entry == "activate":  # a direct call: the exception goes to its caller, who decides
        outcome = (f"raised {type(exc).__name__} to the caller of activate() ("
                   + ("strict" if strict else "non-strict") + " mode; "
                   + ("features as in 'states'" if runtime is not None
                      else "no feature is applied in this process") + ")")
    else:
        outcome = (f"stopped: exit status {EXIT_STRICT} (strict mode)" if strict else
                   "running: " + ("every feature as in 'states'" if runtime is not None
                                  else "no feature is applied in this process"))
    fields: dict[str, Any] = {
        "cause": f"{exception_text(exc)}", "error_type": type(exc).__name__,
        "entry": entry, "strict": strict, "outcome": outcome,
        "internal": not isinstance(exc, FlagsError),
    }
    if runtime is not None:
        fields["states"] = runtime.recorded_states()
    try:
        if runtime is not None:
            log = runtime.log
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


def stop_process(status: int = EXIT_STRICT, runtime: Runtime | None = None) -> None:
    """Stop this process NOW with ``status``, from wherever it is (an import statement in any
    thread, under a host's ``except BaseException``): flush stdout and stderr (the events are
    out), remove the launch's spill file when ``runtime`` is the launching process's, then
    ``os._exit``. Not ``SystemExit``: raised from an import in a thread it only ends the thread,
    and a host loop catching BaseException would go on unpatched. ``atexit`` handlers do not run."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        path = spill_path(os.environ.get(SNAPSHOT_VAR, ""))
        if path and runtime is not None and runtime.launch_pid == os.getpid():
            Path(path).unlink(missing_ok=True)
    except Exception:
        pass
    os._exit(status)


def import_failed(exc: BaseException, feature_name: str, *, runtime: Runtime | None = None) -> None:
    """The error policy for a failure at a target's import AFTER activation (the runtime's
    ``on_import_failure``, bound to it as ``runtime``: strict drift, a failed install, an abandoned
    activation's hook): ``flags.error`` (entry ``import``, the feature), then in strict mode
    ``stop_process`` (exit status 3). Non-strict: returns; the feature's own event says what it is."""
    if fail(exc, f"import of {feature_name}'s target", runtime=runtime):
        stop_process(EXIT_STRICT, runtime)
