"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Launch assembly: a ``Runtime`` built (``build``) from the launch's snapshot in a child of a
launch, else from the settings files, the environment and the discovered features
(``resolve_launch``). The settings loader (Dynaconf) is imported only while a launch is resolved,
before any feature is armed: a child activating from the launch's snapshot never loads it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.discovery import discover
from dsv41_flags.errors import FlagsError, Problem, SettingsError, SnapshotError
from dsv41_flags.fingerprint import compute, own_argv
from dsv41_flags.logs import ProcessContext, configure
from dsv41_flags.names import ENV_PREFIX, LAUNCH_VAR, SNAPSHOT_VAR
from dsv41_flags.resolution import Resolution
from dsv41_flags.runtime import Runtime
from dsv41_flags.secrecy import is_secret, secret_names
from dsv41_flags.snapshot import Launch, read as read_snapshot
from dsv41_flags.text import quoted


def default_features_dir(reserved: Mapping[str, Any], files: Sequence[Path]) -> Path:
    """The local features directory: ``FEATURES_DIR`` when set, else ``features/`` beside the
    first settings file when it exists, else the features shipped in the package
    (``dsv41_flags/_data/features``). Its features ADD to the shipped ones and the installed
    entry points (``discovery.discover``)."""
    if reserved.get("FEATURES_DIR"):
        return Path(reserved["FEATURES_DIR"])
    for f in files:
        if (f.parent / "features").is_dir():
            return f.parent / "features"
    import dsv41_flags.settings as settings  # see the module's docstring

    return settings.PROJECT_SETTINGS.parent / "features"


def build(settings_files: Sequence[str | os.PathLike] | None = None, profile: str | None = None,
          environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
          features_dir: Path | None = None, *, use_snapshot: bool = True,
          configure_logging: bool = True, context: ProcessContext | None = None) -> Runtime:
    """Resolve and build a Runtime without arming anything (used by ``activate`` and the CLI).

    With ``use_snapshot`` and a ``DSV41_SNAPSHOT`` (and no explicit files/profile), the launch is
    decoded from the snapshot (``snapshot``: schema, types, re-cast values, installed entry points,
    feature file digests) and no settings file is read. A refused snapshot, or none in a child of
    a launch (``DSV41_LAUNCH`` set without it): the settings are resolved in this process; in
    strict mode (of that resolution) SnapshotError is raised, else the runtime is built from the
    local resolution and ``snapshot_refused`` says why (``snapshot.refused`` event).
    ``configure_logging``: structlog is configured before any feature module runs, from the
    snapshot's or the settings' log format and level, with ``context`` (pid, process, role; the
    runtime's ``context``) on every line, so a process's log format holds from its first line.
    Raises SettingsError (every problem listed), DeclarationError or SnapshotError.
    """
    environ = os.environ if environ is None else environ
    settings_files = settings_file_list(settings_files)
    context = context if context is not None else ProcessContext()
    use = use_snapshot and settings_files is None and profile is None
    raw = environ.get(SNAPSHOT_VAR, "") if use else ""
    refused: SnapshotError | None = None
    if use and not raw and environ.get(LAUNCH_VAR):
        refused = SnapshotError(
            f"{SNAPSHOT_VAR} is missing, but {LAUNCH_VAR}={environ[LAUNCH_VAR][:120]!r} says this "
            f"process is a child of a launch (launching pid and fingerprint): the launch's "
            f"settings did not reach it (an environment filtered on the way?); pass "
            f"{SNAPSHOT_VAR} on, or unset {LAUNCH_VAR} to resolve this process on its own")

    def configure_from_snapshot(reserved: Mapping[str, Any], launch_pid: int | None) -> None:
        context.fields.setdefault("role", "launcher" if launch_pid == os.getpid() else "child")
        if configure_logging:
            configure(reserved["LOG_FORMAT"], reserved["LOG_LEVEL"], context=context)

    if raw:
        try:
            launch, features = read_snapshot(raw, before_feature_code=configure_from_snapshot)
        except SnapshotError as exc:
            refused = exc
        else:
            rt = Runtime(features, launch, from_snapshot=True, context=context)
            rt.snapshot_notes = snapshot_differences(launch.env, environ)
            marker = environ.get(LAUNCH_VAR)
            if marker is not None and marker != rt.launch_marker():
                rt.snapshot_notes.append(
                    f"{LAUNCH_VAR}={quoted(marker)} does not name the launch of {SNAPSHOT_VAR} "
                    f"({rt.launch_marker()[:24]}...): a variable left over from another launch, "
                    f"or set by hand; this process runs the snapshot's launch")
            return rt
    if refused is not None:  # the refused text is never read again (Dynaconf would parse it)
        environ = {k: v for k, v in environ.items() if k != SNAPSHOT_VAR}
    context.fields.setdefault("role", "launcher")
    try:
        features, resolution, fdir = resolve_launch(settings_files, profile, environ, features_dir,
                                                    configure_logging=configure_logging,
                                                    context=context)
        if argv is None:
            argv = own_argv()
        if resolution.reserved.get("FLEET") and not resolution.errors:
            resolution = fleet_boot(resolution, features, argv, environ)
        resolution.raise_for_errors()
    except FlagsError as exc:
        if refused is not None:
            raise SnapshotError(f"{refused}; resolving the settings in this process instead failed "
                                f"too: {exc}") from exc
        raise
    if refused is not None and resolution.strict:
        raise refused
    fingerprint = compute(resolution, features, argv, environ)
    rt = Runtime(features, Launch.of(resolution, fingerprint, features, fdir, _dsv41_vars(environ)),
                 context=context)
    if refused is not None:
        theirs = environ.get(LAUNCH_VAR, "").partition(":")[2]
        differs = (f"; its fingerprint {fingerprint.digest[:12]}... differs from the launch's "
                   f"{theirs[:12]}..." if theirs and theirs != fingerprint.digest else "")
        rt.snapshot_refused = (f"{refused}: strict = false, so the settings were resolved in this "
                               f"process instead (the launch's values may differ from these"
                               f"{differs})")
    return rt


def fleet_boot(resolution: Resolution, features: Sequence[Feature], argv: Sequence[str],
               environ: Mapping[str, str]) -> Resolution:
    """``resolution`` with the flag service's values read once (``fleet.boot``), the evaluation
    context naming this launch (the engine's ``fleet_context`` of ``argv``, the fingerprint of
    the settings before the fleet's values)."""
    from dsv41_flags.engine import adapter
    from dsv41_flags.fleet import boot

    facts = adapter().fleet_context(list(argv))
    settings_fingerprint = compute(resolution, features, argv, environ).digest
    return boot(resolution, features, facts, environ, settings_fingerprint)


def settings_file_list(value: Any) -> list[str] | None:
    """``settings_files`` as given to ``activate`` / ``build``: None (search as usual), one path
    (``str`` or ``os.PathLike``) or a list or tuple of paths; returns a list of ``str`` paths (or
    None). Raises SettingsError naming the argument, its value and what is accepted for anything
    else (a ``str`` is one path, never a sequence of one-letter paths; an ``os.PathLike`` whose
    ``__fspath__`` raises or gives no ``str`` is refused the same way)."""
    if value is None:
        return None
    items = [value] if isinstance(value, (str, os.PathLike)) else (
        list(value) if isinstance(value, (list, tuple)) else None)
    paths = []
    for item in items or ():
        try:
            path = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        except Exception:  # a hostile __fspath__
            path = None
        if not isinstance(path, str):
            items = None
            break
        paths.append(path)
    if items is None:
        try:
            shown = repr(value)
        except Exception:
            shown = f"<{type(value).__name__} whose repr raised>"
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise SettingsError([Problem("SETTINGS", "argument settings_files", (
            f"settings_files={shown} is not accepted: give one path (str or os.PathLike), a list "
            f"or tuple of paths, or None to search for settings.toml as usual"))])
    return paths


def _dsv41_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``DSV41_*`` variables a snapshot records: neither ``DSV41_SNAPSHOT``, ``DSV41_LAUNCH``
    nor a secret (``secrecy.is_secret``: ``DSV41_API_KEY`` and the like are kept nowhere)."""
    secrets = secret_names()
    return {k: v for k, v in environ.items()
            if k.startswith(ENV_PREFIX) and k not in (SNAPSHOT_VAR, LAUNCH_VAR)
            and not is_secret(k, secrets)}


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
                   configure_logging: bool = False, context: ProcessContext | None = None,
                   ) -> tuple[tuple[Feature, ...], Resolution, Path]:
    """Find and load the settings files, discover the features, resolve every key.

    Returns ``(features, resolution, features_dir)``; value problems and unknown keys are in
    ``resolution.problems`` (not raised). Raises SettingsError for a missing/unreadable settings
    file or an unknown profile, DeclarationError for bad feature declarations.
    """
    import dsv41_flags.settings as _settings  # see the module's docstring

    environ = os.environ if environ is None else environ
    files, _how = _settings.find_settings_files(settings_files, environ)
    settings, prof, profiles, notes = _settings.load(files, profile, environ)
    # reserved settings first: logging is configured before any feature module is imported
    reserved = _settings.reserved_settings(settings, environ)
    if configure_logging:
        configure(reserved["LOG_FORMAT"], reserved["LOG_LEVEL"], context=context)
    fdir = features_dir or default_features_dir(reserved, [Path(f) for f in files])
    if reserved.get("FEATURES_DIR") and not fdir.is_dir():
        raise SettingsError([Problem("FEATURES_DIR", "settings", f"features_dir {str(fdir)!r} is not a "
                                     f"directory (set by features_dir / DSV41_FEATURES_DIR; relative "
                                     f"paths are taken from the settings file's directory)")])
    features = discover(fdir)
    resolution = _settings.resolve(settings, prof, profiles, files, features, environ, notes, fdir)
    return features, resolution, fdir
