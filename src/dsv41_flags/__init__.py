"""dsv41_flags: runtime-configurable feature flags for patches applied to a running SGLang engine.

The public API is the names below, plus three modules:

* ``dsv41_flags.live``: switching live-safe features while serving (``Toggle``, ``SwitchError``,
  ``NotLiveError``; the switch itself is ``Runtime.switch``);
* ``dsv41_flags.cache_keeping``: the launch-fingerprint sidecar for features that keep caches
  across boots;
* ``dsv41_flags.engines.sglang``: sglang-only calls (``switch_engine``, ``engine_status``);

and the pytest plugin ``dsv41_flags.testing``. Every other module is internal: see the
architecture page of the docs for what each one holds.
"""
from __future__ import annotations

from dsv41_flags.activation import activate, current_runtime
from dsv41_flags.declare import Feature, Option
from dsv41_flags.errors import (ActivationError, DeclarationError, DriftError, FlagsError,
                                PatchConflict, RestoreError, SettingsError, SnapshotError)
from dsv41_flags.patch import InstallContext
from dsv41_flags.runtime import Runtime
from dsv41_flags.status import FeatureStatus
from dsv41_flags.state import State

__all__ = ["Feature", "Option", "InstallContext", "activate", "current_runtime", "Runtime",
           "FeatureStatus", "State", "FlagsError", "DeclarationError", "SettingsError", "DriftError",
           "SnapshotError", "ActivationError", "RestoreError", "PatchConflict"]
