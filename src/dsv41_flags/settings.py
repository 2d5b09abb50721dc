"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Resolution: settings files + profile + ``DSV41_*`` variables -> a typed value per key, with
its source (``declared default``, ``<file> [<section>]`` or ``env DSV41_<KEY>``) and the chain of
every value that was set for it.

Dynaconf's public API (``Dynaconf``, ``get_history``) loads the files that ``settings_files``
found and checked: the profile (an environment: ``[default]`` + the profile), the merge of
``settings.local.toml`` and of nested tables, the provenance of every file value. Each layer of a
key is cast here by its declared type (``values``). ``find_settings_files``, ``PROJECT_SETTINGS``
and ``reread`` are imported here for the callers that resolve a launch.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from dsv41_flags.declare import Feature
from dsv41_flags.names import (DECLARED_DEFAULT, ENV_PREFIX, FLEET_VARIABLE_PREFIX, PROFILE_VAR, RESERVED_KEYS, RESERVED_TYPES, SETTINGS_VAR,  # noqa: F401
                     SNAPSHOT_VAR, suggest)
from dsv41_flags.errors import Problem, SettingsError
from dsv41_flags.text import excerpt, quoted, exception_text
from dsv41_flags.resolution import Resolution, Resolved
from dsv41_flags.secrecy import MASK, is_secret, masked_url, secret_names, shown
from dsv41_flags.settings_files import (DEFAULT_PROFILE, DYNACONF_ACCEPTED, PROJECT_SETTINGS,  # noqa: F401
                                        dynaconf_key, file_literal, find_settings_files,
                                        local_companion, profiles_in, reread)
from dsv41_flags.values import CastError, Kind, cast, cast_bool, check_file_value

#: the operator's ``fingerprint`` table: what settings ADD to the engine adapter's defaults
#: (``EngineAdapter.fingerprint``: prefixes the engine reads, variables and launch options it rewrites or
#: that differ per node) and to ``DSV41_``; nothing by default
FINGERPRINT_DEFAULTS = {"prefixes": (), "volatile": (), "volatile_argv": ()}


def load(files: list[Path], profile: str | None = None, environ: Mapping[str, str] | None = None):
    """Load ``files`` with Dynaconf for ``profile`` (else ``DSV41_ENV``, else ``default``).

    Returns ``(settings, profile, profiles, notes)``; ``settings`` is a ``LoadedSettings``.
    Dynaconf's own variables in ``environ`` are ignored (and noted). Raises SettingsError when the
    profile is not present in the files (the message lists the profiles present), when Dynaconf
    cannot load a file, or when a Dynaconf option variable of this process changed what Dynaconf
    loads (``_process_overrides``).
    """
    environ = os.environ if environ is None else environ
    notes: list[str] = []
    origin = "argument"
    if profile is None:
        profile, origin = environ.get(PROFILE_VAR, "").strip() or DEFAULT_PROFILE, f"env {PROFILE_VAR}"
    profile = profile.strip().lower()
    ignored = sorted(k for k in environ if k.startswith("DYNACONF_") or k.endswith("_FOR_DYNACONF"))
    if ignored:
        notes.append(f"ignored Dynaconf variable(s) {', '.join(ignored)}: dsv41_flags reads DSV41_* "
                     f"only (the profile is chosen by {PROFILE_VAR})")
    profiles = profiles_in(files)
    if profile not in profiles:
        raise SettingsError([Problem(
            PROFILE_VAR, origin,
            f"profile {quoted(profile)} (from {origin}) is not in the settings files "
            f"({', '.join(map(str, files)) or 'none loaded'}); profiles present: {', '.join(profiles)}")])
    import glob

    from dynaconf import Dynaconf, get_history

    # Dynaconf globs an entry holding *, ? or [: a file found here is read as that exact file
    names = [glob.escape(str(f)) for f in files]
    try:
        settings = Dynaconf(**DYNACONF_OPTIONS, settings_files=names, force_env=profile)
        history = get_history(settings)  # forces the load here, where errors can be attributed
    except Exception as exc:  # Dynaconf raises many kinds; attribute them to the files
        raise SettingsError([Problem("SETTINGS", ", ".join(map(str, files)),
                                     f"loading {', '.join(map(str, files))} failed: "
                                     f"{exception_text(exc)}")]) from exc
    layers = tuple(e for e in history if e["loader"] == "toml")
    problems = _process_overrides(settings, names, files, layers)
    if problems:
        raise SettingsError(problems)
    return LoadedSettings(settings, layers), profile, profiles, tuple(notes)


#: Dynaconf's options, every one that decides what is loaded (docs/settings.md, "What Dynaconf
#: does, and what is ours", says why each part beyond them is ours): its env loader is off
#: (``loaders=[]``): the ``DSV41_<KEY>`` layer is the raw text of the environment resolved
#: (``_history``); a process variable that changes one of them is refused (``_process_overrides``).
DYNACONF_OPTIONS = {
    "environments": True, "default_env": "DEFAULT", "merge_enabled": True, "core_loaders": ["TOML"],
    "loaders": [], "load_dotenv": False, "auto_cast": False, "includes": [], "preload": [],
    "secrets": None, "root_path": None, "skip_files": [], "redis_enabled": False,
    "vault_enabled": False, "encoding": "utf-8", "silent_errors": True, "sysenv_fallback": False,
}


class LoadedSettings(NamedTuple):
    """What ``load`` gives: ``dynaconf``, the ``Dynaconf`` instance (merged values), and
    ``layers``, its ``get_history`` entries of loader ``toml`` (``identifier``: file, ``env``:
    section, ``value``: that section's table), lowest precedence first, read once per load."""

    dynaconf: Any
    layers: tuple[dict, ...]

    def entries(self, key: str) -> list[dict]:
        """The layers that set the top-level ``key`` (upper-case, as Dynaconf keeps it; a key set
        in two cases is refused before loading), each with ``value`` its value there: what
        ``get_history(dynaconf, key=key)`` gives for loader ``toml``, without a history read per
        key."""
        return [{**e, "value": e["value"][key]} for e in self.layers
                if isinstance(e["value"], dict) and key in e["value"]]


def _process_overrides(settings, names: list[str], files: list[Path], layers) -> list[Problem]:
    """One Problem when this process's variables changed Dynaconf's load: an option of
    ``DYNACONF_OPTIONS`` (or the settings files) whose value in Dynaconf differs from the one
    passed, or a file read that the search did not find. It names the variables and what changed."""
    wanted = {**DYNACONF_OPTIONS, "settings_file": names}
    wanted.pop("load_dotenv")  # not an option Dynaconf keeps; the argument wins over the variable
    changed = []
    for name, want in wanted.items():
        have = settings.get(f"{name.upper()}_FOR_DYNACONF")
        if (list(have) if isinstance(have, (list, tuple)) else have) != want:
            changed.append(f"{name}={quoted(have)} instead of {quoted(want)}")
    found = {str(p) for f in files for p in (f, local_companion(f))}
    changed += [f"read {read}" for read in sorted({e["identifier"] for e in layers} - found)]
    if not changed:
        return []
    variables = sorted(k for k in os.environ if k.endswith("_FOR_DYNACONF") or k.startswith("DYNACONF_"))
    return [Problem("DYNACONF", f"env {', '.join(variables)}", (
        f"Dynaconf's own variables of this process ({', '.join(f'{k}={shown(k, os.environ[k])}' for k in variables)}) "
        f"changed what it loads ({'; '.join(changed)}): Dynaconf takes its options from them over "
        f"the arguments dsv41_flags gives it, so files and profiles would be read without being "
        f"listed; accepted: none of Dynaconf's option variables where settings are resolved "
        f"(unset them: dsv41_flags reads DSV41_* only, files from --settings or {SETTINGS_VAR})"))]


# ---------------------------------------------------------------------------- resolution
def _history(settings: LoadedSettings, key: str, environ: Mapping[str, str]) -> list[tuple[str, Any]]:
    """``[(source, raw)]`` for ``key``, lowest precedence first: the files' values from Dynaconf's
    history, then ``DSV41_<KEY>`` from ``environ`` (raw text) when set."""
    out = [(f"{e['identifier']} [{e['env']}]", e["value"]) for e in settings.entries(key)]
    var = ENV_PREFIX + key
    if var in environ:  # the variable layer: highest precedence, its raw text
        out.append((f"env {var}", environ[var]))
    return out


def _cast_chain(key: str, what: str, chain: list[tuple[str, Any]], caster,
                problems: list[Problem], kind: str = "",
                secret_extra: tuple[str, ...] = ()) -> tuple[Any, str, bool]:
    """Cast every entry of the chain; return (value of the last valid layer, its source, ok).
    ``ok`` is False when any layer is invalid (each one is a problem naming the variable or the
    file [section] key, the value as written there, and what is accepted): an invalid layer is
    skipped, never guessed, and the value shown is the one of the layer below it. A key whose
    name marks a secret (``secrecy.is_secret``; ``secret_extra``: the settings' own
    ``secret_names``) has its value shown as ``secrecy.MASK``."""
    value, source, ok, bad = None, "", False, False
    for origin, raw in chain:
        try:
            value, source, ok = cast_layer(key, kind, caster, origin, raw), origin, True
        except CastError as exc:
            if is_secret(key, secret_names(extra=secret_extra)):
                where = f"{origin[4:]} (environment variable)" if origin.startswith("env ") \
                    else f"{key.lower()} ({origin})"
                written = f"{where}: its value ({MASK}, a secret)"
            elif origin.startswith("env "):
                written = f"{origin[4:]}={quoted(raw)} (environment variable)"
            else:
                literal = file_literal(origin, key)
                written = (f"{key.lower()} = {excerpt(literal)}" if literal is not None
                           else f"{key.lower()}={quoted(raw)}") + f" ({origin})"
            problems.append(Problem(key, origin, f"{written} is not a valid value for {what}; "
                                                 f"accepted: {exc.accepted}"))
            bad = True
    return value, source, ok and not bad


def cast_layer(key: str, kind: str, caster, origin: str, raw: Any) -> Any:
    """Cast one layer of a key's chain: a variable's text (``env ...``) or a declared default by
    ``caster``; a settings file's value (``<file> [<section>]``) first through
    ``check_file_value`` (strict TOML type, and for a number the text written in the file: decimal
    digits), then ``caster``. Raises CastError."""
    if kind and origin != DECLARED_DEFAULT and not origin.startswith("env "):
        check_file_value(kind, raw, file_literal(origin, key))
    return caster(raw)

def reserved_caster(key: str):
    """``(kind, caster)`` of a typed reserved setting (``RESERVED_TYPES``): reserved words accept
    any case, like flag words (``DSV41_LOG_LEVEL=DEBUG``). Raises KeyError for an untyped key."""
    kind, _default, choices = RESERVED_TYPES[key]

    def caster(raw, kind=kind, choices=choices):
        return cast(kind, raw.strip().lower() if kind == Kind.CHOICE and isinstance(raw, str) else raw,
                    choices=choices)

    return kind, caster


def reserved_settings(settings: LoadedSettings, environ: Mapping[str, str], problems: list[Problem] | None = None,
                      resolved: dict[str, Resolved] | None = None) -> dict[str, Any]:
    """Typed reserved settings (STRICT, FEATURES_DIR, LOG_FORMAT, LOG_LEVEL, RANK_GUARD, EXTERNAL)
    or their defaults; bad values are appended to ``problems``; ``resolved`` (when given) gets a
    ``Resolved`` per key with its chain (declared default first), for ``explain``. A key with an
    invalid layer takes its declared default (the boot stops on the error anyway). Needs no
    feature: logging is configured from it before any feature module is imported."""
    problems = [] if problems is None else problems
    reserved: dict[str, Any] = {}
    for key, (kind, default, choices) in RESERVED_TYPES.items():
        chain = _history(settings, key, environ)
        _kind, caster = reserved_caster(key)
        value, source, ok = _cast_chain(key, f"setting {key}", chain, caster, problems, kind)
        reserved[key] = value if (chain and ok) else default
        if resolved is not None:
            resolved[key] = Resolved(key, "", None, reserved[key],
                                     source if (chain and ok) else DECLARED_DEFAULT,
                                     ((DECLARED_DEFAULT, default),) + tuple(chain))
        if key == "FEATURES_DIR" and chain and ok and value:
            src = chain[-1][0]
            base = Path(src.rsplit(" [", 1)[0]).parent if not src.startswith("env ") else Path.cwd()
            try:
                reserved[key] = str((base / value).resolve())
            except Exception as exc:  # RuntimeError on a symlink loop, OSError...: the value's fault
                problems.append(Problem(key, src, f"features_dir={quoted(value)} ({src}) cannot be "
                                        f"resolved: {exception_text(exc)}; accepted: a "
                                        f"directory path"))
                reserved[key] = default
    return reserved


def resolve(settings: LoadedSettings, profile: str, profiles: tuple[str, ...], files: list[Path],
            features: tuple[Feature, ...], environ: Mapping[str, str] | None = None,
            notes: tuple[str, ...] = (), features_dir: Path | None = None) -> Resolution:
    """Resolve every flag and option of ``features`` and the reserved settings.

    Bad values become error problems (never guessed); unknown keys become warnings, errors in
    strict mode. Does not raise: call ``Resolution.raise_for_errors()``.
    """
    environ = os.environ if environ is None else environ
    problems: list[Problem] = []
    reserved_values: dict[str, Resolved] = {}
    reserved = reserved_settings(settings, environ, problems, reserved_values)
    fp, volatile_sources = _fingerprint_settings(settings, problems, bool(reserved["STRICT"]))
    reserved["FINGERPRINT"] = fp
    reserved["FLEET"] = fleet_table(settings, environ, problems)

    values: dict[str, Resolved] = {}
    for feature in features:
        for key, option in feature.keys().items():
            declared = feature.default if option is None else option.default
            chain = [(DECLARED_DEFAULT, declared)] + _history(settings, key, environ)
            if option is None:
                what, caster = f"flag {key} (feature {feature.name})", cast_bool
            else:
                what = f"option {key} ({option.kind} option {quoted(option.name)} of feature {feature.name})"
                caster = option.cast
            value, source, ok = _cast_chain(key, what, chain, caster, problems,
                                            Kind.BOOL if option is None else option.kind,
                                            tuple(reserved.get("SECRET_NAMES") or ()))
            values[key] = Resolved(key, feature.name, None if option is None else option.name,
                                   value, source, tuple(chain))

    strict = bool(reserved["STRICT"])
    known = set(values) | set(RESERVED_KEYS)
    from dsv41_flags.fleet_settings import VARIABLES as FLEET_VARIABLES

    external = set(reserved["EXTERNAL"]) | set(volatile_sources) | set(FLEET_VARIABLES)
    origin = ("known features: " + (", ".join(f"{f.name} ({_feature_origin(f, features_dir)})"
                                              for f in features) or "none found")
              if features_dir else "")
    problems.extend(_unknown_keys(settings, known, external, environ, strict, origin))
    loaded = [str(p) for f in files for p in (f, local_companion(f)) if p.is_file()]
    return Resolution(profile=profile, profiles=profiles, files=tuple(loaded),
                      values=values, reserved=reserved, volatile_sources=volatile_sources,
                      problems=tuple(problems), notes=notes, reserved_values=reserved_values)


def _fingerprint_settings(settings: LoadedSettings, problems: list[Problem], strict: bool = True
                          ) -> tuple[dict, dict[str, str]]:
    """Typed ``fingerprint`` table (``prefixes``, ``volatile``, ``volatile_argv`` and
    ``prefix_sources``: prefix -> ``settings file <file> [section]``) and, per volatile name, the
    file [section] that declared it. These add to the engine adapter's defaults (see
    ``_fingerprint.compute``).

    Each of ``prefixes``, ``volatile``, ``volatile_argv`` must be a TOML list of non-empty strings
    (a bare string is refused: ``volatile = "SGLANG_RUN_ID"`` would silently volatilise nothing);
    profiles add to ``[default]``'s lists. Problems name the file [section] that set the value."""
    out: dict[str, Any] = dict(FINGERPRINT_DEFAULTS)
    sources: dict[str, str] = {}
    prefix_sources: dict[str, str] = {}
    history = settings.entries("FINGERPRINT")
    accepted = "a list of non-empty strings, e.g. [\"SGLANG_RUN_ID\"]"
    ok = True
    for entry in history:
        origin = f"{entry['identifier']} [{entry['env']}]"
        table = entry.get("value")
        if not isinstance(table, dict):
            problems.append(Problem("FINGERPRINT", origin, f"{origin}: fingerprint = {quoted(table)} must be "
                                    f"a table with {', '.join(FINGERPRINT_DEFAULTS)}"))
            ok = False
            continue
        for name, value in table.items():
            if name not in FINGERPRINT_DEFAULTS:
                problems.append(Problem(f"FINGERPRINT.{name}", origin,
                                        f"{origin}: fingerprint.{name} is not a fingerprint setting; "
                                        f"accepted: {', '.join(FINGERPRINT_DEFAULTS)}"
                                        f"{suggest(name, list(FINGERPRINT_DEFAULTS))}",
                                        "error" if strict else "warning"))
            elif not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
                problems.append(Problem(f"FINGERPRINT.{name}", origin, f"{origin}: fingerprint.{name} = "
                                        f"{quoted(value)} is not {accepted}"))
                ok = False
            else:
                for item in value:
                    (prefix_sources if name == "prefixes" else sources).setdefault(
                        item, f"settings file {origin}")
    table = settings.dynaconf.get("FINGERPRINT", {}) if ok else {}
    for name in FINGERPRINT_DEFAULTS:
        if isinstance(table, dict) and name in table:
            out[name] = tuple(table[name])
    out["prefix_sources"] = {p: prefix_sources.get(p, "settings fingerprint.prefixes")
                             for p in out["prefixes"]}
    return out, sources


def fleet_table(settings: LoadedSettings, environ: Mapping[str, str],
                problems: list[Problem]) -> dict[str, Any]:
    """The typed ``fleet`` table (``fleet_settings.FleetSettings``) as the launch keeps it:
    ``{"settings": <its JSON form>, "sources": {field: source}}``, or ``{}`` when no profile
    layer has a ``fleet`` table and no ``DSV41_FLEET_*`` variable is set. The tables of the
    layers merge field by field (a profile's field over ``[default]``'s), the variables last;
    each field's source is the file [section] or ``env DSV41_FLEET_<FIELD>`` that set it.

    Problems (appended, each naming the field, where it came from, the value and what is
    accepted): a value of the wrong type or out of range, an unknown field, a ``token`` in a
    file (a secret belongs in ``DSV41_FLEET_TOKEN`` or ``token_file``), a missing ``url``
    (unleash) or ``path`` (flagd)."""
    from pydantic import ValidationError

    from dsv41_flags.fleet_settings import (FIELD_KINDS, TABLE, TOKEN_VAR, VARIABLE_PREFIX,
                                            FleetSettings, problem_text, variable_value)
    from dsv41_flags.fleet_settings import accepted as fleet_accepted

    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    below: dict[Any, Any] = {}  # the table as the layers below gave it (raw values)
    accepted = ", ".join(FIELD_KINDS)
    for entry in settings.entries(TABLE):
        origin = f"{entry['identifier']} [{entry['env']}.fleet]"
        table = entry.get("value")
        if not isinstance(table, dict):
            origin = f"{entry['identifier']} [{entry['env']}]"
            problems.append(Problem(TABLE, origin, f"{origin}: fleet = {quoted(table)} must be a "
                                    f"table with {accepted}"))
            continue
        # a profile's history entry holds the table merged with the layers below: a field it
        # repeats unchanged was set below, and keeps that layer's source (and problem)
        layer = {name: value for name, value in table.items()
                 if name not in below or below[name] != value}
        below.update(table)
        for name, value in layer.items():
            field = str(name).lower()
            if field == "token":
                problems.append(Problem(f"{TABLE}.token", origin, (
                    f"{origin}: fleet.token ({MASK}, a secret) is refused in a settings file: a "
                    f"file is copied, committed and shown; accepted: the variable {TOKEN_VAR} "
                    f"or fleet.token_file (a file holding the token)")))
            elif field not in FIELD_KINDS:
                problems.append(Problem(f"{TABLE}.{name}", origin, (
                    f"{origin}: fleet.{name} is not a fleet setting; accepted: {accepted}"
                    f"{suggest(field, list(FIELD_KINDS))}")))
            else:
                if field in ("path", "token_file") and isinstance(value, str) and value:
                    value = str(Path(entry["identifier"]).parent / value)  # beside the file
                merged[field], sources[field] = value, origin
    for field in FIELD_KINDS:
        var = VARIABLE_PREFIX + field.upper()
        if var in environ:
            try:
                value = variable_value(field, environ[var])
            except CastError as exc:
                problems.append(Problem(var, f"env {var}", f"{var}={quoted(environ[var])} "
                                        f"(environment variable) is not a valid fleet.{field}; "
                                        f"accepted: {exc.accepted if field == 'labels' else fleet_accepted(field)}"))
                continue
            if field in ("path", "token_file") and value:
                value = os.path.abspath(value)  # the launch's working directory, for every process
            merged[field], sources[field] = value, f"env {var}"
    if not merged and not sources:
        return {}
    try:
        fleet = FleetSettings.model_validate(merged)
    except ValidationError as exc:
        for field, why in problem_text(exc):
            top = field.split(".")[0]
            # a field not set (provider) is blamed on where the table was written
            origin = sources.get(top) or next(iter(sources.values()), "the fleet table")
            shown_value = _fleet_value_shown(merged, field)
            problems.append(Problem(f"{TABLE}.{field}", origin, (
                f"fleet.{field} = {shown_value} ({origin}) is not accepted"
                f"{': ' + why if why else ''}; accepted: {fleet_accepted(top)}")))
        return {}
    missing = {"unleash": "url", "flagd": "path"}[fleet.provider]
    if not getattr(fleet, missing):
        set_empty = missing in sources
        problems.append(Problem(f"{TABLE}.{missing}", sources.get(missing, sources.get("provider", "the fleet table")), (
            f"fleet.provider = {fleet.provider!r} ({sources.get('provider', 'declared')}) needs fleet.{missing} "
            f"({fleet_accepted(missing)}); "
            + (f"it is empty ({sources[missing]})" if set_empty else "it is not set"))))
        return {}
    return {"settings": fleet.model_dump(mode="json"), "sources": sources}


def _fleet_value_shown(merged: Mapping[str, Any], field: str) -> str:
    """The value at ``field`` (dotted: ``labels.cluster``) of a fleet table as a problem shows
    it: quoted and bounded, a URL masked (``secrecy.masked_url``), ``(not set)`` when absent.
    ``fleet.url`` accepts no query or fragment, so a refused one shows each as ``***`` whole: a
    bare ``#TOKEN`` has no name that ``masked_url`` could read as a secret's."""
    value: Any = merged
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return "(not set)"
        value = value[part]
    if field == "url" and isinstance(value, str):
        value = re.sub(r"([?#])[^#]*", rf"\1{MASK}", masked_url(value))
    elif isinstance(value, str) and "://" in value:
        value = masked_url(value)
    return quoted(value)


def _feature_origin(feature, features_dir) -> str:
    """Where ``feature`` was found, as the unknown-key message names it: ``installed (entry point
    NAME)``, ``from DIR`` (the local features directory ``features_dir``) or ``shipped``."""
    if feature.entry_point:
        return f"installed (entry point {feature.entry_point[0]})"
    if feature.source and Path(feature.source).parent == Path(features_dir):
        return f"from {features_dir}"
    return "shipped"


def _unknown_keys(settings: LoadedSettings, known: set[str], external: set[str], environ: Mapping[str, str],
                  strict: bool, features_origin: str = "") -> list[Problem]:
    severity = "error" if strict else "warning"
    tail = (f" ({features_origin})" if features_origin else "") + \
        (" (an error because strict mode is on)" if strict else "")
    problems = []
    env_known = sorted(ENV_PREFIX + k for k in known) + sorted(external)
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX):]
            special = dynaconf_key(key)
            if special and "__" not in key:
                # DSV41_DYNACONF_INCLUDE would make Dynaconf load a file never listed as loaded:
                # an error whatever the strict mode
                problems.append(Problem(name, f"env {name}", f"environment variable {name}="
                                        f"{shown(name, environ[name])} is {special}: refused; {DYNACONF_ACCEPTED}"))
            elif key == "FINGERPRINT":
                problems.append(Problem(name, f"env {name}", f"environment variable {name}: the "
                                        f"fingerprint table cannot be set through a variable (set "
                                        f"[default.fingerprint] in settings.toml)"))
            elif "__" in key:
                problems.append(Problem(name, f"env {name}", f"environment variable {name}: nested "
                                        f"settings cannot be set through variables (set "
                                        f"{key.split('__')[0].lower()}.{key.split('__', 1)[1].lower()} "
                                        f"in settings.toml)"))
            elif key not in known and name not in external and name.startswith(FLEET_VARIABLE_PREFIX):
                fleet_vars = sorted(v for v in external if v.startswith(FLEET_VARIABLE_PREFIX))
                problems.append(Problem(name, f"env {name}", f"environment variable {name} is not a "
                                        f"fleet setting; accepted: {', '.join(fleet_vars)}"
                                        f"{suggest(name, fleet_vars)}{tail}", severity))
            elif key not in known and name not in external:
                problems.append(Problem(name, f"env {name}", f"environment variable {name} matches no "
                                        f"flag, option or reserved name{suggest(name, env_known)}{tail}",
                                        severity))
        elif name.upper().startswith(ENV_PREFIX):
            problems.append(Problem(name, f"env {name}", f"environment variable {name} is lower-case "
                                    f"and is not read (variable names are case-sensitive)"
                                    f"{suggest(name.upper(), env_known)}{tail}", severity))
    seen = set()
    for entry in settings.layers:
        if not isinstance(entry["value"], dict):
            continue
        for key in entry["value"]:
            upper = key.upper()
            if upper in known or upper.endswith("_FOR_DYNACONF") or upper == "DYNACONF_MERGE":
                continue
            origin = f"{entry['identifier']} [{entry['env']}]"
            if (origin, upper) in seen:
                continue
            seen.add((origin, upper))
            problems.append(Problem(upper, origin, f"{origin}: key {quoted(key.lower())} matches no flag, "
                                    f"option or reserved name"
                                    f"{suggest(key.lower(), sorted(k.lower() for k in known))}{tail}",
                                    severity))
    return problems


