"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Outside text made safe to show: what a request, a variable, a settings file, a command line or
a server's answer holds reaches a terminal, an event line or an error message only through here.

- ``safe_text``: control characters escaped (C0 and C1 controls: ESC, CR, LF, TAB, NUL, DEL, CSI
  ``\\x9b``...; Unicode format characters: bidi overrides and isolates, zero-width characters;
  ``\\u2028``/``\\u2029`` line and paragraph separators; lone surrogates), so one line stays
  one line and no text can move the cursor or reverse what follows it;
- ``quoted`` / ``excerpt``: an outside value quoted in an error message, bounded (a 100 000
  character variable is named with its length, not echoed).
"""
from __future__ import annotations

import unicodedata
from typing import Any

#: Unicode categories shown escaped: controls, format characters (bidi, zero-width), line and
#: paragraph separators, surrogates
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe_text(value: Any) -> str:
    """``value`` as text (``str(value)`` when not a str) with every character of
    ``UNSAFE_CATEGORIES`` escaped as Python writes it (``\\n``, ``\\x1b``, ``\\u202e``,
    ``\\U000e0041``); any other character, spaces and markup brackets included, is kept."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # every unsafe character is unprintable: the common case is one scan
        return text
    return "".join(_escaped(c) if unicodedata.category(c) in UNSAFE_CATEGORIES else c for c in text)


#: characters of an outside value that an error message quotes; the rest is counted, not shown
QUOTE_LIMIT = 200


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, bounded: a value from outside (a variable, a settings
    value, a command-line argument, a request's field) is quoted whole up to ``limit``
    characters, else its first ``limit`` characters and ``… (N chars)`` with its full length (a
    100 000-character variable is named, not echoed). Never raises."""
    try:
        if isinstance(value, str):
            return repr(value) if len(value) <= limit else f"{value[:limit]!r}… ({len(value)} chars)"
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def excerpt(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` (already written for a message: a line of a file, a literal) bounded as by
    ``quoted``, without quotes added."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def exception_text(exc: BaseException) -> str:
    """``"Type: message"`` for an exception, or ``"Type"`` alone when its message is empty
    (``MemoryError()``, ``RecursionError()``): a reason never ends in a bare colon."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
