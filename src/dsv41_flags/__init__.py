"""dsv41_flags: runtime-configurable feature flags for patches applied to a running SGLang engine.

Public API: ``Feature``, ``Option``, ``activate``, ``runtime``, ``Runtime``, ``FeatureState``,
``InstallContext``, the error classes, and the fingerprint/sidecar helpers (``read_sidecar``,
``write_sidecar``, ``sidecar_path``, ``sidecar_matches``, ``payload_diff``, ``clean_stale_temps``,
``SymlinkRefused``) that features keeping caches use. Every other module is
an implementation detail.
"""
from __future__ import annotations

import os
from typing import Sequence

from ._declare import Feature, Option
from ._errors import DeclarationError, DriftError, FlagsError, Problem, SettingsError
from ._fingerprint import (Fingerprint, Sidecar, SymlinkRefused, clean_stale_temps, read_sidecar,
                           sidecar_path, write_sidecar)
from ._fingerprint import diff as payload_diff, matches as sidecar_matches
from ._patch import InstallContext
from ._runtime import FeatureState, Runtime, build
from ._names import SNAPSHOT_VAR

__all__ = ["Feature", "Option", "activate", "runtime", "Runtime", "FeatureState", "InstallContext",
           "FlagsError", "DeclarationError", "SettingsError", "DriftError", "Problem",
           "Fingerprint", "Sidecar", "read_sidecar", "write_sidecar", "sidecar_path", "sidecar_matches",
           "payload_diff", "clean_stale_temps", "SymlinkRefused"]

_RUNTIME: Runtime | None = None  # the one per-process runtime


def activate(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
             *, role: str | None = None, export: bool = True) -> Runtime:
    """Activate the framework in this process and return its runtime.

    Idempotent per process: a second call returns the same runtime (arguments given to it are
    ignored, with an ``activate.arguments_ignored`` warning).
    settings_files: paths of settings files (default search: see ``_settings``); profile: profile
    name (default ``DSV41_ENV``, else ``default``); role: process role added to every event;
    export: hand the snapshot to child processes through ``DSV41_SNAPSHOT`` (first process only).
    Emits ``flags.resolved``, then arms the features whose flag is on.
    Raises SettingsError (bad values, unknown keys in strict mode, missing files, unknown profile),
    DeclarationError (bad feature declarations) or, in strict mode, DriftError.
    """
    global _RUNTIME
    if _RUNTIME is not None and _RUNTIME.pid == os.getpid():
        if settings_files is not None or profile is not None:
            _RUNTIME.log.warning("activate.arguments_ignored", settings_files=settings_files,
                                 profile=profile, active_profile=_RUNTIME.resolution.profile,
                                 reason="already active in this process: the first activation wins")
        return _RUNTIME
    rt = build(settings_files, profile)
    # the process that resolved the launch (``dsv41-flags run`` execs into the command: same pid)
    rt.context.update(role=role or ("launcher" if rt.launch_pid == os.getpid() else "child"))
    _RUNTIME = rt
    if export and not rt.from_snapshot:
        os.environ[SNAPSHOT_VAR] = rt.snapshot()
    rt.log.info("flags.resolved", **rt.report())
    for note in rt.snapshot_notes:
        rt.log.warning("snapshot.mismatch", note=note)
    rt.arm()
    return rt


def runtime() -> Runtime | None:
    """The runtime of this process, or None before ``activate``."""
    return _RUNTIME if _RUNTIME is not None and _RUNTIME.pid == os.getpid() else None
