"""The engine's plugin entry under its former name.

The entry itself lives in the engine adapter room (``EngineAdapter.plugin_entry``, declared in
pyproject for the engine's plugin group). This module stays so that an environment installed
before the move, whose metadata still names ``dsv41_flags._plugin:load``, keeps activating.
"""
from __future__ import annotations


def load() -> None:
    """Call the engine adapter's plugin entry (``_engine.EngineAdapter.plugin_entry``). When the
    package or its adapter cannot even be loaded, say so on stderr and, unless ``DSV41_STRICT`` is
    off, stop the process (exit 3): the engine's loader would swallow an exception and boot with
    nothing applied."""
    try:
        from ._engine import adapter

        entry = adapter().plugin_entry
    except Exception as exc:
        from ._errors import stop_unloadable

        stop_unloadable("loading the engine adapter", exc)
        return
    entry()
