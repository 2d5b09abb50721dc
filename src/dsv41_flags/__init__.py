"""dsv41_flags: runtime-configurable feature flags for patches applied to a running SGLang engine.

Public API: ``Feature``, ``Option``, ``activate``, ``runtime``, ``Runtime``, ``FeatureState``,
``InstallContext``, the error classes, and the fingerprint/sidecar helpers (``read_sidecar``,
``write_sidecar``, ``sidecar_path``, ``sidecar_matches``, ``payload_diff``, ``clean_stale_temps``,
``SymlinkRefused``) that features keeping caches use. Every other module is
an implementation detail.
"""
from __future__ import annotations

from ._declare import Feature, Option
from ._activation import activate, runtime
from ._errors import (ActivationError, DeclarationError, DriftError, FlagsError, Problem,
                      SettingsError, SnapshotError)
from ._fingerprint import (Fingerprint, Sidecar, SymlinkRefused, clean_stale_temps, read_sidecar,
                           sidecar_path, write_sidecar)
from ._fingerprint import diff as payload_diff, matches as sidecar_matches
from ._patch import InstallContext
from ._runtime import FeatureState, Runtime

__all__ = ["Feature", "Option", "activate", "runtime", "Runtime", "FeatureState", "InstallContext",
           "FlagsError", "DeclarationError", "SettingsError", "DriftError", "SnapshotError",
           "ActivationError", "Problem",
           "Fingerprint", "Sidecar", "read_sidecar", "write_sidecar", "sidecar_path", "sidecar_matches",
           "payload_diff", "clean_stale_temps", "SymlinkRefused"]
