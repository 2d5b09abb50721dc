"""sglang plugin entry point (group ``sglang.srt.plugins``).

sglang 0.5.23 calls ``load_plugins()`` in the main process and at the start of every scheduler,
detokenizer and data-parallel controller process (all started with ``spawn``); each call lands
here and activates the framework once per process, from the launch's snapshot when present.
"""
from __future__ import annotations


def load() -> None:
    """Activate dsv41_flags in this sglang process (once), with its role and ranks read from the
    calling ``run_<role>_process`` frame BEFORE activating, so every event from ``flags.resolved``
    on carries them; then register the rank consistency guard on ``initialize_model_parallel``
    through sglang's HookRegistry (schedulers only).

    Error policy (``_activation.fail``): any exception while activating, not only FlagsError,
    emits ``flags.error`` (entry ``sglang-plugin``); in strict mode the process stops with
    ``SystemExit(3)``: sglang's ``load_plugins()`` logs and swallows a plugin's ``Exception``
    ("Failed to execute general plugin") and would boot with nothing armed; SystemExit is not an
    Exception, so the boot stops here. Non-strict: the process runs, the event says what is on."""
    import os
    import sys

    try:
        from . import _sglang
        from ._activation import EXIT_STRICT, activate_entry, fail
    except Exception as exc:  # the package itself is broken here: no event possible
        sys.stderr.write(f"dsv41_flags: flags.error pid={os.getpid()} entry=plugin importing "
                         f"dsv41_flags raised {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        if os.environ.get("DSV41_STRICT", "").strip().lower() in ("0", "false", "off", "no"):
            return
        raise SystemExit(3) from None

    try:
        ctx = _sglang.caller_context()
    except Exception:  # an unexpected frame shape: role and ranks unknown, activation goes on
        ctx = {}
    role = ctx.pop("role", None)
    rt = activate_entry(_sglang.PLUGIN_ENTRY_NAME, role=role, context=ctx)
    # only schedulers initialise the model-parallel world; elsewhere the hook would only cost an
    # import of sglang's parallel_state
    if rt is None:
        # activation failed, non-strict: this rank still registers the guard (with no runtime)
        # so it joins the ranks' all_gather; otherwise the other ranks would block in it
        if role in _sglang.NO_GUARD_ROLES or not _guard_once():
            return
        reason = _failure_reason()
        try:
            from ._guard import register_sglang_guard

            register_sglang_guard(None, reason=reason)
        except Exception as exc:
            fail(exc, _sglang.PLUGIN_ENTRY_NAME, role, ctx)  # non-strict here: it runs on
        return
    if any(f.live for f in rt.features.values()):
        # live switches over sglang's RPC path: methods on Scheduler, routes on the HTTP app
        try:
            _sglang.arm_live(rt)
        except Exception as exc:
            if fail(exc, _sglang.PLUGIN_ENTRY_NAME, role, ctx):
                raise SystemExit(EXIT_STRICT) from None
    if rt.guard_registered or rt.context.fields.get("role") in _sglang.NO_GUARD_ROLES:
        return
    try:
        from ._guard import register_sglang_guard

        rt.guard_registered = register_sglang_guard(rt)
    except Exception as exc:
        if fail(exc, _sglang.PLUGIN_ENTRY_NAME, role, ctx):
            raise SystemExit(EXIT_STRICT) from None


_NO_RUNTIME_GUARD: list[int] = []  # pids where the no-runtime guard is registered


def _guard_once() -> bool:
    """True the first time in this process (``load_plugins()`` may call ``load`` again)."""
    import os

    if os.getpid() in _NO_RUNTIME_GUARD:
        return False
    _NO_RUNTIME_GUARD.append(os.getpid())
    return True


def _failure_reason() -> str:
    """Why this process has no runtime (the latched activation error), for the guard's view."""
    from ._activation import process_state

    failed = process_state()[1]
    if failed is None:
        return "activation failed"
    exc = failed[1]
    exc = exc.__cause__ if exc.__cause__ is not None and type(exc).__name__ == "ActivationError" else exc
    return f"{type(exc).__name__}: {exc}"[:300]
