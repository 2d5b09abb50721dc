"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The JSON form of a value: the one coercion behind every JSON text the framework writes (log
lines, the snapshot, the fingerprint payload, cache sidecars, the CLI's ``--json``).

``jsonable`` turns any value into plain JSON types and never raises; ``dumps`` writes it as
strict JSON (RFC 8259: no ``NaN`` / ``Infinity`` constants). pydantic's ``to_jsonable_python``
is not enough here: it keeps ``nan``, writes a tuple key ``(1, 2)`` as ``"1,2"``, and raises on a
cycle, a ``frozenset`` key or an object whose ``str`` raises, while a log line must never raise.
"""
from __future__ import annotations

import enum
import json
import math
from typing import Any

#: nesting kept; deeper values are written as their text
MAX_DEPTH = 32
#: ints wider than this are written as a placeholder (Python's int -> str limit is 4300 digits)
MAX_INT_BITS = 8192


def jsonable(value: Any, _depth: int = 0, _seen: frozenset[int] = frozenset()) -> Any:
    """``value`` as plain JSON types (None, bool, int, float, str, list, dict with str keys).

    Tuples, lists and sets become lists (sets sorted by text); a str / int / bool subclass its
    plain base value (an enum member its value); ``NaN`` / ``inf`` / ``-inf`` the strings ``"NaN"`` /
    ``"Infinity"`` / ``"-Infinity"``; a dict key that is not a str its text (``(1, 2)`` ->
    ``"(1, 2)"``, None -> ``"null"``); an int over ``MAX_INT_BITS`` bits ``"<int of N bits>"``; a
    cycle ``"<cycle>"``; nesting past ``MAX_DEPTH`` and any other object their ``str``
    (``repr`` when ``str`` raises, ``"<unrepresentable T>"`` when both do). Never raises."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, (bool, str)):
        return value if type(value) in (bool, str) or value is None else _base(value)
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            return f"<int of {value.bit_length()} bits>"
        return value if type(value) is int else _base(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if _depth >= MAX_DEPTH or not isinstance(value, (dict, list, tuple, set, frozenset)):
        return text_of(value)
    if id(value) in _seen:
        return "<cycle>"
    seen = _seen | {id(value)}
    try:
        if isinstance(value, dict):
            return {_key(k): jsonable(v, _depth + 1, seen) for k, v in list(value.items())}
        items = sorted(value, key=text_of) if isinstance(value, (set, frozenset)) else list(value)
        return [jsonable(v, _depth + 1, seen) for v in items]
    except Exception:  # a container subclass whose iteration raises
        return text_of(value)


def _base(value: Any) -> Any:
    """A subclass of bool / int / str as its plain base value, or its text."""
    for base in (bool, int, str):
        if isinstance(value, base):
            try:
                return base(value)
            except Exception:
                break
    return text_of(value)


def _key(key: Any) -> str:
    if isinstance(key, enum.Enum):
        key = key.value
    if isinstance(key, str):
        return str(key)
    plain = jsonable(key, MAX_DEPTH)
    return plain if isinstance(plain, str) else json.dumps(plain)


def text_of(value: Any) -> str:
    """``str(value)``; ``repr`` when ``__str__`` raises; ``"<unrepresentable T>"`` when both do."""
    for render in (str, repr):
        try:
            text = render(value)
            if isinstance(text, str):
                return text
        except Exception:
            pass
    return f"<unrepresentable {type(value).__name__}>"


def dumps(value: Any, *, sort_keys: bool = False, indent: int | None = None,
          separators: tuple[str, str] | None = None, **_ignored: Any) -> str:
    """``jsonable(value)`` as strict JSON text, ASCII only (every control character escaped).
    Never raises. Other keywords (structlog's ``JSONRenderer`` passes ``default``) are ignored:
    ``jsonable`` already made every value plain."""
    try:
        return json.dumps(jsonable(value), allow_nan=False, sort_keys=sort_keys, indent=indent,
                          separators=separators)
    except Exception as exc:  # pragma: no cover - jsonable's output is plain JSON
        return json.dumps({"event": "unserializable", "error": text_of(exc)})
