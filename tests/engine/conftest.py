"""Engine tier: the real sglang 0.5.23 / flashinfer 0.7.2 / torch on CPU.

Nothing here stubs an engine module. A test module of this tier imports its target once (about
8 s) and groups its tests around that import; the autotune tests run their ranks in spawned
processes, each of which imports the target once.
"""
from __future__ import annotations

import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    """Skip (not fail) the tier when the engine is not installed in this interpreter."""
    if importlib.util.find_spec("sglang") is not None:
        return
    skip = pytest.mark.skip(reason="engine tier: sglang is not installed (use .venv/bin/python)")
    for item in items:
        if "engine" in item.keywords:
            item.add_marker(skip)
