"""Server tier: a real ``python -m sglang.launch_server`` (sglang 0.5.23, CPU) driven from outside.

Each test module boots its launches once (module-scoped fixtures) and stops them at its end, so
at most one module's servers hold memory at a time. The session's ``kit`` (platform plugin, tiny
model, HOME and caches, settings) is shared by every launch: the inductor cache the first boot
compiles serves the later ones.
"""
from __future__ import annotations

import importlib.util

import pytest

from ._server import Kit


@pytest.hookimpl(trylast=True)  # after -m / -k deselected: only the selected items count
def pytest_collection_modifyitems(config, items):
    """Refuse to run the tier without the engine: a skipped server tier would look green.
    Select the other tiers alone with ``-m "not server"`` or ``tests/unit``."""
    if importlib.util.find_spec("sglang") is not None:
        return
    if any(item.get_closest_marker("server") is not None for item in items):
        raise pytest.UsageError("server tier selected but sglang is not installed in this "
                                "interpreter: run ./dev test (it builds .venv), or -m 'not server'")


@pytest.fixture(scope="session")
def kit(tmp_path_factory) -> Kit:
    kit = Kit(tmp_path_factory.mktemp("server_tier"))
    if not kit.cli.is_file():
        pytest.fail(f"no dsv41-flags command beside this interpreter ({kit.cli}): install the "
                    f"package in this environment (./dev setup)")
    return kit
