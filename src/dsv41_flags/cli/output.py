"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The one way the CLI writes: every human line goes through ``SafeConsole``, every ``--json``
answer through ``emit_json``, and a write that fails is an error of the command.

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

JSON output (``--json``) is written with ``wire.dumps`` (strict JSON, ASCII), which escapes the
same characters on its own.

**Output that cannot be written.** A standard stream may be closed (``CMD >&-``, ``2>&-``),
broken (a reader that quit: EPIPE), full (ENOSPC, EDQUOT, a device like ``/dev/full``) or not
writable (EBADF, EIO). ``mend_streams`` gives a closed one a ``ClosedStream``, whose every write
fails with EBADF; the first failed write or flush of stdout or stderr is kept on its console
(``SafeConsole.failure``), the console stops writing, and the command goes on without a
traceback. ``finish_streams`` flushes what is left and returns the failures; the command then
ends with ``EX_IOERR`` (74), whatever status it had, and says so in one line on stderr when
stderr itself can still take it (``report_lost``). A tool reading ``--json`` never sees an empty
success.
"""
from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from dsv41_flags.wire import dumps, jsonable
from dsv41_flags.secrecy import masked_data, masked_text
from dsv41_flags.text import UNSAFE_CATEGORIES, safe_text  # noqa: F401 (the CLI's names for them)

#: exit status of a command whose own output (stdout or stderr) could not be written
#: (``EX_IOERR`` of sysexits.h)
EX_IOERR = 74
#: errno of a write to a stream that cannot take it: its reader quit, a full device or quota,
#: a file too large, an I/O error, a closed or read-only descriptor
STREAM_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO,
                           errno.EBADF})


def safe(value: Any, style: str = "") -> Text:
    """``safe_text(value)`` as a rich ``Text`` in ``style``: never read as markup, and every URL
    in it masked (``secrecy.masked_text``: credentials and secret parameters as ``***``)."""
    return Text(masked_text(safe_text(value)), style=style)


class ClosedStream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of a process started with descriptor 1 or 2 closed: every
    write raises ``OSError(EBADF)``. It holds ``os.devnull`` open (not inherited) so that no file
    the process opens takes descriptor 1 or 2; a command started by ``dsv41-flags run`` still
    finds its stream closed."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._hold = open(os.devnull, "w", encoding="utf-8")

    def writable(self) -> bool:  # noqa: D102 - io's
        return True

    def write(self, text: str) -> int:  # noqa: D102 - always fails: see the class
        raise OSError(errno.EBADF, f"{self.name} is closed")

    def fileno(self) -> int:  # noqa: D102 - the descriptor held (os.devnull)
        return self._hold.fileno()


class SafeConsole(Console):
    """A rich ``Console`` whose ``print`` shows every string argument through ``safe`` (escaped,
    never markup, never highlighted); renderables (a ``Table`` of ``safe`` cells) pass as they
    are. Keyword arguments are rich's (``style=``, ``highlight=``, ``width=``...).

    ``failure``: the first write to the stream that failed (an ``OSError``; a write to a closed
    file is EBADF), else None. After it the console writes nothing more and raises nothing: the
    command goes on, and ends with ``EX_IOERR`` (``finish_streams``)."""

    failure: OSError | None = None

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: D102 - see the class
        if self.failure is None:
            self._guarded(super().print, *(safe(o) if isinstance(o, str) else o for o in objects),
                          **kwargs)

    def write_text(self, text: str) -> None:
        """``text`` written to the stream as it is (no rendering) and flushed: ``--json``."""
        if self.failure is None:
            self._guarded(lambda: (self.file.write(text), self.file.flush()))

    def _guarded(self, write, *args: Any, **kwargs: Any) -> None:
        try:
            write(*args, **kwargs)
        except ValueError:  # a write to a closed file object
            self.lost(OSError(errno.EBADF, "the stream is closed"))
        except OSError as exc:
            self.lost(exc)

    def on_broken_pipe(self) -> None:
        """rich's hook for a broken pipe (EPIPE): kept as the failure (rich's default exits the
        process)."""
        self.lost(BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)))

    def lost(self, exc: OSError) -> None:
        """Keep ``exc`` as the failure (the first one wins) and stop writing."""
        if self.failure is None:
            self.failure = exc
        self.quiet = True


def mend_streams() -> None:
    """Start a command's output: no failure kept from an earlier command of this process, and a
    ``ClosedStream`` for a standard stream that is closed (``sys.stdout`` / ``sys.stderr`` is
    None: the process started with descriptor 1 or 2 closed)."""
    for shown in (out, err):
        shown.failure = None
        shown.quiet = False
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, ClosedStream(name))


def finish_streams() -> dict[str, OSError]:
    """Flush ``sys.stdout`` and ``sys.stderr``; returns, per stream name (``"stdout"``,
    ``"stderr"``), the failure of the first write or flush that could not be done. A stream that
    failed has ``os.devnull`` put under its descriptor, so that the interpreter's own flush at
    exit reports nothing more."""
    failures: dict[str, OSError] = {}
    for name, stream, shown in (("stdout", sys.stdout, out), ("stderr", sys.stderr, err)):
        try:
            stream.flush()
        except ValueError:  # a closed file object
            shown.lost(OSError(errno.EBADF, "the stream is closed"))
        except OSError as exc:
            shown.lost(exc)
        if shown.failure is not None:
            failures[name] = shown.failure
            _discard(stream)
    return failures


def report_lost(failures: dict[str, OSError]) -> None:
    """One line on stderr per failed stream, when stderr can still take it: ``error: the output
    could not be written to stdout (No space left on device): exit 74``."""
    if "stderr" in failures:
        return
    for name, exc in failures.items():
        why = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        err.print(f"error: the output could not be written to {name} ({why}): exit {EX_IOERR}",
                  style="red")
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _discard(stream: Any) -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def emit_json(data: Any) -> None:
    """``data`` as indented JSON and a newline on stdout (``ensure_ascii``: no control character
    reaches the terminal); a tuple is a list, an object JSON cannot hold its ``str``, a NaN or an
    Infinity from outside data the text ``"NaN"`` / ``"Infinity"``; every URL in a string masked
    (``secrecy.masked_data``)."""
    out.write_text(dumps(masked_data(jsonable(data)), indent=2) + "\n")


def console(*, stderr: bool = False, **kwargs: Any) -> SafeConsole:
    """A ``SafeConsole`` as the CLI uses them: no wrapping of long lines, no markup, no emoji
    codes, no highlighting."""
    return SafeConsole(stderr=stderr, soft_wrap=kwargs.pop("soft_wrap", True), markup=False,
                       emoji=False, highlight=False, **kwargs)


out = console()
err = console(stderr=True)
