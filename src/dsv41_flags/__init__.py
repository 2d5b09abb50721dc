"""dsv41_flags: runtime-configurable feature flags for patches applied to a running SGLang engine.

Public API: ``Feature``, ``Option``, ``activate``, ``runtime``, ``Runtime``, ``FeatureState``,
``InstallContext``, the error classes, the fingerprint/sidecar helpers (``read_sidecar``,
``write_sidecar``, ``sidecar_path``, ``sidecar_matches``, ``payload_diff``, ``clean_stale_temps``,
``SymlinkRefused``, ``read_regular``) that features keeping caches use, and the live switches (``Runtime.switch``,
``Toggle``, ``switch_engine`` / ``engine_status`` for an offline sglang Engine). Every other module is
an implementation detail.
"""
from __future__ import annotations

import os as _os
import sys as _sys
from typing import TYPE_CHECKING

#: public name -> the module that defines it. Imported on first use (PEP 562 ``__getattr__``), so
#: ``import dsv41_flags`` costs nothing and a process pays only for what it uses: a child that
#: activates from the snapshot never loads the settings, drift, live-switch or patch rooms until a
#: target is imported (see README "Layout").
_EXPORTS: dict[str, str] = {
    "Feature": "_declare", "Option": "_declare",
    "activate": "_activation", "runtime": "_activation",
    "Runtime": "_runtime", "FeatureState": "_runtime",
    "InstallContext": "_patch",
    "FlagsError": "_errors", "DeclarationError": "_errors", "SettingsError": "_errors",
    "DriftError": "_errors", "SnapshotError": "_errors", "ActivationError": "_errors",
    "Problem": "_errors",
    "Fingerprint": "_fingerprint",
    "Sidecar": "_sidecar", "read_sidecar": "_sidecar", "write_sidecar": "_sidecar",
    "sidecar_path": "_sidecar", "sidecar_matches": "_sidecar:matches", "payload_diff": "_sidecar:diff",
    "clean_stale_temps": "_sidecar", "SymlinkRefused": "_sidecar",
    "read_regular": "_files",
    "SwitchError": "_live", "NotLiveError": "_live", "Toggle": "_live",
}

__all__ = ["Feature", "Option", "activate", "runtime", "Runtime", "FeatureState", "InstallContext",
           "FlagsError", "DeclarationError", "SettingsError", "DriftError", "SnapshotError",
           "ActivationError", "Problem",
           "Fingerprint", "Sidecar", "read_sidecar", "write_sidecar", "sidecar_path", "sidecar_matches",
           "payload_diff", "clean_stale_temps", "SymlinkRefused", "read_regular",
           "SwitchError", "NotLiveError", "Toggle", "switch_engine", "engine_status"]

if TYPE_CHECKING:  # pragma: no cover  (what type checkers and IDEs see)
    from ._activation import activate, runtime
    from ._declare import Feature, Option
    from ._errors import (ActivationError, DeclarationError, DriftError, FlagsError, Problem,
                          SettingsError, SnapshotError)
    from ._files import read_regular
    from ._fingerprint import Fingerprint
    from ._sidecar import (Sidecar, SymlinkRefused, clean_stale_temps, read_sidecar, sidecar_path,
                           write_sidecar)
    from ._sidecar import diff as payload_diff, matches as sidecar_matches
    from ._live import NotLiveError, SwitchError, Toggle
    from ._patch import InstallContext
    from ._runtime import FeatureState, Runtime


def __getattr__(name: str):
    """The public name ``name``, imported from its module on first use and then kept in this
    module's namespace. Raises AttributeError for a name that is not public."""
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'dsv41_flags' has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
    globals()[name] = value
    return value


def _finish_imports_before_fork() -> None:
    """``os.register_at_fork(before=...)``: wait until every module of this package (and the
    version parser it imports where first used) that another thread is importing right now is
    imported. Rooms load where first used, so in any thread at any time (a target's import in a
    worker thread); a child forked in the middle would inherit that module's import lock held by a
    thread it does not have, and hang at its own first use of the room. Nothing is imported that
    is not already being imported; any error is left to the importing thread."""
    import importlib

    for name, module in list(_sys.modules.items()):
        if not (name.startswith("dsv41_flags.") or name.split(".")[0] == "packaging"):
            continue
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            try:
                importlib.import_module(name)  # blocks on its import lock until it is done
            except Exception:
                pass


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(before=_finish_imports_before_fork)


def __dir__() -> list[str]:
    """Module attributes plus every public name (``__all__``)."""
    return sorted(set(globals()) | set(__all__))


def switch_engine(engine, name: str, value, *, requested_by: str = "python", timeout_s: float = 60.0) -> dict:
    """Switch live feature ``name`` (bool or on/off word) on every scheduler rank of an offline
    ``sglang.Engine`` in lockstep, through sglang's collective RPC path. Returns the schedulers'
    answer ``{ok, feature, old, new, generation, step, ranks}``. Raises SwitchError (refused: every
    rank keeps its value; or no answer within ``timeout_s`` seconds) / NotLiveError. Since issue 12.
    """
    from ._engine import adapter

    return adapter().switch(engine, name, value, requested_by=requested_by, timeout_s=timeout_s)


def engine_status(engine, *, timeout_s: float = 60.0) -> dict:
    """Every scheduler rank's feature states, generation and step of an offline ``sglang.Engine``:
    ``{ok, ranks: [...]}`` (the ``status --json`` shape plus rank fields). Since issue 12."""
    from ._engine import adapter

    return adapter().status(engine, timeout_s=timeout_s)
