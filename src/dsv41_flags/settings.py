"""Resolution: settings files + profile + ``DSV41_*`` variables -> a typed value per key, with
its source and the chain of every value that was set for it.

Loading, profiles, merging and provenance are Dynaconf's (``get_history``); what is done here
beyond it, and why, is said once, above ``DYNACONF_OPTIONS``. Every key's source is
``declared default``, ``<file> [<section>]`` or ``env DSV41_<KEY>``.

Default settings search (first that applies):
  1. ``settings_files`` passed to ``activate`` / ``--settings`` on the CLI;
  2. ``DSV41_SETTINGS``: paths separated by ``os.pathsep`` or commas (a missing one is an error);
  3. ``settings.toml`` in the current directory;
  4. the default ``settings.toml`` shipped in the package (``dsv41_flags/_data/``).
``settings.local.toml`` beside any loaded file overrides it (Dynaconf convention).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Mapping

from dsv41_flags.declare import Feature
from dsv41_flags.names import (DECLARED_DEFAULT, ENV_PREFIX, PROFILE_VAR, RESERVED_KEYS, RESERVED_TYPES, SETTINGS_VAR,  # noqa: F401
                     SNAPSHOT_VAR, suggest)
from dsv41_flags.errors import Problem, SettingsError
from dsv41_flags.text import excerpt, quoted, exception_text
from dsv41_flags.files import SETTINGS_MAX_BYTES, FileRefused, read_regular
from dsv41_flags.resolution import Resolution, Resolved
from dsv41_flags.secrecy import MASK, is_secret, secret_names, shown
from dsv41_flags.values import CastError, Kind, cast, cast_bool, check_file_value

DEFAULT_PROFILE = "default"
#: the default settings shipped inside the package (the repository's top-level settings.toml is a
#: symlink to it): the same file for an editable and a wheel install
PROJECT_SETTINGS = Path(__file__).resolve().parent / "_data" / "settings.toml"

#: the operator's ``fingerprint`` table: what settings ADD to the engine adapter's defaults
#: (``EngineAdapter.fingerprint``: prefixes the engine reads, variables and launch options it rewrites or
#: that differ per node) and to ``DSV41_``; nothing by default
FINGERPRINT_DEFAULTS = {"prefixes": (), "volatile": (), "volatile_argv": ()}


# ---------------------------------------------------------------------------------- files
def local_companion(path: Path) -> Path:
    """``settings.local.toml`` beside ``settings.toml`` (Dynaconf's convention)."""
    return path.with_name(f"{path.stem}.local{path.suffix}")


def _check_file(path: Path, how: str) -> list[Problem]:
    """Problems of one settings file: missing, unreadable, not ``*.toml``, invalid TOML or UTF-8,
    keys outside a ``[profile]`` section, Dynaconf's special ``[global]`` / ``[dynaconf]``."""
    def problem(reason: str) -> list[Problem]:
        """One Problem naming this file and who named it."""
        return [Problem(str(path), how, f"settings file {path} (named by {how}) {reason}")]

    try:
        if path.is_dir():
            return problem("is a directory, not a settings file: name a *.toml file in it")
        if path.suffix != ".toml":
            return problem("is not a *.toml file: only TOML settings files are read")
        data = read_toml(path)
    except FileRefused as exc:
        return problem(exc.reason)
    except UnicodeDecodeError as exc:
        return problem(f"is not UTF-8 text: {exc.reason} at byte {exc.start}")
    except _Bom:
        return problem("starts with a UTF-8 byte order mark (BOM), which TOML does not allow: "
                       "save it as UTF-8 without BOM")
    except RecursionError:
        return problem("is not valid TOML for dsv41_flags: its values are nested too deep")
    except Exception as exc:  # tomllib.TOMLDecodeError, int digit limits, anything: the file's fault
        return problem(f"is not valid TOML: {exception_text(exc)}"
                       if not isinstance(exc, ValueError) else f"is not valid TOML: {exc}")
    try:
        return _check_content(data, path, problem)
    except RecursionError:
        return problem("is not valid TOML for dsv41_flags: its values are nested too deep")


class _Bom(ValueError):
    """A settings file starts with a UTF-8 BOM."""


def read_toml(path: Path) -> dict:
    """Parse the settings file ``path``: read with ``files.read_regular`` (never blocks on a FIFO
    or a device, at most ``SETTINGS_MAX_BYTES``), UTF-8 without BOM, TOML (the standard
    library's ``tomllib``, the parser Dynaconf vendors). Raises FileRefused, UnicodeDecodeError,
    ``_Bom``, or whatever the parser raises."""
    import tomllib

    text = read_regular(path, SETTINGS_MAX_BYTES)
    if text.startswith(b"\xef\xbb\xbf"):
        raise _Bom(str(path))
    return tomllib.loads(text.decode("utf-8"))


def _check_content(data: Mapping[str, Any], path: Path, problem) -> list[Problem]:
    """Problems of one parsed settings file's content (``problem(reason)`` makes one)."""
    problems = _dynaconf_specials(data, path)
    for where, spellings in _case_collisions(data):
        problems += problem(f"spells {where} in more than one case ({' and '.join(map(repr, spellings))}): "
                            f"keys are case-insensitive, so one would silently replace the other; "
                            f"keep one spelling")
    for key, value in data.items():
        if _dynaconf_key(key):
            continue  # reported by _dynaconf_specials
        if not isinstance(value, dict):
            problems += problem(f"sets {quoted(key)} outside any section: put it under [default] or a "
                                f"[profile] section")
        elif key.lower() in ("global", "dynaconf"):
            problems += problem(f"has a [{key}] section, which Dynaconf treats specially: use "
                                f"[default] or a profile name")
    return problems


_DYNACONF_ACCEPTED = ("accepted: plain keys (flags, options, reserved names) with TOML values, "
                      "nested tables as TOML tables; to load another file, name it in --settings "
                      "or DSV41_SETTINGS so that it is listed as loaded")


def _dynaconf_key(key: str) -> str:
    """Why Dynaconf treats ``key`` specially (empty when it does not)."""
    low = key.lower()
    if low.startswith("dynaconf"):
        return "a Dynaconf control key (it would include files, merge or change loading)"
    if low.endswith("_for_dynaconf"):
        return "a Dynaconf setting (it would change how settings are loaded)"
    if "__" in key or "." in key:
        return "split by Dynaconf into nested keys (write a TOML table instead)"
    return ""


def _dynaconf_token(value: str) -> str:
    """The Dynaconf ``@`` token ``value`` starts with (``@format``, ``@merge``...), or ""."""
    text = value.lstrip()
    if not text.startswith("@"):
        return ""
    word = text.split(None, 1)[0].lower()
    try:
        from dynaconf.utils.parse_conf import converters
    except ImportError:  # pragma: no cover - Dynaconf is a dependency
        converters = {}
    if word in converters or re.fullmatch(r"@[a-z_]+", word):
        return word
    return ""


def _dynaconf_specials(data: Mapping[str, Any], path: Path) -> list[Problem]:
    """Every Dynaconf special in one parsed settings file, in every section and at every depth:
    control keys (``dynaconf_include``, ``dynaconf_merge``, ``dynaconf_merge_unique``,
    ``*_for_dynaconf``...), keys Dynaconf splits (``a.b`` / ``a__b``), ``dynaconf_merge`` list
    markers and ``@`` tokens (``@format``, ``@jinja``, ``@merge``, ``@del``...). dsv41_flags
    refuses them all (none is applied, so no file or value changes the fingerprint without being
    listed): one Problem each, naming the file [section], the key, its value and what is accepted.
    """
    problems: list[Problem] = []

    def refuse(section: str, key: str, value: Any, what: str) -> None:
        origin = f"{path} [{section}]" if section else str(path)
        problems.append(Problem(key.upper(), origin,
                                f"{origin}: {key} = {shown(key, value)} is {what}: refused; {_DYNACONF_ACCEPTED}"))

    def walk(value: Any, section: str, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                at = f"{where}.{key}" if where else key
                why = _dynaconf_key(key)
                if why:
                    refuse(section, at, item, why)
                walk(item, section, at)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str) and item.strip().lower().startswith("dynaconf_"):
                    refuse(section, f"{where}[{i}]", item, "a Dynaconf list marker (it would merge "
                                                           "this list with another file's)")
                else:
                    walk(item, section, f"{where}[{i}]")
        elif isinstance(value, str):
            token = _dynaconf_token(value)
            if token:
                refuse(section, where, value, f"a Dynaconf {token} token (it would be evaluated "
                                              f"or merge values)")

    for key, value in data.items():
        why = _dynaconf_key(key)
        if why:
            refuse("", key, value, why + " outside any section")
            continue
        if isinstance(value, dict):
            walk(value, key, "")
    return problems


def _case_collisions(table: Mapping, where: str = "") -> list[tuple[str, list[str]]]:
    """``(where, spellings)`` for every set of keys of one table (sections included, nested
    tables searched) that differ only by case: ``x`` and ``X`` in ``[default]``."""
    out = []
    groups: dict[str, list[str]] = {}
    for key in table:
        groups.setdefault(key.lower(), []).append(key)
    for lower, keys in groups.items():
        if len(keys) > 1:
            out.append((f"the key {quoted(lower)} in [{where}]" if where else f"the section [{lower}]", keys))
    for key, value in table.items():
        if isinstance(value, dict):
            out += _case_collisions(value, f"{where}.{key}" if where else key)
    return out


def find_settings_files(explicit: list[str | os.PathLike] | None = None,
                        environ: Mapping[str, str] | None = None,
                        cwd: Path | None = None) -> tuple[list[Path], str]:
    """Return ``(files, how)`` following the documented search; ``how`` says which rule applied.

    Every file found and its ``.local`` companion (when present) are checked. Raises SettingsError
    naming the path, who named it and the reason when a file is missing (explicitly named),
    unreadable, not ``*.toml``, not valid TOML, or has keys outside a profile section.
    """
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    if explicit:
        paths, how = [Path(p) for p in explicit], "argument"
    elif environ.get(SETTINGS_VAR, "").strip():
        raw = environ[SETTINGS_VAR].replace(",", os.pathsep)
        paths = [Path(p.strip()) for p in raw.split(os.pathsep) if p.strip()]
        how = f"env {SETTINGS_VAR}"
    else:
        paths, how = [], "none found (declared defaults only)"
        for candidate, rule in ((cwd / "settings.toml", "current directory"),
                                (PROJECT_SETTINGS, "project directory")):
            if candidate.is_file():
                paths, how = [candidate], rule
                break
    problems = []
    resolved = []
    for p in paths:
        p = (cwd / p) if not p.is_absolute() else p
        found = _check_file(p, how)  # a directory ("/" too: no file name) is refused here
        local = local_companion(p) if not found else None
        if local is not None and (local.exists() or local.is_symlink()):
            found = _check_file(local, f"beside {p}")
        if not found:
            try:
                resolved.append(p.resolve())
            except Exception as exc:  # RuntimeError on a symlink loop, OSError...: the file's fault
                found = [Problem(str(p), how, f"settings file {p} (named by {how}) cannot be "
                                               f"resolved: {exception_text(exc)}")]
        problems += found
    if problems:
        raise SettingsError(problems)
    return resolved, how


def profiles_in(files: list[Path]) -> tuple[str, ...]:
    """Profile (top-level table) names present in ``files`` and their ``.local`` companions
    (files already checked by ``find_settings_files``)."""
    names: list[str] = []
    for f in files:
        for path in (f, local_companion(f)):
            if path.is_file():
                for name, value in read_toml(path).items():
                    if isinstance(value, dict) and name.lower() not in names:
                        names.append(name.lower())
    if DEFAULT_PROFILE not in names:
        names.insert(0, DEFAULT_PROFILE)
    return tuple(names)


def load(files: list[Path], profile: str | None = None, environ: Mapping[str, str] | None = None):
    """Load ``files`` with Dynaconf for ``profile`` (else ``DSV41_ENV``, else ``default``).

    Returns ``(settings, profile, profiles, notes)``. A stray ``ENV_FOR_DYNACONF`` is ignored
    (and noted). Raises SettingsError when the profile is not present in the files (the message
    lists the profiles present) or when Dynaconf cannot load a file.
    """
    environ = os.environ if environ is None else environ
    notes: list[str] = []
    origin = "argument"
    if profile is None:
        profile, origin = environ.get(PROFILE_VAR, "").strip() or DEFAULT_PROFILE, f"env {PROFILE_VAR}"
    profile = profile.strip().lower()
    # Dynaconf also obeys DYNACONF_* and *_FOR_DYNACONF variables (a stray ENV_FOR_DYNACONF from
    # another program, DYNACONF_<KEY> values, SETTINGS_FILE_FOR_DYNACONF...): only DSV41_* counts
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
    try:
        settings = _dynaconf(profile, files)
        settings.as_dict()  # force the load here, where errors can be attributed
    except Exception as exc:  # Dynaconf raises many kinds; attribute them to the files
        raise SettingsError([Problem("SETTINGS", ", ".join(map(str, files)),
                                     f"loading {', '.join(map(str, files))} failed: "
                                     f"{exception_text(exc)}")]) from exc
    return settings, profile, profiles, tuple(notes)


# Where dsv41_flags goes beyond Dynaconf, and why (the one place that says it):
# - Dynaconf takes each of its own options from a ``<OPTION>_FOR_DYNACONF`` variable (and
#   ``DYNACONF_<KEY>`` values) unless told otherwise: a stray variable could add files, drop the
#   profiles or the merge, without being listed as loaded. So its options are passed, all of
#   them (``DYNACONF_OPTIONS``), and the ``Settings`` it builds reads no variable (``environ``).
# - Dynaconf's env loader reads only ``os.environ`` and parses each value as TOML (``off`` stays
#   the string "off", ``1e3`` becomes a float, ``0x10`` an int). A launch is resolved for an
#   explicit environment (the launcher's command environment, tests) without touching
#   ``os.environ``, and a variable's value is cast from its raw text by the declared type. So the
#   ``DSV41_<KEY>`` layer is read here, from the mapping given (``_history``).
# - Dynaconf's validators check the merged value, whose layer and text are gone. Each layer of
#   a key is cast and checked on its own here, and a file value is checked against the text
#   written in the file (``_literals``: a number in decimal digits; an error shows that text).
# Files, profiles (``[default]`` + the profile, picked by ``DSV41_ENV`` or an argument), merging
# and provenance (``get_history``, loader ``toml``) are Dynaconf's.
DYNACONF_OPTIONS = {
    "environments": True, "default_env": "DEFAULT", "merge_enabled": True, "core_loaders": ["TOML"],
    "loaders": [], "load_dotenv": False, "auto_cast": False, "includes": [], "preload": [],
    "secrets": None, "root_path": None, "skip_files": [], "redis_enabled": False,
    "vault_enabled": False, "encoding": "utf-8", "silent_errors": True,
}


@functools.cache
def _files_only_settings():
    """Dynaconf's ``Settings`` class, blind to the process environment (see the comment above):
    its ``environ`` is empty and its settings file is the one passed."""
    from dynaconf.base import Settings

    class FilesOnlySettings(Settings):
        """Dynaconf settings loaded from the files passed only."""

        @property
        def environ(self):
            return {}

        @property
        def settings_module(self):
            return self.SETTINGS_FILE_FOR_DYNACONF

        @functools.cached_property  # kept in the instance's __dict__, never a Dynaconf key
        def toml_history(self) -> tuple[dict, ...]:
            """Dynaconf's ``get_history`` entries of loader ``toml``, in loading order (lowest
            precedence first), read once per load."""
            from dynaconf.utils.inspect import get_history

            return tuple(e for e in get_history(self) if e["loader"] == "toml")

    return FilesOnlySettings


def _toml_entries(settings, key: str | None = None) -> list[dict]:
    """Dynaconf's ``get_history`` entries of loader ``toml`` (``identifier``: file, ``env``:
    section, ``value``), lowest precedence first: every layer, or, for ``key``, the layers that set
    it, with ``value`` its value there. Settings from ``load`` read the history once per load
    (``toml_history``) and look a plain upper-case key up in each layer (Dynaconf keeps top-level
    keys upper-case, and a key set in two cases is refused before loading); other settings, or
    any other key, go through ``get_history(settings, key=...)`` itself."""
    from dynaconf.utils.inspect import get_history

    cached = isinstance(getattr(type(settings), "toml_history", None), functools.cached_property)
    if key is None and cached:
        return list(settings.toml_history)
    if key is not None and cached and key.isupper() and "__" not in key and "." not in key:
        tables = [e for e in settings.toml_history if isinstance(e["value"], dict)]
        if not any(" " in k for e in tables for k in e["value"] if isinstance(k, str)):
            return [{**e, "value": e["value"][key]} for e in tables if key in e["value"]]
    if key is None:
        return [e for e in get_history(settings) if e["loader"] == "toml"]
    try:
        entries = get_history(settings, key=key)
    except Exception:  # key never set
        entries = []
    return [e for e in entries if e["loader"] == "toml"]


def _dynaconf(profile: str, files: list[Path]):
    """Load ``files`` for ``profile`` with Dynaconf: ``[default]`` + the profile's section, merged,
    ``settings.local.toml`` companions included, provenance in ``get_history`` (loader ``toml``)."""
    from dynaconf.utils import normalize_kwargs

    return _files_only_settings()(**normalize_kwargs({
        **DYNACONF_OPTIONS, "settings_files": [_literal(f) for f in files], "force_env": profile}))


# ---------------------------------------------------------------------------- resolution
def _history(settings, key: str, environ: Mapping[str, str]) -> list[tuple[str, Any]]:
    """``[(source, raw)]`` for ``key``, lowest precedence first: the files' values from Dynaconf's
    history, then ``DSV41_<KEY>`` from ``environ`` (raw text) when set."""
    out = []
    for entry in _toml_entries(settings, key):
        out.append((f"{entry['identifier']} [{entry['env']}]", entry["value"]))
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
                written = f"{origin[4:]}={_short(raw)} (environment variable)"
            else:
                literal = file_literal(origin, key)
                written = (f"{key.lower()} = {_cut(literal)}" if literal is not None
                           else f"{key.lower()}={_short(raw)}") + f" ({origin})"
            problems.append(Problem(key, origin, f"{written} is not a valid value for {what}; "
                                                 f"accepted: {exc.accepted}"))
            bad = True
    return value, source, ok and not bad


def _short(raw: Any) -> str:
    """``repr(raw)``, bounded (``errors.quoted``: a 5000-digit value is named, not printed)."""
    return quoted(raw)


def _cut(text: str) -> str:
    """``text``, bounded (``errors.excerpt``)."""
    return excerpt(text)


def cast_layer(key: str, kind: str, caster, origin: str, raw: Any) -> Any:
    """Cast one layer of a key's chain: a variable's text (``env ...``) or a declared default by
    ``caster``; a settings file's value (``<file> [<section>]``) first through
    ``check_file_value`` (strict TOML type, and for a number the text written in the file: decimal
    digits), then ``caster``. Raises CastError."""
    if kind and origin != DECLARED_DEFAULT and not origin.startswith("env "):
        check_file_value(kind, raw, file_literal(origin, key))
    return caster(raw)


def reread(key: str, origin: str, environ: Mapping[str, str] | None = None) -> Any:
    """The raw value of ``key`` at the layer ``origin`` of its chain, read again: ``env VAR`` ->
    ``environ[VAR]`` (default ``os.environ``); ``<file> [<section>]`` -> the TOML value under
    ``[section]`` (key case ignored) of that file as it is now. For a secret, which no snapshot
    carries. Raises LookupError naming the layer when the value is not there any more (the file
    unreadable, the section or key gone, the variable unset)."""
    if origin.startswith("env "):
        environ = os.environ if environ is None else environ
        if origin[4:] not in environ:
            raise LookupError(f"{origin[4:]} is not set in this process")
        return environ[origin[4:]]
    import tomllib

    path, _, section = origin.rpartition(" [")
    section = section.rstrip("]")
    try:
        data = tomllib.loads(read_regular(path, SETTINGS_MAX_BYTES).decode("utf-8"))
    except Exception as exc:  # OSError, FileRefused, a decode or TOML error
        raise LookupError(f"{path} cannot be read again: {type(exc).__name__}") from None
    table = next((v for k, v in data.items() if k.lower() == section.lower()
                  and isinstance(v, dict)), None)
    found = [v for k, v in (table or {}).items() if k.lower() == key.lower()]
    if not found:
        raise LookupError(f"{path} has no {key.lower()} under [{section}] any more")
    return found[0]


def file_literal(origin: str, key: str) -> str | None:
    """The text written for ``key`` in the layer ``origin`` (``<file> [<section>]``): what follows
    ``key =`` on its line, without a trailing comment (``0x10``, ``"sometimes"``), or None when
    the value is not written on one ``key = value`` line directly under ``[section]`` (an inline
    table, a dotted key, a value over several lines)."""
    path, _, section = origin.rpartition(" [")
    return _literals(path).get((section.rstrip("]").lower(), key.lower()))


def _literals(path: str) -> dict[tuple[str, str], str]:
    """``(section, key) -> text`` of every one-line ``key = value`` of the settings file ``path``
    (lower-case names), read once per version of the file (path, size, modification time). Each
    text is checked to parse, alone, as TOML: only a value's own text is ever shown."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return _literals_of(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _literals_of(path: str, _size: int, _mtime_ns: int) -> dict[tuple[str, str], str]:
    import tomllib

    try:
        lines = read_regular(path, SETTINGS_MAX_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError, FileRefused):
        return {}
    header = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
    keyline = re.compile(r"""^\s*(["']?)([A-Za-z0-9_-]+)\1\s*=\s*([^#"'\[{]*?|"[^"\\]*"|'[^']*')\s*(#.*)?$""")
    out: dict[tuple[str, str], str] = {}
    section = None
    for line in lines:
        head = header.match(line)
        if head:
            section = head.group(1).strip().strip("\"'").lower()
            continue
        m = keyline.match(line)
        if m and section is not None and m.group(3):
            try:
                tomllib.loads(f"v = {m.group(3)}")
            except Exception:  # not a value's whole text: show the parsed value instead
                continue
            out[(section, m.group(2).lower())] = m.group(3)
    return out


def reserved_caster(key: str):
    """``(kind, caster)`` of a typed reserved setting (``RESERVED_TYPES``): reserved words accept
    any case, like flag words (``DSV41_LOG_LEVEL=DEBUG``). Raises KeyError for an untyped key."""
    kind, _default, choices = RESERVED_TYPES[key]

    def caster(raw, kind=kind, choices=choices):
        return cast(kind, raw.strip().lower() if kind == Kind.CHOICE and isinstance(raw, str) else raw,
                    choices=choices)

    return kind, caster


def reserved_settings(settings, environ: Mapping[str, str], problems: list[Problem] | None = None,
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
                problems.append(Problem(key, src, f"features_dir={_short(value)} ({src}) cannot be "
                                        f"resolved: {exception_text(exc)}; accepted: a "
                                        f"directory path"))
                reserved[key] = default
    return reserved


def resolve(settings, profile: str, profiles: tuple[str, ...], files: list[Path],
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
    external = set(reserved["EXTERNAL"]) | set(volatile_sources)
    origin = (f"known features: {', '.join(f.name for f in features) or 'none found'} (shipped, "
              f"from {features_dir} and installed)") if features_dir else ""
    problems.extend(_unknown_keys(settings, known, external, environ, strict, origin))
    loaded = [str(p) for f in files for p in (f, local_companion(f)) if p.is_file()]
    return Resolution(profile=profile, profiles=profiles, files=tuple(loaded),
                      values=values, reserved=reserved, volatile_sources=volatile_sources,
                      problems=tuple(problems), notes=notes, reserved_values=reserved_values)


def _fingerprint_settings(settings, problems: list[Problem], strict: bool = True
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
    history = _toml_entries(settings, "FINGERPRINT")
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
    table = settings.get("FINGERPRINT", {}) if ok else {}
    for name in FINGERPRINT_DEFAULTS:
        if isinstance(table, dict) and name in table:
            out[name] = tuple(table[name])
    out["prefix_sources"] = {p: prefix_sources.get(p, "settings fingerprint.prefixes")
                             for p in out["prefixes"]}
    return out, sources


def _unknown_keys(settings, known: set[str], external: set[str], environ: Mapping[str, str],
                  strict: bool, features_origin: str = "") -> list[Problem]:
    severity = "error" if strict else "warning"
    tail = (f" ({features_origin})" if features_origin else "") + \
        (" (an error because strict mode is on)" if strict else "")
    problems = []
    env_known = sorted(ENV_PREFIX + k for k in known) + sorted(external)
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX):]
            special = _dynaconf_key(key)
            if special and "__" not in key:
                # DSV41_DYNACONF_INCLUDE would make Dynaconf load a file never listed as loaded:
                # an error whatever the strict mode
                problems.append(Problem(name, f"env {name}", f"environment variable {name}="
                                        f"{shown(name, environ[name])} is {special}: refused; {_DYNACONF_ACCEPTED}"))
            elif key == "FINGERPRINT":
                problems.append(Problem(name, f"env {name}", f"environment variable {name}: the "
                                        f"fingerprint table cannot be set through a variable (set "
                                        f"[default.fingerprint] in settings.toml)"))
            elif "__" in key:
                problems.append(Problem(name, f"env {name}", f"environment variable {name}: nested "
                                        f"settings cannot be set through variables (set "
                                        f"{key.split('__')[0].lower()}.{key.split('__', 1)[1].lower()} "
                                        f"in settings.toml)"))
            elif key not in known and name not in external:
                problems.append(Problem(name, f"env {name}", f"environment variable {name} matches no "
                                        f"flag, option or reserved name{suggest(name, env_known)}{tail}",
                                        severity))
        elif name.upper().startswith(ENV_PREFIX):
            problems.append(Problem(name, f"env {name}", f"environment variable {name} is lower-case "
                                    f"and is not read (variable names are case-sensitive)"
                                    f"{suggest(name.upper(), env_known)}{tail}", severity))
    seen = set()
    for entry in _toml_entries(settings):
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


def _literal(path: os.PathLike | str) -> str:
    """``path`` as Dynaconf must read it: exactly that file. Dynaconf globs a ``settings_files``
    entry holding ``*``, ``?`` or ``[``; the files here are already found and checked, so their
    glob characters are escaped (a ``[ab]`` in a directory name is part of the name)."""
    import glob

    return glob.escape(str(path))
