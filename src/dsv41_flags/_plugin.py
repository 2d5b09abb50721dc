"""sglang plugin entry point (group ``sglang.srt.plugins``).

sglang 0.5.23 calls ``load_plugins()`` in the main process and at the start of every scheduler,
detokenizer and data-parallel controller process (all started with ``spawn``); each call lands
here and activates the framework once per process, from the launch's snapshot when present.
"""
from __future__ import annotations

import sys

_RANKS = ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")


def caller_context(max_depth: int = 12) -> dict:
    """Role and ranks of the sglang process calling ``load_plugins()``, read from the calling
    ``run_<role>_process(..., tp_rank, pp_rank, dp_rank, ...)`` frame: e.g.
    ``{"role": "scheduler", "tp_rank": 0, "pp_rank": 0, "dp_rank": None}``; ``{}`` when unknown."""
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        name = frame.f_code.co_name
        if name.startswith("run_") and name.endswith("_process"):
            ctx = {"role": name[len("run_"):-len("_process")]}
            ctx.update({k: frame.f_locals[k] for k in _RANKS if frame.f_locals.get(k) is not None})
            return ctx
        if name == "__init__" and type(frame.f_locals.get("self")).__name__ == "Engine":
            return {"role": "engine"}
        frame = frame.f_back
    return {}


def load() -> None:
    """Activate dsv41_flags in this sglang process (idempotent), add its role and ranks to every
    event, and register the rank consistency guard on ``initialize_model_parallel`` through sglang's
    HookRegistry. A settings error, or in strict mode a drifted or failing armed feature, stops
    the process with SystemExit(3) (sglang swallows a plugin's ordinary exceptions), as the seeds'
    RuntimeError did."""
    from . import activate
    from ._errors import FlagsError

    ctx = caller_context()
    try:
        rt = activate(role=ctx.pop("role", None))
    except FlagsError as exc:
        # sglang's load_plugins() logs and swallows a plugin's Exception, which would boot the
        # engine with no feature armed; SystemExit is not an Exception, so the boot stops here
        sys.stderr.write(f"dsv41_flags: stopping this sglang process: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(3) from exc
    role = rt.context.fields.get("role")
    rt.context.update(**ctx)
    # only schedulers initialise the model-parallel world; elsewhere the hook would only cost an
    # import of sglang's parallel_state
    if not rt.guard_registered and role not in ("engine", "detokenizer", "data_parallel_controller"):
        from ._guard import register_sglang_guard

        rt.guard_registered = register_sglang_guard(rt)
