"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Propagation to children under ``dsv41-flags run`` (``bootstrap``, at every interpreter start):
a spawned or forkserver child activates before its target runs, through the mark on its process
object (``SpawnedChild``), unless its target activates through the engine's plugin loader. A
forked child adopts its parent's runtime at the fork (``activation``). A child activated here
with a live feature declared gets the engine's live transport too (``activation.arm_live``), as
the processes the plugin loader enters do: a switch must reach it (sglang's tokenizer workers).
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

import wrapt

from dsv41_flags.activation import activate_entry, arm_live, current_runtime, process_state
from dsv41_flags.engine import adapter
from dsv41_flags.error_policy import EXIT_STRICT


def _interpreter_argv(argv: Sequence[str] | None = None) -> list[str]:
    """``argv``, else this interpreter's own command line (``sys.orig_argv``)."""
    return list(getattr(sys, "orig_argv", []) or []) if argv is None else list(argv)


def is_multiprocessing_helper(argv: Sequence[str] | None = None) -> bool:
    """True for multiprocessing's resource tracker: it runs no user code and is not an engine
    process."""
    return "from multiprocessing.resource_tracker import main" in " ".join(_interpreter_argv(argv))


def is_forkserver(argv: Sequence[str] | None = None) -> bool:
    """True in multiprocessing's forkserver: it runs no user code itself, but forks the children
    that do (each then activates before its target, like a spawned child)."""
    return "from multiprocessing.forkserver import main" in " ".join(_interpreter_argv(argv))


def is_spawn_child(argv: Sequence[str] | None = None) -> bool:
    """True in a process started by multiprocessing's ``spawn`` (before its target runs)."""
    argv = _interpreter_argv(argv)
    return "--multiprocessing-fork" in argv and any("spawn_main" in a for a in argv)


def bootstrap() -> None:
    """Interpreter-start activation for ``dsv41-flags run`` (called by the bootstrap
    ``sitecustomize``). The resource tracker is left alone. Every other process marks the
    multiprocessing processes it creates (``mark_processes``). A spawned child (or a child of the
    forkserver, which itself does not activate) waits until its process object arrives from its
    parent: unpickling the mark activates it unless its target activates through the engine's
    plugin loader (which knows role and ranks before the first event; ``SpawnedChild``).
    Everything else activates now. A failure follows the error policy: in strict mode the
    process exits with status 3 before running anything."""
    if is_multiprocessing_helper():
        return
    mark_processes()
    if is_spawn_child() or is_forkserver():
        return
    _bootstrap_activate()


def _bootstrap_activate(role: str | None = None) -> None:
    """Activate here (entry ``bootstrap``); in a child of the launch with a live feature declared,
    arm the engine's live transport too (``activation.arm_live``), as the plugin entry does in
    the processes its loader enters: such a child is one the loader never enters (sglang's
    tokenizer workers of ``--tokenizer-worker-num N``), and a switch must reach it. The launch
    process itself is left to the engine's plugin loader. A strict failure exits with status 3."""
    try:
        rt = activate_entry("bootstrap", role=role)
        if rt is not None and rt.launch_pid != os.getpid():
            arm_live(adapter(), rt, "bootstrap", role)
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
    failed = process_state()[1]
    if not deferred and (is_spawn_child() or is_forkserver()) and current_runtime() is None \
            and not (failed is not None and failed[0] == os.getpid()):
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
