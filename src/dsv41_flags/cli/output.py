"""The one way the CLI writes for a human: every line goes through ``SafeConsole``.

Text shown by the CLI mixes its own words with outside data: a server's answer, a settings
value, a file name, a feature name read from a file, an engine spec, ``requested_by``. Whatever
that data holds, the terminal shows it as written and nothing else:

- control characters are shown escaped (``safe_text``): C0 and C1 controls (ESC, CR, LF, TAB,
  DEL, CSI ``\\x9b``...), Unicode format characters (bidi overrides and isolates, zero-width
  characters, ``\\u2028``/``\\u2029`` line and paragraph separators) and lone surrogates become
  ``\\x1b``, ``\\n``, ``\\u202e``...; so one ``print`` is exactly one line, and no answer can
  forge a line, move the cursor or reverse the text;
- rich markup and emoji codes are never read from text: every string printed becomes a
  ``rich.text.Text`` (``[/]`` and ``sglang[all]==0.5.24`` print as written), and styles come
  only from the ``style=`` of the call.

JSON output (``--json``) is written with ``json.dumps(ensure_ascii=True)``, which escapes the
same characters on its own.

A standard stream may be closed or broken (``CMD >&-``, ``2>&-``, a reader that quit, a full
device): ``mend_streams`` gives a closed one (``sys.stdout is None``) a stream writing nowhere, a
console whose write fails stops writing (``SafeConsole.broken``), and ``finish_streams`` flushes
what is left, so no command shows a traceback for its own output.
"""
from __future__ import annotations

import errno
import os
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from dsv41_flags.text import UNSAFE_CATEGORIES, safe_text  # noqa: F401 (the CLI's names for them)

def safe(value: Any, style: str = "") -> Text:
    """``safe_text(value)`` as a rich ``Text`` in ``style``: never read as markup."""
    return Text(safe_text(value), style=style)


#: errno of a write to a stream that cannot take it: its reader quit, a full device or quota,
#: an I/O error, a closed descriptor
STREAM_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF})


class SafeConsole(Console):
    """A rich ``Console`` whose ``print`` shows every string argument through ``safe`` (escaped,
    never markup, never highlighted); renderables (a ``Table`` of ``safe`` cells) pass as they
    are. Keyword arguments are rich's (``style=``, ``highlight=``...).

    A write that fails on the stream (``STREAM_ERRNOS``: closed reader, full device...) makes the
    console ``broken``: it writes nothing more and raises nothing (the command goes on; the CLI
    ends with status 1 when its stdout broke)."""

    broken = False

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: D102 - see the class
        if self.broken:
            return
        try:
            super().print(*(safe(o) if isinstance(o, str) else o for o in objects), **kwargs)
        except (OSError, ValueError) as exc:  # ValueError: a write to a closed file
            if isinstance(exc, OSError) and exc.errno not in STREAM_ERRNOS:
                raise
            self.on_broken_pipe()

    def on_broken_pipe(self) -> None:
        """rich's hook for a broken pipe: stop writing (rich's default exits the process)."""
        self.broken = True
        self.quiet = True


def mend_streams() -> None:
    """Give a standard stream that is closed (``sys.stdout`` / ``sys.stderr`` is None: the process
    started with descriptor 1 or 2 closed) a text stream writing to ``os.devnull``. The new
    descriptor is not inherited (a command started by ``dsv41-flags run`` still finds its stream
    closed), and it keeps descriptor 1 or 2 from being taken by a file the process opens."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))


def finish_streams() -> bool:
    """Flush ``sys.stdout`` and ``sys.stderr``. A stream whose flush fails (``STREAM_ERRNOS``, or
    closed) has ``os.devnull`` put under its descriptor, so that the interpreter's own flush at
    exit reports nothing. Returns True when stdout could not take everything written to it (its
    flush or a write of the ``out`` console failed)."""
    broken = out.broken
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError) as exc:
            if isinstance(exc, OSError) and exc.errno not in STREAM_ERRNOS:
                raise
            broken = broken or stream is sys.stdout
            _discard(stream)
    if out.broken:
        _discard(sys.stdout)
    return broken


def _discard(stream: Any) -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def console(*, stderr: bool = False, **kwargs: Any) -> SafeConsole:
    """A ``SafeConsole`` as the CLI uses them: no wrapping of long lines, no markup, no emoji
    codes, no highlighting."""
    return SafeConsole(stderr=stderr, soft_wrap=kwargs.pop("soft_wrap", True), markup=False,
                       emoji=False, highlight=False, **kwargs)


out = console()
err = console(stderr=True)
