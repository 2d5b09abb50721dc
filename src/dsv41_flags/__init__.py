"""dsv41_flags: runtime-configurable feature flags for patches applied to a running SGLang engine.

Public API: ``Feature``, ``Option``, ``activate``, ``runtime``, ``Runtime``, ``FeatureState``,
``InstallContext``, the error classes, the fingerprint/sidecar helpers (``read_sidecar``,
``write_sidecar``, ``sidecar_path``, ``sidecar_matches``, ``payload_diff``, ``clean_stale_temps``,
``SymlinkRefused``, ``read_regular``) that features keeping caches use, and the live switches (``Runtime.switch``,
``Toggle``, ``switch_engine`` / ``engine_status`` for an offline sglang Engine). Every other module is
an implementation detail.
"""
from __future__ import annotations

from ._declare import Feature, Option
from ._activation import activate, runtime
from ._errors import (ActivationError, DeclarationError, DriftError, FlagsError, Problem,
                      SettingsError, SnapshotError)
from ._files import read_regular
from ._fingerprint import (Fingerprint, Sidecar, SymlinkRefused, clean_stale_temps,
                           read_sidecar, sidecar_path, write_sidecar)
from ._fingerprint import diff as payload_diff, matches as sidecar_matches
from ._live import NotLiveError, SwitchError, Toggle
from ._patch import InstallContext
from ._runtime import FeatureState, Runtime

__all__ = ["Feature", "Option", "activate", "runtime", "Runtime", "FeatureState", "InstallContext",
           "FlagsError", "DeclarationError", "SettingsError", "DriftError", "SnapshotError",
           "ActivationError", "Problem",
           "Fingerprint", "Sidecar", "read_sidecar", "write_sidecar", "sidecar_path", "sidecar_matches",
           "payload_diff", "clean_stale_temps", "SymlinkRefused", "read_regular",
           "SwitchError", "NotLiveError", "Toggle", "switch_engine", "engine_status"]


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
