"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

sglang's processes as the plugin sees them: the roles sglang starts, each process's role and
ranks read from the ``run_<role>_process(...)`` frame that calls ``load_plugins()``, whether
sglang's plugin loader will activate a spawned process (so the ``dsv41-flags run`` bootstrap
leaves it to the plugin, which knows role and ranks before the first event), and the hook points
``activation.activate_plugin`` drives: ``on_world_ready``, ``arm_live`` and ``on_serving``.

Standard library only at import.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from typing import Any, Callable

from dsv41_flags.engines.sglang.roles import TOKENIZER_WORKER, UNNAMED_ROLE

#: roles whose processes never initialise the model-parallel world (no rank guard there)
NO_WORLD_ROLES = frozenset({"engine", "detokenizer", "data_parallel_controller"})
#: entry-point group of sglang's general plugins (``sglang.srt.plugins.load_plugins``)
PLUGIN_GROUP = "sglang.srt.plugins"
#: our entry in that group (pyproject ``[project.entry-points."sglang.srt.plugins"]``):
#: ``dsv41_flags_plugin.load``, which imports nothing at module level (a package that cannot load
#: still says so and stops), then runs ``activation.activate_plugin`` with this adapter
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
    """Install the scheduler RPC methods when sglang's scheduler module is imported, and the HTTP
    routes when its HTTP server module is (post-import hooks; each fires only in the process that
    imports the module); outside the schedulers, answer switches as a peer of the launch
    (``peers.listen``): at once in a process whose role sglang's plugin loader or the launch gave
    (launcher, detokenizer, data-parallel controller, engine), and in a process of no such role
    (``UNNAMED_ROLE``: a child under ``dsv41-flags run``) once it imports sglang's HTTP server,
    i.e. when it serves requests (``serve_http``). Returns False when they are registered
    already."""
    if rt.live.transport.get("armed"):
        return False
    from dsv41_flags.engines.sglang.http import HTTP_MODULE
    from dsv41_flags.engines.sglang.rpc import SCHEDULER_MODULE, install_scheduler_rpc
    from dsv41_flags.hooks import register_post_import_hook

    rt.live.transport["armed"] = True
    register_post_import_hook(lambda m: install_scheduler_rpc(rt, m), SCHEDULER_MODULE)
    register_post_import_hook(lambda m: serve_http(rt, m), HTTP_MODULE)
    role = rt.context.fields.get("role")
    if role not in ("scheduler", UNNAMED_ROLE):   # the schedulers switch over sglang's RPC
        from dsv41_flags.engines.sglang.peers import listen

        listen(rt)
    return True


def serve_http(rt, module) -> None:
    """sglang's HTTP server module was imported in this process: add the live routes to its app
    (``http.install_http_routes``). A process of no sglang role (``UNNAMED_ROLE``) becomes a peer
    of the launch now; a spawned one is a tokenizer worker (``TOKENIZER_WORKER``, its role from
    here on), which is how the HTTP process that answers a switch counts the workers it reached
    (``peers.unreached``). Raises what ``install_http_routes`` and ``peers.listen`` raise."""
    from dsv41_flags.engines.sglang.http import install_http_routes

    install_http_routes(rt, module)
    if rt.context.fields.get("role") == UNNAMED_ROLE:
        from dsv41_flags.children import is_spawn_child
        from dsv41_flags.engines.sglang.peers import listen

        if is_spawn_child():
            rt.context.update(role=TOKENIZER_WORKER)
        listen(rt)


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
    """Emit ``flags.serving`` (``status.serving`` fields) once, when this scheduler starts its
    event loop: a wrapt function wrapper on ``SERVING_TARGET`` (the method on the class, which
    every call looks up; sglang's HookRegistry would also walk every loaded module for stale
    ``from X import Y`` bindings of it, about 6,500 modules in a scheduler, which a method has
    none of: bench/README.md, benchmark 7). From then on the metrics gauges follow every state
    change (``Runtime.state_listeners``: a target imported while serving installs and shows at
    once). Returns False outside a scheduler, when sglang's scheduler module is not importable
    or when the wrapper is in place already."""
    if rt.context.fields.get("role") != "scheduler" or rt.live.transport.get("serving_hook"):
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
            from dsv41_flags.status import serving

            rt.log.info("flags.serving", **serving(rt).model_dump(mode="json"))
            update_safely(rt)
            rt.state_listeners.append(lambda st: update_safely(rt))  # late installs too
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(module, f"Scheduler.{attribute}", before)
    rt.live.transport["serving_hook"] = True
    return True
