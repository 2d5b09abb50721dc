"""sglang's processes as the plugin sees them: the roles sglang starts, each process's role and
ranks read from the ``run_<role>_process(...)`` frame that calls ``load_plugins()``, whether
sglang's plugin loader will activate a spawned process (so the ``dsv41-flags run`` bootstrap
leaves it to the plugin, which knows role and ranks before the first event), the rank guard's
hook point (``on_world_ready``) and the plugin entry itself (``load``).

Standard library only at import.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from typing import Any, Callable

from dsv41_flags.text import exception_text

#: the ``entry`` field of a ``flags.error`` raised under sglang's plugin loader
PLUGIN_ENTRY_NAME = "sglang-plugin"
#: roles whose processes never initialise the model-parallel world (no rank guard there)
NO_GUARD_ROLES = ("engine", "detokenizer", "data_parallel_controller")
#: entry-point group of sglang's general plugins (``sglang.srt.plugins.load_plugins``)
PLUGIN_GROUP = "sglang.srt.plugins"
#: our entry in that group (pyproject ``[project.entry-points."sglang.srt.plugins"]``):
#: ``dsv41_flags_plugin.load``, which imports nothing at module level (a package that cannot load
#: still says so and stops), then calls ``load`` below through the adapter
PLUGIN_ENTRY = ("dsv41_flags", "dsv41_flags_plugin:load")
PLUGIN_ENTRIES = {PLUGIN_ENTRY}
#: rank arguments of sglang's process entry functions, in report order
RANKS = ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")
#: process entry functions of sglang 0.5.23 that call ``load_plugins()`` first thing
#: (scheduler.py, detokenizer_manager.py, data_parallel_controller.py) -> role
PROCESS_ENTRIES = {
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "data_parallel_controller",
}
#: spawn targets that reach one of PROCESS_ENTRIES before anything else (data_parallel_controller.py)
DEFERRING_TARGETS = frozenset(PROCESS_ENTRIES) | {"run_scheduler_process_with_init_pipe"}


def caller_context(max_depth: int = 16, frame=None) -> dict[str, Any]:
    """Role and ranks of the sglang process calling ``load_plugins()``, read from the calling
    ``run_<role>_process(..., tp_rank, pp_rank, dp_rank, ...)`` frame: e.g.
    ``{"role": "scheduler", "tp_rank": 0, "pp_rank": 0}`` (None ranks left out); ``{"role":
    "engine"}`` under ``Engine.__init__``; ``{}`` when unknown. Read before activating, so the
    first event (``flags.resolved``) already carries them."""
    if frame is None:
        here = inspect.currentframe()
        frame = here.f_back if here is not None else None
    for _ in range(max_depth):
        if frame is None:
            break
        name = frame.f_code.co_name
        if name.startswith("run_") and name.endswith("_process"):
            ctx: dict[str, Any] = {"role": PROCESS_ENTRIES.get(name, name[len("run_"):-len("_process")])}
            ctx.update({k: frame.f_locals[k] for k in RANKS
                        if isinstance(frame.f_locals.get(k), int)})
            return ctx
        if name == "__init__" and type(frame.f_locals.get("self")).__name__ == "Engine":
            return {"role": "engine"}
        frame = frame.f_back
    return {}


def plugin_installed(environ=None) -> bool:
    """True when our entry point is in sglang's plugin group and ``SGLANG_PLUGINS`` (sglang's
    whitelist, comma-separated names) does not leave it out."""
    environ = os.environ if environ is None else environ
    try:
        eps = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    except Exception:
        return False
    if not any((ep.name, ep.value) in PLUGIN_ENTRIES for ep in eps):
        return False
    allowed = environ.get("SGLANG_PLUGINS", "").strip()
    return not allowed or PLUGIN_ENTRY[0] in {x.strip() for x in allowed.split(",")}


def plugin_will_activate(target: Callable | None, environ=None) -> bool:
    """True when ``target`` (the function a spawned process is about to run) is one of sglang's
    process entries, which call ``load_plugins()`` first, and our plugin is installed: that
    process then activates through the plugin with its role and ranks."""
    if target is None:
        return False
    module = getattr(target, "__module__", "") or ""
    return (module.startswith("sglang.") and getattr(target, "__name__", "") in DEFERRING_TARGETS
            and plugin_installed(environ))


def arm_live(rt) -> bool:
    """When a live feature is declared: install the scheduler RPC methods when sglang's scheduler
    module is imported, and the HTTP routes when its HTTP server module is (post-import hooks;
    each fires only in the process that imports the module); outside the schedulers, answer
    switches as a peer of the launch (``peers.listen``). Returns False when there is no live
    feature (nothing registered)."""
    if rt.live.transport.get("armed") or not any(f.live for f in rt.features.values()):
        return False
    from dsv41_flags.engines.sglang.http import HTTP_MODULE, install_http_routes
    from dsv41_flags.engines.sglang.rpc import SCHEDULER_MODULE, install_scheduler_rpc
    from dsv41_flags.hooks import register_post_import_hook

    rt.live.transport["armed"] = True
    register_post_import_hook(lambda m: install_scheduler_rpc(rt, m), SCHEDULER_MODULE)
    register_post_import_hook(lambda m: install_http_routes(rt, m), HTTP_MODULE)
    if rt.context.fields.get("role") != "scheduler":   # the schedulers switch over sglang's RPC
        from dsv41_flags.engines.sglang.peers import listen

        listen(rt)
    return True


#: the rank guard's hook point: sglang's model-parallel world is initialised here (every
#: scheduler process calls it once, with the world's CPU group ready afterwards)
GUARD_TARGET = "sglang.srt.distributed.parallel_state.initialize_model_parallel"


def on_world_ready(callback: Callable[[Any], None]) -> bool:
    """Register ``callback(cpu_group)`` as an AFTER hook on ``initialize_model_parallel`` through
    sglang's HookRegistry (applied by ``load_plugins()``); the hook returns the function's result
    unchanged. Returns False when sglang's plugin system is not importable."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:
        return False

    def after(result, *args, **kwargs):
        """HookRegistry AFTER hook: call back with the world's CPU group, keep the result."""
        from sglang.srt.distributed.parallel_state import get_world_group

        callback(get_world_group().cpu_group)
        return result

    HookRegistry.register(GUARD_TARGET, after, HookType.AFTER)
    return True


#: where a scheduler starts serving: ``run_scheduler_process`` builds the ``Scheduler`` (model,
#: memory pools, the rank guard at ``initialize_model_parallel``), reports ready to its parent,
#: then calls this; nothing before it serves a request
SERVING_TARGET = "sglang.srt.managers.scheduler.Scheduler.run_event_loop"


def on_serving(rt) -> bool:
    """Emit ``flags.serving`` (``serving_report`` fields) once, when this scheduler starts its
    event loop: a wrapt function wrapper on ``SERVING_TARGET`` (the method on the class, which
    every call looks up; sglang's HookRegistry would also walk every loaded module for stale
    ``from X import Y`` bindings of it, about 6,500 modules in a scheduler, which a method has
    none of: bench/README.md, benchmark 7). From then on the metrics gauges follow every state
    change (``Runtime.state_listeners``: a target imported while serving installs and shows at
    once). Returns False when sglang's scheduler module is not importable or the wrapper is
    in place already."""
    if rt.live.transport.get("serving_hook"):
        return False
    module_name, _, attribute = SERVING_TARGET.partition(".Scheduler.")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    import wrapt

    def before(wrapped, instance, args, kwargs):
        """Say once what is in effect; the call goes on unchanged."""
        if not rt.live.transport.get("serving_reported"):
            rt.live.transport["serving_reported"] = True
            from dsv41_flags.engines.sglang.metrics import update_safely
            from dsv41_flags.engines.sglang.rpc import serving_report

            rt.log.info("flags.serving", **serving_report(rt))
            update_safely(rt)
            rt.state_listeners.append(lambda st: update_safely(rt))  # late installs too
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(module, f"Scheduler.{attribute}", before)
    rt.live.transport["serving_hook"] = True
    return True


def load() -> None:
    """sglang's plugin entry (group ``sglang.srt.plugins``): activate dsv41_flags in this sglang
    process (once), with its role and ranks read from the calling ``run_<role>_process`` frame
    BEFORE activating, so every event from ``flags.resolved`` on carries them; then register the
    rank consistency guard at ``on_world_ready`` (schedulers only).

    sglang 0.5.23 calls ``load_plugins()`` in the main process and at the start of every
    scheduler, detokenizer and data-parallel controller process (all started with ``spawn``).
    Error policy (``dsv41_flags.activation.fail``): any exception while activating, not only FlagsError,
    emits ``flags.error`` (entry ``sglang-plugin``); in strict mode the process stops with
    ``SystemExit(3)``: sglang's ``load_plugins()`` logs and swallows a plugin's ``Exception``
    ("Failed to execute general plugin") and would boot with nothing armed; SystemExit is not an
    Exception, so the boot stops here. Non-strict: the process runs, the event says what is on."""
    try:
        from dsv41_flags.activation import EXIT_STRICT, activate_entry, fail
    except Exception as exc:  # the package itself is broken here: no event possible
        from dsv41_flags_plugin import stop_unloadable

        stop_unloadable("importing dsv41_flags", exc)
        return

    try:
        ctx = caller_context()
    except Exception:  # an unexpected frame shape: role and ranks unknown, activation goes on
        ctx = {}
    role = ctx.pop("role", None)
    rt = activate_entry(PLUGIN_ENTRY_NAME, role=role, context=ctx)
    if rt is None:
        # activation failed, non-strict: this rank still registers the guard (with no runtime)
        # so it joins the ranks' all_gather; otherwise the other ranks would block in it
        if role in NO_GUARD_ROLES or not _guard_once():
            return
        reason = _failure_reason()
        try:
            from dsv41_flags.rank_guard import register_guard

            register_guard(None, reason=reason, engine=_adapter())
        except Exception as exc:
            fail(exc, PLUGIN_ENTRY_NAME, role, ctx)  # non-strict here: it runs on
        return
    if any(f.live for f in rt.features.values()):
        # live switches over sglang's RPC path: methods on Scheduler, routes on the HTTP app
        try:
            arm_live(rt)
        except Exception as exc:
            if fail(exc, PLUGIN_ENTRY_NAME, role, ctx):
                raise SystemExit(EXIT_STRICT) from None
    if rt.context.fields.get("role") == "scheduler":
        try:
            on_serving(rt)
        except Exception as exc:
            if fail(exc, PLUGIN_ENTRY_NAME, role, ctx):
                raise SystemExit(EXIT_STRICT) from None
    # only schedulers initialise the model-parallel world; elsewhere the hook would only cost an
    # import of sglang's parallel_state
    if rt.guard_registered or rt.context.fields.get("role") in NO_GUARD_ROLES:
        return
    try:
        from dsv41_flags.rank_guard import register_guard

        rt.guard_registered = register_guard(rt, engine=_adapter())
    except Exception as exc:
        if fail(exc, PLUGIN_ENTRY_NAME, role, ctx):
            raise SystemExit(EXIT_STRICT) from None


_NO_RUNTIME_GUARD: list[int] = []  # pids where the no-runtime guard is registered


def _guard_once() -> bool:
    """True the first time in this process (``load_plugins()`` may call ``load`` again)."""
    if os.getpid() in _NO_RUNTIME_GUARD:
        return False
    _NO_RUNTIME_GUARD.append(os.getpid())
    return True


def _failure_reason() -> str:
    """Why this process has no runtime (the latched activation error), for the guard's view."""
    from dsv41_flags.activation import process_state

    failed = process_state()[1]
    if failed is None:
        return "activation failed"
    exc = failed[1]
    exc = exc.__cause__ if exc.__cause__ is not None and type(exc).__name__ == "ActivationError" else exc
    return f"{exception_text(exc)}"[:300]


def _adapter():
    """This room's ``EngineAdapter``: the installed engine adapter (``engines.adapter()``), which
    is this room's whenever sglang's plugin loader runs it (the package imports this module first,
    so it is not imported back from here: no import cycle)."""
    from dsv41_flags.engines import adapter

    return adapter()
