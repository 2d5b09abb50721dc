"""Engine tier: the real sglang 0.5.23 / flashinfer 0.7.2 / torch on CPU.

Nothing here stubs an engine module. A test module of this tier imports its target once (about
8 s) and groups its tests around that import; the autotune tests run their ranks in spawned
processes, each of which imports the target once.
"""
from __future__ import annotations

import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    """Refuse to run the tier without the engine: a skipped engine tier would look green.
    Select the unit tier alone with ``-m "not engine"`` or ``tests/unit``."""
    if importlib.util.find_spec("sglang") is not None:
        return
    if any("engine" in item.keywords for item in items):
        raise pytest.UsageError("engine tier selected but sglang is not installed in this "
                                "interpreter: run ./dev test (it builds .venv), or -m 'not engine'")
