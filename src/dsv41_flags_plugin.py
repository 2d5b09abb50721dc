"""The sglang plugin loader's entry (pyproject: group ``sglang.srt.plugins``): ``load``.

A module of its own, outside the ``dsv41_flags`` package, that imports nothing at module level:
sglang's loader imports it before calling ``load`` and swallows (logs, then boots with nothing
applied) any exception raised by that import. ``load`` imports the package and its engine adapter
itself, so a package that cannot load is reported (one ``flags.error`` line on stderr) and, unless
``DSV41_STRICT`` is off, stops the process with exit status 3. The work itself is the core's
``dsv41_flags.activation.activate_plugin`` with the installed engine adapter.
"""
from __future__ import annotations

import os
import sys


def load() -> None:
    """Activate this engine process (``activate_plugin``). When the package or its engine adapter
    cannot be loaded, ``stop_unloadable`` says so and stops the process."""
    try:
        from dsv41_flags.activation import activate_plugin
        from dsv41_flags.engine import adapter

        engine = adapter()
    except Exception as exc:
        stop_unloadable("loading dsv41_flags and its engine adapter", exc)
        return
    activate_plugin(engine)


def stop_unloadable(what: str, exc: BaseException) -> None:
    """The package or its engine adapter cannot be loaded, so no structured event is possible:
    write one ``flags.error`` line on stderr (``what`` raised ``exc``), then stop the process with
    exit status 3 (SystemExit) unless ``DSV41_STRICT`` is off; returns only then. An engine's
    plugin loader swallows an exception and would boot with nothing applied."""
    line = (f"dsv41_flags: flags.error pid={os.getpid()} entry=plugin {what} raised "
            f"{type(exc).__name__}: {exc}\n")
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except Exception:  # stderr closed, replaced or full: the descriptor, else nothing
        try:
            os.write(2, line.encode("utf-8", "backslashreplace"))
        except OSError:
            pass
    if os.environ.get("DSV41_STRICT", "").strip().lower() in ("0", "false", "off", "no"):
        return
    raise SystemExit(3) from None


#: the platform plugin's entry-point name (pyproject: group ``sglang.srt.platforms``)
CPU_PLATFORM = "dsv41_cpu"


def cpu_platform() -> str | None:
    """sglang's platform-plugin ``activate`` for ``dsv41_flags.engines.sglang.cpu_platform``: the
    class's qualified name when ``SGLANG_PLATFORM`` names this plugin, else None (sglang calls
    every plugin's ``activate`` when ``SGLANG_PLATFORM`` is unset; None keeps this one out)."""
    if os.environ.get("SGLANG_PLATFORM", "").strip() != CPU_PLATFORM:
        return None
    return "dsv41_flags.engines.sglang.cpu_platform:CpuPlatform"
