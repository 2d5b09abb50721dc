"""The per-process runtime: the one mutable object of the framework.

``activate()`` resolves (or reads the launch's snapshot), configures structlog, discovers the
features, arms the ones whose flag is on (a post-import hook per target) and emits
``flags.resolved``. The hooks run the drift check, then ``install(module, ctx)``, and emit
``feature.installed`` / ``feature.drifted`` / ``feature.failed``.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import _settings
from ._declare import Feature
from ._discovery import discover, install_order
from ._drift import fixed_upstream, missing_on, version_problem
from ._errors import DriftError, FlagsError
from ._events import HEALTH as LOG_HEALTH, ProcessContext, configure, get_logger
from ._fingerprint import Fingerprint, compute
from ._hooks import register_post_import_hook
from ._patch import InstallContext, Ledger
from ._names import SNAPSHOT_VAR
from ._resolution import Resolution

SNAPSHOT_VERSION = 1
STRICT_HINT = "strict mode: set strict = false in settings.toml or DSV41_STRICT=0 to go on"


@dataclass(frozen=True)
class FeatureState:
    """One feature's state in this process.

    state: off | armed | installed | drifted | failed | pending | fixed-upstream | lost |
    uninstalled;
    value / source: the resolved flag; target: module name; detail: missing names, the error, or
    the reason; duration_ms: install time (installed only); patches: ``Owner.attr`` patched.
    """

    name: str
    state: str
    value: Any
    source: str
    target: str
    detail: str = ""
    duration_ms: float | None = None
    patches: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return {"name": self.name, "state": self.state, "value": self.value, "source": self.source,
                "target": self.target, "detail": self.detail, "duration_ms": self.duration_ms,
                "patches": list(self.patches)}


def default_features_dir(reserved: Mapping[str, Any], files: Sequence[Path]) -> Path:
    """``FEATURES_DIR`` when set, else ``features/`` beside the first settings file when it exists,
    else the features shipped in the package (``dsv41_flags/_data/features``)."""
    if reserved.get("FEATURES_DIR"):
        return Path(reserved["FEATURES_DIR"])
    for f in files:
        if (f.parent / "features").is_dir():
            return f.parent / "features"
    return _settings.PROJECT_SETTINGS.parent / "features"


class Runtime:
    """Per-process runtime. Build it with ``activate()``; tests may build one directly.

    features: name -> Feature; resolution: Resolution; fingerprint: Fingerprint;
    from_snapshot: True when values came from the launch's snapshot.
    """

    def __init__(self, features: Sequence[Feature], resolution: Resolution, fingerprint: Fingerprint,
                 *, features_dir: Path | None = None, from_snapshot: bool = False,
                 context: ProcessContext | None = None):
        self.features = {f.name: f for f in install_order(features)}
        self.resolution = resolution
        self.fingerprint = fingerprint
        self.features_dir = features_dir
        self.from_snapshot = from_snapshot
        self.context = context or ProcessContext()
        self.ledger = Ledger()
        self._states: dict[str, FeatureState] = {}
        self._hooked: set[str] = set()
        self._disarmed: set[str] = set()  # features whose pending hook must not install any more
        self.pid = os.getpid()
        self.guard_registered = False
        self.snapshot_notes: list[str] = []
        self.launch_pid: int | None = self.pid  # pid of the process that resolved this launch
        self.launch_env: dict[str, str] = {}    # its DSV41_* variables (set by build)
        self.entry_points = {tuple(f.entry_point) for f in features if f.entry_point}

    # ------------------------------------------------------------------ events
    @property
    def log(self):
        """The framework logger: this runtime's ``context`` is added to every event by a
        processor (pid, process, role, ranks as they are when the event is emitted); it never
        raises (see ``_events``)."""
        return get_logger(self.context)

    # ------------------------------------------------------------------ flags
    @property
    def strict(self) -> bool:
        """Strict mode of this launch (the STRICT setting, default True)."""
        return self.resolution.strict

    def value(self, feature: Feature) -> bool:
        """Resolved flag of ``feature`` (False for a feature unknown to the snapshot)."""
        resolved = self.resolution.values.get(feature.flag)
        return bool(resolved.value) if resolved else False

    def source(self, feature: Feature) -> str:
        """Where the flag's value came from (``default`` / ``<file> [<section>]`` / ``env DSV41_X``)."""
        resolved = self.resolution.values.get(feature.flag)
        return resolved.source if resolved else "not in snapshot"

    def options(self, feature: Feature) -> dict[str, Any]:
        """Option name -> resolved value."""
        return {o.name: (self.resolution.values[feature.option_key(o)].value
                         if feature.option_key(o) in self.resolution.values else o.default)
                for o in feature.options}

    def option_report(self, feature: Feature) -> dict[str, dict[str, Any]]:
        """Option name -> ``{"value", "source"}`` (source as for flags; ``default`` for an option
        the snapshot does not know)."""
        out = {}
        for o in feature.options:
            r = self.resolution.values.get(feature.option_key(o))
            out[o.name] = ({"value": r.value, "source": r.source} if r is not None
                           else {"value": o.default, "source": "default"})
        return out

    def armed(self) -> list[Feature]:
        """Features whose flag is on, in install order."""
        return [f for f in self.features.values() if self.value(f)]

    # ------------------------------------------------------------------ install
    def _set(self, feature: Feature, state: str, **kw) -> FeatureState:
        st = FeatureState(feature.name, state, self.value(feature), self.source(feature),
                          feature.target, **kw)
        self._states[feature.name] = st
        return st

    def gate(self, feature: Feature) -> tuple[str, str]:
        """The state rule before any target is imported, ``(state, detail)``: ``off`` (flag off),
        ``fixed-upstream`` (the installed engine is in ``fixed_in``; detail says why) or
        ``armed``. The one place that decides it: ``arm`` acts on it, ``preview`` reports it."""
        if not self.value(feature):
            return "off", ""
        reason = fixed_upstream(feature)
        return ("fixed-upstream", reason) if reason else ("armed", "")

    def preview(self, missing: Mapping[str, Sequence[str]]) -> list[FeatureState]:
        """The state each feature would reach at boot before its target is imported (what
        ``dsv41-flags status`` shows), without arming anything: ``gate``'s state, and ``drifted``
        for an armed feature whose ``missing[name]`` (drift found without importing: the static
        check and the engine version) is not empty. Install order; nothing is recorded."""
        out = []
        for feature in self.features.values():
            state, detail = self.gate(feature)
            if state == "armed" and missing.get(feature.name):
                state, detail = "drifted", "; ".join(missing[feature.name])
            out.append(FeatureState(feature.name, state, self.value(feature), self.source(feature),
                                    feature.target, detail=detail))
        return out

    def arm(self) -> None:
        """Register a post-import hook on the target of every armed feature (fires at once if the
        target is already imported). A feature whose engine is in its ``fixed_in`` range is
        skipped (state ``fixed-upstream``). Raises DriftError in strict mode when an install that
        fires at once drifts or fails."""
        for feature in self.features.values():
            state, reason = self.gate(feature)
            if state == "off":
                self._set(feature, "off")
                continue
            if state == "fixed-upstream":
                self._set(feature, "fixed-upstream", detail=reason)
                self.log.info("feature.fixed_upstream", feature=feature.name, target=feature.target,
                              reason=reason)
                continue
            self._disarmed.discard(feature.name)
            if feature.name in self._hooked:
                continue
            self._hooked.add(feature.name)
            self._set(feature, "armed")
            register_post_import_hook(lambda module, f=feature: self._fire(f, module), feature.target)

    def _fire(self, feature: Feature, module) -> None:
        """The post-import hook of ``feature``: install unless disarmed since."""
        if feature.name not in self._disarmed:
            self.install(feature, module)

    def install(self, feature: Feature, module) -> FeatureState:
        """Drift-check and install ``feature`` on the imported ``module``.

        Returns the new state. In strict mode raises DriftError naming the feature, the target and
        what is missing (drift) or what raised (failure); otherwise the failure is logged with its
        traceback and other features go on.
        """
        start = time.perf_counter()
        missing = missing_on(feature, module)
        bad_version = version_problem(feature)
        if bad_version:
            missing.insert(0, bad_version)
        if missing:
            st = self._set(feature, "drifted", detail="; ".join(missing))
            self.log.error("feature.drifted", feature=feature.name, target=feature.target,
                           missing=missing, strict=self.strict)
            if self.strict:
                raise DriftError(f"feature {feature.name!r}: target {feature.target} drifted: missing "
                                 f"{', '.join(missing)} ({STRICT_HINT})")
            return st
        ctx = InstallContext(feature, self.options(feature), self.fingerprint,
                             self.log.bind(feature=feature.name), self.ledger)
        try:
            feature.install(module, ctx)
        except Exception as exc:
            self.ledger.uninstall(feature.name)  # roll back what the failed install patched
            st = self._set(feature, "failed", detail=f"{type(exc).__name__}: {exc}")
            self.log.error("feature.failed", feature=feature.name, target=feature.target,
                           error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(),
                           strict=self.strict)
            if self.strict:
                raise DriftError(f"feature {feature.name!r}: install on {feature.target} raised "
                                 f"{type(exc).__name__}: {exc} ({STRICT_HINT})") from exc
            return st
        records = self.ledger.records(feature.name)
        duration_ms = round((time.perf_counter() - start) * 1000, 3)
        st = self._set(feature, "installed", duration_ms=duration_ms,
                       patches=tuple(r.where for r in records))
        self.log.info("feature.installed", feature=feature.name, target=feature.target,
                      duration_ms=duration_ms, patches=list(st.patches))
        for record in records:
            stack = self.ledger.stack(record.owner, record.attr)
            if len(stack) > 1:
                self.log.warning("feature.conflict", feature=feature.name, attribute=record.where,
                                 order=[r.feature for r in stack])
        return st

    def uninstall(self, name: str | None = None) -> None:
        """Restore the originals patched by feature ``name`` (every feature when None), last
        installed first. A feature becomes ``uninstalled`` (its hook will not fire again); one
        whose patch has another feature's patch on top stays ``installed`` and
        ``feature.uninstall_blocked`` names the features above it."""
        for feature in reversed(list(self.features.values())):
            if name is None or feature.name == name:
                self._disarmed.add(feature.name)  # a hook whose target was never imported too
                kept = self.ledger.uninstall(feature.name)
                st = self._states.get(feature.name)
                if kept:
                    self.log.warning("feature.uninstall_blocked", feature=feature.name,
                                     attributes=[r.where for r in kept],
                                     above=sorted({x.feature for r in kept
                                                   for x in self.ledger.stack(r.owner, r.attr)
                                                   if x.feature != feature.name}))
                elif st is not None and st.state in ("installed", "lost"):
                    self._set(feature, "uninstalled")

    # ------------------------------------------------------------------ report
    def states(self) -> list[FeatureState]:
        """Per feature (install order): name, state, flag value, source, target."""
        return [self._states.get(f.name) or self._set(f, "armed" if self.value(f) else "off")
                for f in self.features.values()]

    def audit(self) -> list[FeatureState]:
        """Re-check every feature: an armed feature whose target was never imported becomes
        ``pending``; an installed one whose patched attribute no longer holds our replacement
        becomes ``lost``. Emits ``feature.pending`` / ``feature.lost``; returns ``states()``."""
        for feature in self.features.values():
            st = self._states.get(feature.name)
            if st is None:
                continue
            if st.state in ("armed", "pending") and feature.target not in sys.modules:
                self._set(feature, "pending")
                self.log.warning("feature.pending", feature=feature.name, target=feature.target)
            elif st.state == "installed":
                lost = self.ledger.lost(feature.name)
                if lost:
                    self._set(feature, "lost", detail=", ".join(r.where for r in lost))
                    self.log.error("feature.lost", feature=feature.name, target=feature.target,
                                   attributes=[r.where for r in lost])
        return self.states()

    def report(self) -> dict:
        """The ``flags.resolved`` payload."""
        return {
            "profile": self.resolution.profile,
            "settings_files": list(self.resolution.files),
            "from_snapshot": self.from_snapshot,
            "features": {f.name: {"value": self.value(f), "source": self.source(f),
                                  "options": self.option_report(f)}
                         for f in self.features.values()},
            "armed": [f.name for f in self.armed()],
            "fingerprint": self.fingerprint.digest,
            "notes": list(self.resolution.notes),
            "warnings": [p.message for p in self.resolution.warnings],
            **({"log_errors": LOG_HEALTH.as_dict()} if LOG_HEALTH.failures else {}),
        }

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> str:
        """JSON handed to children in ``DSV41_SNAPSHOT``: resolution, fingerprint, features dir."""
        return json.dumps({"v": SNAPSHOT_VERSION, "pid": os.getpid(), "env": self.launch_env,
                           "resolution": self.resolution.to_dict(),
                           "fingerprint": self.fingerprint.to_dict(),
                           "features_dir": str(self.features_dir) if self.features_dir else None,
                           "entry_points": [list(p) for p in sorted(self.entry_points)]},
                          separators=(",", ":"))


def _read_snapshot(raw: str) -> dict | None:
    try:
        data = json.loads(raw)
        if data.get("v") == SNAPSHOT_VERSION:
            return data
    except (ValueError, AttributeError):
        pass
    return None


def build(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
          environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
          features_dir: Path | None = None, *, use_snapshot: bool = True,
          configure_logging: bool = True) -> Runtime:
    """Resolve and build a Runtime without arming anything (used by ``activate`` and the CLI).

    With ``use_snapshot`` and a valid ``DSV41_SNAPSHOT`` (and no explicit files/profile), the
    snapshot's resolution and fingerprint are used and no settings file is read.
    Raises SettingsError (every problem listed) or DeclarationError.
    """
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    use = use_snapshot and settings_files is None and profile is None
    snap = _read_snapshot(environ.get(SNAPSHOT_VAR, "")) if use else None
    snapshot_notes: list[str] = []
    if use and snap is None and environ.get(SNAPSHOT_VAR):
        snapshot_notes.append(f"{SNAPSHOT_VAR} is not a dsv41_flags snapshot (version "
                              f"{SNAPSHOT_VERSION}): ignored, settings resolved in this process")
    if snap is not None:
        resolution = Resolution.from_dict(snap["resolution"])
        if configure_logging:
            configure(resolution.reserved.get("LOG_FORMAT", "auto"),
                      resolution.reserved.get("LOG_LEVEL", "info"))
        fdir = features_dir or (Path(snap["features_dir"]) if snap.get("features_dir") else None)
        features = discover(fdir, entry_points=[tuple(p) for p in snap.get("entry_points", [])],
                            checked=True)
        rt = Runtime(features, resolution, Fingerprint.from_dict(snap["fingerprint"]),
                     features_dir=fdir, from_snapshot=True)
        rt.launch_env = dict(snap.get("env", {}))
        rt.snapshot_notes = snapshot_differences(rt.launch_env, environ)
        rt.launch_pid = snap.get("pid")
        return rt
    features, resolution, fdir = resolve_launch(settings_files, profile, environ, features_dir,
                                                configure_logging=configure_logging)
    resolution.raise_for_errors()
    fingerprint = compute(resolution, features, argv, environ)
    rt = Runtime(features, resolution, fingerprint, features_dir=fdir)
    rt.snapshot_notes = snapshot_notes
    rt.launch_env = _dsv41_vars(environ)
    return rt


def _dsv41_vars(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("DSV41_") and k != SNAPSHOT_VAR}


def snapshot_differences(launch_env: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """Sentences for every ``DSV41_*`` variable (flags, options and reserved names alike) of this
    process that differs from the launching process's (the snapshot wins: one launch, one
    resolution; these say so instead of staying silent)."""
    here = _dsv41_vars(environ)
    out = []
    for name in sorted(set(here) | set(launch_env)):
        mine, theirs = here.get(name), launch_env.get(name)
        if mine == theirs:
            continue
        if mine is None:
            out.append(f"{name} is not set here, but the launch's snapshot was resolved with "
                       f"{name}={theirs!r}: the snapshot is used (a DSV41_SNAPSHOT left over from "
                       f"another launch? unset it)")
        else:
            out.append(f"{name}={mine!r} here, but the launch's snapshot was resolved with "
                       f"{'it unset' if theirs is None else f'{name}={theirs!r}'}: the snapshot is used")
    return out


def resolve_launch(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
                   environ: Mapping[str, str] | None = None, features_dir: Path | None = None, *,
                   configure_logging: bool = False) -> tuple[tuple[Feature, ...], Resolution, Path]:
    """Find and load the settings files, discover the features, resolve every key.

    Returns ``(features, resolution, features_dir)``; value problems and unknown keys are in
    ``resolution.problems`` (not raised). Raises SettingsError for a missing/unreadable settings
    file or an unknown profile, DeclarationError for bad feature declarations.
    """
    environ = os.environ if environ is None else environ
    files, _how = _settings.find_settings_files(settings_files, environ)
    settings, prof, profiles, notes = _settings.load(files, profile, environ)
    # reserved settings first: logging is configured before any feature module is imported
    reserved = _settings.reserved_settings(settings, environ)
    if configure_logging:
        configure(reserved["LOG_FORMAT"], reserved["LOG_LEVEL"])
    fdir = features_dir or default_features_dir(reserved, [Path(f) for f in files])
    if reserved.get("FEATURES_DIR") and not fdir.is_dir():
        from ._errors import Problem, SettingsError

        raise SettingsError([Problem("FEATURES_DIR", "settings", f"features_dir {str(fdir)!r} is not a "
                                     f"directory (set by features_dir / DSV41_FEATURES_DIR; relative "
                                     f"paths are taken from the settings file's directory)")])
    features = discover(fdir)
    resolution = _settings.resolve(settings, prof, profiles, files, features, environ, notes, fdir)
    return features, resolution, fdir
