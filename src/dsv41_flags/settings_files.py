"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Settings files: which are read (the search: ``find_settings_files``), each read with
``files.read_regular`` (never blocks, at most ``SETTINGS_MAX_BYTES``) and parsed once per content
(``read_settings``), and checked BEFORE Dynaconf reads it: Dynaconf evaluates its own special
forms while it loads (includes, ``@`` tokens, merge markers, ``dynaconf_hooks.py``), and none may
change a value without the file being listed. The same parse gives the profiles present, the
text written for a value (``file_literal``) and a value read again at its layer (``reread``).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from dsv41_flags.errors import Problem, SettingsError
from dsv41_flags.files import SETTINGS_MAX_BYTES, FileRefused, read_regular
from dsv41_flags.names import SETTINGS_VAR
from dsv41_flags.secrecy import shown
from dsv41_flags.text import exception_text, quoted

DEFAULT_PROFILE = "default"
#: the reserved settings written as a table inside a profile (``[default.fleet]``): a top-level
#: section of that name would be a profile, so it is refused
PROFILE_TABLES = ("fleet", "fingerprint")
#: the default settings shipped inside the package (the repository's top-level settings.toml is a
#: symlink to it): the same file for an editable and a wheel install
PROJECT_SETTINGS = Path(__file__).resolve().parent / "_data" / "settings.toml"
#: what a refused Dynaconf special is replaced by
DYNACONF_ACCEPTED = ("accepted: plain keys (flags, options, reserved names) with TOML values, "
                     "nested tables as TOML tables; to load another file, name it in --settings "
                     "or DSV41_SETTINGS so that it is listed as loaded")


class SettingsText(NamedTuple):
    """One settings file as read: ``text`` (UTF-8 decoded) and ``data`` (its TOML tables; shared
    between readers of the same content, never to be changed)."""

    text: str
    data: dict


class _Bom(ValueError):
    """A settings file starts with a UTF-8 BOM."""


def read_settings(path: os.PathLike | str) -> SettingsText:
    """Read the settings file ``path`` as it is now: ``files.read_regular``, UTF-8 without BOM,
    TOML (``tomllib``), parsed once per content. Raises FileRefused, UnicodeDecodeError, ``_Bom``,
    or what the parser raises (``tomllib.TOMLDecodeError``, RecursionError, ValueError)."""
    raw = read_regular(path, SETTINGS_MAX_BYTES)
    if raw.startswith(b"\xef\xbb\xbf"):
        raise _Bom(str(path))
    text = raw.decode("utf-8")
    return SettingsText(text, _parse(text))


@functools.lru_cache(maxsize=16)
def _parse(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def local_companion(path: Path) -> Path:
    """``settings.local.toml`` beside ``settings.toml`` (Dynaconf's convention)."""
    return path.with_name(f"{path.stem}.local{path.suffix}")


# ---------------------------------------------------------------------------------- the search
def find_settings_files(explicit: list[str | os.PathLike] | None = None,
                        environ: Mapping[str, str] | None = None,
                        cwd: Path | None = None) -> tuple[list[Path], str]:
    """Return ``(files, how)``; ``how`` says which rule applied, first that applies: ``explicit``
    (``activate(settings_files=...)``, ``--settings``); ``DSV41_SETTINGS`` (paths separated by
    ``os.pathsep`` or commas); ``settings.toml`` in ``cwd``; ``PROJECT_SETTINGS``. A
    ``settings.local.toml`` beside a file found overrides it (Dynaconf's convention).

    Every file found and its ``.local`` companion (when present) are checked. Raises SettingsError
    naming the path, who named it and the reason when a file is missing (explicitly named),
    unreadable, not ``*.toml``, not valid TOML, or has keys outside a profile section; and naming
    ``DSV41_SETTINGS`` and its value when it is set but selects no file, or has an empty entry.
    """
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    if explicit:
        paths, how = [Path(p) for p in explicit], "argument"
    elif SETTINGS_VAR in environ:
        paths, how = _selection(environ[SETTINGS_VAR]), f"env {SETTINGS_VAR}"
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
        found = check_file(p, how)  # a directory ("/" too: no file name) is refused here
        local = local_companion(p) if not found else None
        if local is not None and (local.exists() or local.is_symlink()):
            found = check_file(local, f"beside {p}")
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


def _selection(value: str) -> list[Path]:
    """The paths of a ``DSV41_SETTINGS`` value (``os.pathsep`` or commas between them). Raises
    SettingsError naming the variable and its value when an entry is empty or blank: ``":"`` is
    what ``"$A:$B"`` gives with both unset, and a file silently left out is never guessed."""
    entries = value.replace(",", os.pathsep).split(os.pathsep)
    empty = [str(i) for i, entry in enumerate(entries, 1) if not entry.strip()]
    if not empty:
        return [Path(entry.strip()) for entry in entries]
    what = ("names no settings file" if len(empty) == len(entries)
            else f"has an empty entry (entry {', '.join(empty)} of {len(entries)})")
    raise SettingsError([Problem(SETTINGS_VAR, f"env {SETTINGS_VAR}", (
        f"environment variable {SETTINGS_VAR}={quoted(value)} {what}: an unset variable in "
        f"\"$A{os.pathsep}$B\" leaves an empty entry; accepted: one or more *.toml paths separated "
        f"by {os.pathsep!r} or ',', each non-empty; unset {SETTINGS_VAR} for the default search "
        f"(./settings.toml, else the settings shipped in the package)"))])


def profiles_in(files: list[Path]) -> tuple[str, ...]:
    """Profile (top-level table) names present in ``files`` and their ``.local`` companions
    (files already checked by ``find_settings_files``), ``default`` first."""
    names: list[str] = []
    for f in files:
        for path in (f, local_companion(f)):
            if path.is_file():
                for name, value in read_settings(path).data.items():
                    if isinstance(value, dict) and name.lower() not in names:
                        names.append(name.lower())
    if DEFAULT_PROFILE not in names:
        names.insert(0, DEFAULT_PROFILE)
    return tuple(names)


# ---------------------------------------------------------------------------------- checks
def check_file(path: Path, how: str) -> list[Problem]:
    """Problems of one settings file: missing, unreadable, not ``*.toml``, invalid TOML or UTF-8,
    keys outside a ``[profile]`` section, keys or sections in two cases, Dynaconf's specials, a
    ``dynaconf_hooks.py`` beside it."""
    def problem(reason: str) -> list[Problem]:
        """One Problem naming this file and who named it."""
        return [Problem(str(path), how, f"settings file {path} (named by {how}) {reason}")]

    try:
        if path.is_dir():
            return problem("is a directory, not a settings file: name a *.toml file in it")
        if path.suffix != ".toml":
            return problem("is not a *.toml file: only TOML settings files are read")
        data = read_settings(path).data
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
    hooks = path.parent / "dynaconf_hooks.py"
    if hooks.exists():
        return problem(f"has {hooks} beside it, which Dynaconf would import and run after loading "
                       f"it (changing settings no file lists): move the settings file or that "
                       f"module elsewhere")
    try:
        return _check_content(data, path, problem)
    except RecursionError:
        return problem("is not valid TOML for dsv41_flags: its values are nested too deep")


def _check_content(data: Mapping[str, Any], path: Path, problem) -> list[Problem]:
    """Problems of one parsed settings file's content (``problem(reason)`` makes one)."""
    problems = _dynaconf_specials(data, path)
    for where, spellings in _case_collisions(data):
        problems += problem(f"spells {where} in more than one case ({' and '.join(map(repr, spellings))}): "
                            f"keys are case-insensitive, so one would silently replace the other; "
                            f"keep one spelling")
    for key, value in data.items():
        if dynaconf_key(key):
            continue  # reported by _dynaconf_specials
        if not isinstance(value, dict):
            problems += problem(f"sets {quoted(key)} outside any section: put it under [default] or a "
                                f"[profile] section")
        elif key.lower() in ("global", "dynaconf"):
            problems += problem(f"has a [{key}] section, which Dynaconf treats specially: use "
                                f"[default] or a profile name")
        elif key.lower() in PROFILE_TABLES:
            problems += problem(f"has a top-level [{key}] section, which would be a profile "
                                f"named {key.lower()!r}, not the {key.lower()} table: write it "
                                f"as [default.{key.lower()}] (or [<profile>.{key.lower()}])")
    return problems


def dynaconf_key(key: str) -> str:
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
    """The ``@`` token ``value`` starts with (``@format``, ``@merge``, ``@del``...), or "": any
    ``@word`` is refused, so a converter Dynaconf adds later is refused too."""
    word = value.lstrip().split(None, 1)[0].lower() if value.lstrip().startswith("@") else ""
    return word if re.fullmatch(r"@[a-z_]+", word) else ""


def _dynaconf_specials(data: Mapping[str, Any], path: Path) -> list[Problem]:
    """Every Dynaconf special in one parsed settings file, in every section and at every depth:
    control keys (``dynaconf_include``, ``dynaconf_merge``, ``*_for_dynaconf``...), keys Dynaconf
    splits (``a.b`` / ``a__b``), ``dynaconf_merge`` list markers and ``@`` tokens (``@format``,
    ``@jinja``, ``@merge``, ``@del``...). One Problem each, naming the file [section], the key,
    its value and what is accepted."""
    problems: list[Problem] = []

    def refuse(section: str, key: str, value: Any, what: str) -> None:
        origin = f"{path} [{section}]" if section else str(path)
        problems.append(Problem(key.upper(), origin,
                                f"{origin}: {key} = {shown(key, value)} is {what}: refused; {DYNACONF_ACCEPTED}"))

    def walk(value: Any, section: str, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                at = f"{where}.{key}" if where else key
                why = dynaconf_key(key)
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
        why = dynaconf_key(key)
        if why:
            refuse("", key, value, why + " outside any section")
        elif isinstance(value, dict):
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


# ---------------------------------------------------------------------------------- one layer
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
    path, _, section = origin.rpartition(" [")
    section = section.rstrip("]")
    try:
        data = read_settings(path).data
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
    table, a dotted key, a value over several lines). TOML parsers keep no source positions, so
    the lines are scanned here; each text found must parse alone as a TOML value."""
    path, _, section = origin.rpartition(" [")
    try:
        text = read_settings(path).text
    except Exception:  # OSError, FileRefused, a decode or TOML error: no text to show
        return None
    return _literals(text).get((section.rstrip("]").lower(), key.lower()))


_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_KEY_LINE = re.compile(r"""^\s*(["']?)([A-Za-z0-9_-]+)\1\s*=\s*([^#"'\[{]*?|"[^"\\]*"|'[^']*')\s*(#.*)?$""")


@functools.lru_cache(maxsize=16)
def _literals(text: str) -> dict[tuple[str, str], str]:
    """``(section, key) -> text`` of every one-line ``key = value`` of a settings file's text
    (lower-case names)."""
    import tomllib

    out: dict[tuple[str, str], str] = {}
    section = None
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head:
            section = head.group(1).strip().strip("\"'").lower()
            continue
        m = _KEY_LINE.match(line)
        if m and section is not None and m.group(3):
            try:
                tomllib.loads(f"v = {m.group(3)}")
            except Exception:  # not a value's whole text: show the parsed value instead
                continue
            out[(section, m.group(2).lower())] = m.group(3)
    return out
