"""The engine's plugin entry under its former name.

The entry itself lives in the engine adapter room (``EngineAdapter.plugin_entry``, declared in
pyproject for the engine's plugin group). This module stays so that an environment installed
before the move, whose metadata still names ``dsv41_flags._plugin:load``, keeps activating.
"""
from __future__ import annotations


def load() -> None:
    """Call the engine adapter's plugin entry (see ``_engine.EngineAdapter.plugin_entry``)."""
    from ._engine import adapter

    adapter().plugin_entry()
