"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Typed casting of raw setting values (strings from variables, TOML values from files).

Dynaconf parses environment strings as TOML (``off`` stays the string "off", ``1e3`` becomes a
float), so variables are cast here from their raw text by the declared type instead.

One meaning per text: a value in a settings file must already have the TOML type of its kind
(values are strictly typed: ``"512"`` is a string, not an int; a flag is a TOML boolean), and a
number must be written as a variable may write it (decimal ASCII digits: ``0x10``, ``0o20``,
``0b1``, ``1_000`` are refused in both), see ``check_file_value``; then the same caster runs.
"""
from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any

from dsv41_flags.text import exception_text

TRUE_WORDS = ("true", "1", "on", "yes")
FALSE_WORDS = ("false", "0", "off", "no")


class Kind(StrEnum):
    """The kind of an option (a ``str`` enum: ``Option("n", "int")`` and ``Kind.INT`` are one)."""

    BOOL, INT, FLOAT, STR, CHOICE = "bool", "int", "float", "str", "choice"
    LIST = "list"  # of str


KINDS: tuple[Kind, ...] = tuple(Kind)  # every option kind, in declaration order
_INT = r"[+-]?[0-9]+"
_FLOAT = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"


def _fullmatch(pattern: str, text: str) -> bool:
    """ASCII full match (``re`` caches the compiled pattern: compiled only where text is cast)."""
    return re.fullmatch(pattern, text, re.ASCII) is not None


class CastError(ValueError):
    """A value cannot be cast. ``accepted`` says what would have been accepted."""

    def __init__(self, accepted: str, detail: str = ""):
        self.accepted = accepted
        self.detail = detail
        super().__init__(detail or accepted)


def _strip(raw: str) -> str:
    # str.strip() without arguments also strips U+00A0 (non-breaking space) and other Unicode spaces
    return raw.strip()


def cast_bool(raw: Any) -> bool:
    """Cast a flag value to bool.

    Accepted: ``bool``; the ints 0 and 1; the words true/false, 1/0, on/off, yes/no in any case,
    surrounded by any whitespace (U+00A0 included); an empty string is False.
    Raises CastError for anything else: no value is guessed.
    """
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        word = _strip(raw).lower()
        if word == "":
            return False
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise CastError("one of true/false, 1/0, on/off, yes/no (any case), or empty for off")


#: most decimal digits an int value may have (Python refuses str -> int above 4300 by default)
MAX_INT_DIGITS = 4300


def cast(kind: Kind | str, raw: Any, *, minimum: float | None = None, maximum: float | None = None,
         choices: tuple[str, ...] = ()) -> Any:
    """Cast ``raw`` (a raw string from a variable or a TOML value from a file) to ``kind``.

    kind: one of ``bool, int, float, str, choice, list`` (list = list of str; from a string,
    comma-separated; from a TOML array, its items; either way items are stripped and empty items
    dropped, so one text means one list).
    Whitespace: a ``str`` value is kept exactly as written (leading/trailing spaces included, file
    or variable alike); ``bool`` words, numbers, ``choice`` words and ``list`` items ignore
    surrounding whitespace (U+00A0 included).
    Raises CastError naming what is accepted when the value is ill-typed, out of
    [minimum, maximum], not one of ``choices``, or too long (an int of more than
    ``MAX_INT_DIGITS`` digits). Total: whatever goes wrong while casting is a CastError (never
    ValueError, OverflowError, RecursionError... out of here).
    """
    try:
        return _cast(kind, raw, minimum, maximum, choices)
    except CastError:
        raise
    except Exception as exc:
        raise CastError(_accepted(kind, minimum, maximum, choices),
                        f"{exception_text(exc)}") from None


def _accepted(kind: str, minimum, maximum, choices) -> str:
    return {Kind.BOOL: "one of true/false, 1/0, on/off, yes/no (any case), or empty for off",
            Kind.INT: "an integer" + _bounds(minimum, maximum),
            Kind.FLOAT: "a finite number" + _bounds(minimum, maximum),
            Kind.STR: "a string", Kind.CHOICE: "one of " + ", ".join(choices),
            Kind.LIST: "a list of strings (in a variable: comma-separated)"}.get(
                kind, f"a declared kind among {', '.join(KINDS)}")


def _cast(kind, raw, minimum, maximum, choices):
    accepted = _accepted(kind, minimum, maximum, choices)
    if kind == Kind.BOOL:
        return cast_bool(raw)
    if kind == Kind.INT:
        if isinstance(raw, bool):
            raise CastError(accepted)
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str):
            if not _fullmatch(_INT, _strip(raw)):  # ASCII digits only: no "1_0", no other scripts
                raise CastError(accepted)
            if len(_strip(raw).lstrip("+-")) > MAX_INT_DIGITS:
                digits = len(_strip(raw).lstrip("+-"))
                raise CastError(f"{accepted}, of at most {MAX_INT_DIGITS} digits (this one is too "
                                f"long: {digits} digits)")
            value = int(_strip(raw), 10)
        else:
            raise CastError(accepted)
        return _check_bounds(value, minimum, maximum, accepted)
    if kind == Kind.FLOAT:
        if isinstance(raw, bool):
            raise CastError(accepted)
        if isinstance(raw, (int, float)):
            value = float(raw)
        elif isinstance(raw, str):
            if not _fullmatch(_FLOAT, _strip(raw)):
                raise CastError(accepted)
            value = float(_strip(raw))
        else:
            raise CastError(accepted)
        if not math.isfinite(value):
            raise CastError(accepted)
        return _check_bounds(value, minimum, maximum, accepted)
    if kind == Kind.STR:
        if isinstance(raw, str):
            return raw  # a str option keeps its text exactly (file or variable): " a " stays " a "
        raise CastError(accepted)
    if kind == Kind.CHOICE:
        if isinstance(raw, str) and _strip(raw) in choices:
            return _strip(raw)
        raise CastError(accepted)
    if kind == Kind.LIST:
        if isinstance(raw, str):
            return tuple(_strip(item) for item in raw.split(",") if _strip(item))
        if isinstance(raw, (list, tuple)) and all(isinstance(i, str) for i in raw):
            # the same items as the same text in a variable: stripped, empty ones dropped
            return tuple(_strip(item) for item in raw if _strip(item))
        raise CastError(accepted)
    raise CastError(accepted, f"unknown option kind {kind!r}")


#: kind -> (TOML types accepted from a file, how to say it)
_FILE_TYPES: dict[Kind, tuple[tuple[type, ...], str]] = {
    Kind.BOOL: ((bool,), "a TOML boolean (true or false, unquoted)"),
    Kind.INT: ((int,), "a TOML integer in decimal digits (512, not \"512\", 0x200 or 5_12)"),
    Kind.FLOAT: ((int, float), "a TOML number in decimal digits (0.5, 1e3; not \"0.5\" or 1_000.0)"),
    Kind.STR: ((str,), "a TOML string (quoted)"),
    Kind.CHOICE: ((str,), "a TOML string (quoted)"),
    Kind.LIST: ((list, tuple), "a TOML array of strings"),
}


def check_file_value(kind: Kind | str, raw: Any, literal: str | None = None) -> None:
    """Check a value read from a settings file before it is cast: its TOML type must be the one
    of ``kind`` (strictly typed), and for ``int`` / ``float`` its ``literal`` text in the file
    (when known) must be decimal ASCII as in a variable. Raises CastError (``accepted`` says
    "values in settings files are strictly typed")."""
    types, what = _FILE_TYPES.get(kind, ((object,), ""))
    numeric = kind in (Kind.INT, Kind.FLOAT)
    ok = isinstance(raw, types) and not (numeric and isinstance(raw, bool))
    if ok and literal is not None and numeric:
        ok = _fullmatch(_INT if kind == Kind.INT else _FLOAT, literal.strip())
    if not ok:
        raise CastError(f"{what}: values in settings files are strictly typed, and a number is "
                        f"written as in a variable")


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _check_bounds(value, minimum, maximum, accepted):
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise CastError(accepted)
    return value
