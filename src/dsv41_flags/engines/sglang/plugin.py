"""The engine plugin loader's entry (pyproject: group ``sglang.srt.plugins``).

It imports nothing at module level: the engine's loader imports this module before calling
``load``, and would swallow (log and go on, nothing applied) an exception raised by an import of
the package's rooms there. ``load`` imports the engine adapter itself, so a package that cannot
load is reported (one ``flags.error`` line) and, in strict mode, stops the process (exit 3). The
work is the adapter's ``plugin_entry`` (``_engine.EngineAdapter``).
"""
from __future__ import annotations


def load() -> None:
    """Call the engine adapter's plugin entry (``_engine.EngineAdapter.plugin_entry``). When the
    package or its adapter cannot even be loaded, say so on stderr and, unless ``DSV41_STRICT`` is
    off, stop the process (exit 3): the engine's loader would swallow an exception and boot with
    nothing applied."""
    try:
        from dsv41_flags.engines import adapter

        entry = adapter().plugin_entry
    except Exception as exc:
        from dsv41_flags.errors import stop_unloadable

        stop_unloadable("loading the engine adapter", exc)
        return
    entry()
