"""structlog configuration, the process-context processor and the never-raising log pipeline.

Configured once per process (by ``activate``), before any feature module is imported: JSON lines
when stderr is not a terminal, structlog's console renderer when it is. If the host application
already configured structlog, its configuration is kept and our events go through it.

Logging never breaks the host:

* every line goes to the stream that is ``sys.stderr`` *at write time* (``StderrLogger``): a host
  that replaces ``sys.stderr`` after activation is honoured;
* JSON lines are strict JSON whatever a feature logs (``strict_dumps``: non-finite floats become
  ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``, non-string keys become strings, unknown objects
  their ``str``; it never raises);
* a write, render or processor error is swallowed, counted in ``HEALTH`` and reported once, as a
  ``log.errors`` event, on the next line that goes through (``HEALTH.as_dict()`` in the runtime's
  report); it is never raised into the caller (an engine import, an install, the rank guard). A
  line whose renderer raised is still written, as strict JSON with a ``render_error`` field; a
  line that could not be written is lost.
"""
from __future__ import annotations

import functools
import io
import json
import logging
import math
import os
import sys
from typing import Any, Callable, Iterator

import structlog

from dsv41_flags.text import safe_text

LOGGER_NAME = "dsv41_flags"
_MAX_DEPTH = 32


# --------------------------------------------------------------------------- strict JSON
def _plain(value: Any, depth: int, seen: set[int]) -> Any:
    """``value`` as plain JSON types (see ``strict_dumps``)."""
    if value is None or isinstance(value, (str, bool, int)):
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 8192:
            return f"<int of {value.bit_length()} bits>"  # past Python's int -> str digit limit
        return value if type(value) in (str, bool, int) or value is None else _builtin(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return float(value)
    if depth >= _MAX_DEPTH or not isinstance(value, (dict, list, tuple, set, frozenset)):
        return _text(value)
    if id(value) in seen:
        return "<cycle>"
    seen.add(id(value))
    try:
        if isinstance(value, dict):
            return {_key(k): _plain(v, depth + 1, seen) for k, v in list(value.items())}
        items = sorted(value, key=_text) if isinstance(value, (set, frozenset)) else list(value)
        return [_plain(v, depth + 1, seen) for v in items]
    except Exception:  # a container subclass whose iteration raises
        return _text(value)
    finally:
        seen.discard(id(value))


def _builtin(value: Any) -> Any:
    """A subclass of str / int (an enum member, a path-like str) as its plain base value."""
    for base in (bool, int, str):
        if isinstance(value, base):
            try:
                return base(value)
            except Exception:
                return _text(value)
    return _text(value)


def _key(key: Any) -> str:
    """A dict key as a string (``(1, 2)`` -> ``"(1, 2)"``, ``nan`` -> ``"NaN"``)."""
    if isinstance(key, str):
        return str(key)
    plain = _plain(key, _MAX_DEPTH, set())
    return plain if isinstance(plain, str) else json.dumps(plain)


def _text(value: Any) -> str:
    """``str(value)``; ``repr`` when ``__str__`` raises; a placeholder when both raise."""
    for render in (str, repr):
        try:
            text = render(value)
            if isinstance(text, str):
                return text
        except Exception:
            pass
    return f"<unrepresentable {type(value).__name__}>"


def strict_dumps(obj: Any, **kw: Any) -> str:
    """Serialise ``obj`` as strict JSON (RFC 8259: ``json.loads(s, parse_constant=...)`` never
    sees ``NaN`` / ``Infinity``). Never raises.

    ``NaN`` / ``inf`` / ``-inf`` -> ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``; dict keys that are
    not strings -> their text (``(1, 2)`` -> ``"(1, 2)"``); tuples and sets -> lists; any other
    object -> ``str(obj)``; a cycle -> ``"<cycle>"``; nesting deeper than 32 -> the ``str`` of the
    rest. ``kw``: ``json.dumps`` keywords (structlog's JSONRenderer passes ``default`` and
    ``sort_keys``); ``allow_nan`` is forced off. Used as the JSONRenderer's serializer.
    """
    kw = {k: v for k, v in kw.items() if k in ("sort_keys", "indent", "separators", "ensure_ascii")}
    try:
        return json.dumps(_plain(obj, 0, set()), allow_nan=False, **kw)
    except Exception as exc:  # the sanitised value is plain JSON: this is a last resort
        HEALTH.failed("render", exc)
        return json.dumps({"event": "log.unrenderable", "error": _text(exc)})


# ------------------------------------------------------------------------------- health
class LogHealth:
    """Process-wide count of log lines hit by a write, render or processor error.

    failures: such lines so far; reported: how many of them a ``log.errors`` event has already
    reported; last_error: ``"<kind>: <ExcType>: <message>"`` of the latest failure. Part of the
    process's log pipeline, like structlog's own configuration (a forked child inherits the counts
    of its parent).
    """

    def __init__(self) -> None:
        self.failures = 0
        self.reported = 0
        self.last_error = ""
        self.reporting = False
        self.stalled = False  # the last write found its descriptor full (no wait next time)
        self.cut_line = False  # the last write stopped inside a line

    def failed(self, kind: str, exc: BaseException) -> None:
        """Count one line hit by an error (``kind``: write | render | processor). Takes no lock
        (a lock held by another thread at ``os.fork`` would hang the child's next log line)."""
        self.failures += 1
        self.last_error = f"{kind}: {type(exc).__name__}: {_text(exc)}"

    @property
    def unreported(self) -> int:
        """Lines with an error not yet reported by a ``log.errors`` event."""
        return self.failures - self.reported

    def as_dict(self) -> dict[str, Any]:
        """``{"errors", "last_error"}`` for reports."""
        return {"errors": self.failures, "last_error": self.last_error}


HEALTH = LogHealth()


# --------------------------------------------------------------------------------- output
#: longest a line waits for a full non-blocking stream before its rest is counted lost (seconds)
WRITE_RETRY_S = 0.1


class StderrLogger:
    """structlog logger (the sink): writes each rendered line to the stream that is
    ``sys.stderr`` when the line is written (or to the stream returned by ``stream``). A missing,
    closed or failing stream loses the line, counted in ``HEALTH``; it never raises. Every level
    method is ``msg``.

    A standard text stream (``io.TextIOWrapper``, as ``sys.stderr`` is) with a file descriptor
    gets the line's encoded bytes through ``os.write`` (after
    flushing what the stream buffered, so the order is kept), and the count written is checked:
    CPython's text stream over a non-blocking descriptor reports success while it drops bytes
    (a full pipe: ``BlockingIOError`` swallowed, partial writes). A full non-blocking descriptor
    is retried for at most ``WRITE_RETRY_S`` in all (not at all while the previous line found it
    still full, so a stalled reader costs one wait, not one per line); bytes still unwritten then
    are a lost line, counted (kind ``write``) and reported once by the next ``log.errors``
    event; a line cut after its first bytes is followed by a newline first. A blocking
    descriptor blocks as any write to it does. Any other stream (a test's ``StringIO``, a host's
    wrapper of ``sys.stderr``) gets ``write`` and ``flush``."""

    def __init__(self, stream: Callable[[], Any] | None = None) -> None:
        self._stream = stream or (lambda: sys.stderr)

    def msg(self, message: Any = "", *args: Any, **kw: Any) -> None:
        """Write ``message`` and a newline; count instead of raising on failure."""
        try:
            stream = self._stream()
            if stream is None:
                raise OSError("no stream (sys.stderr is None)")
            # a standard text stream over a descriptor: bytes through os.write, counted; any
            # other object (a host's tee or wrapper) keeps its own write
            fd = _fileno(stream) if isinstance(stream, io.TextIOWrapper) else None
            if fd is None:
                stream.write(f"{message}\n")
                stream.flush()
                return
            stream.flush()  # what the stream holds goes first
            encoding = getattr(stream, "encoding", None) or "utf-8"
            # after a cut line, start on a fresh line so the next line stays whole JSON
            data = ("\n" if HEALTH.cut_line else "") + f"{message}\n"
            data = data.encode(encoding, "backslashreplace")
            lost = _write_all(fd, data, 0.0 if HEALTH.stalled else WRITE_RETRY_S)
            HEALTH.stalled = bool(lost)
            if lost:
                HEALTH.cut_line = HEALTH.cut_line or lost < len(data)
                raise BlockingIOError(f"{lost} of {len(data)} bytes not written: stream full")
            HEALTH.cut_line = False
        except Exception as exc:
            HEALTH.failed("write", exc)

    log = debug = info = warn = warning = error = err = critical = fatal = exception = failure = msg


def _fileno(stream: Any) -> int | None:
    """The descriptor under ``stream``, or None (no ``fileno``, or it raises)."""
    try:
        fd = stream.fileno()
    except Exception:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _write_all(fd: int, data: bytes, retry_s: float = WRITE_RETRY_S) -> int:
    """Write ``data`` to ``fd``; returns the count of bytes left unwritten (0: all written). A
    full non-blocking descriptor is retried with short sleeps for at most ``retry_s`` seconds;
    an interrupted write is retried. Raises OSError for other write errors."""
    import time

    view, deadline, pause = memoryview(data), None, 0.001
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            n = 0
        except InterruptedError:
            continue
        if n:
            view = view[n:]
            continue
        now = time.monotonic()
        deadline = now + retry_s if deadline is None else deadline
        if now >= deadline:
            return len(view)
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, 0.02)
    return 0


class StderrLoggerFactory:
    """structlog logger factory: one ``StderrLogger`` for every logger name."""

    def __init__(self, stream: Any = None) -> None:
        self._logger = StderrLogger(None if stream is None else (lambda: stream))

    def __call__(self, *args: Any) -> StderrLogger:
        return self._logger


def _never_raise(renderer: Callable) -> Callable:
    """Wrap the final renderer: when it raises, the event is rendered by ``strict_dumps`` with a
    ``render_error`` field instead (counted in ``HEALTH``)."""

    @functools.wraps(renderer)
    def render(logger, method_name, event_dict):
        """Processor: ``renderer(...)``, or a strict JSON line when it raises."""
        try:
            return renderer(logger, method_name, dict(event_dict))  # renderers pop keys
        except Exception as exc:
            HEALTH.failed("render", exc)
            return strict_dumps({**event_dict, "render_error": f"{type(exc).__name__}: {_text(exc)}"})

    return render


# ------------------------------------------------------------------------------- context
class ProcessContext:
    """Who says it: ``pid``, ``process`` (name), ``role`` and, once known, ``tp_rank`` /
    ``pp_rank`` / ``dp_rank``. Owned by the per-process runtime.

    It is a structlog processor: the framework's logger runs it first, before the configured
    chain (ours or the host's, and ``structlog.testing.capture_logs``'s), so ``pid`` and
    ``process`` are read when the event is emitted (right after a fork too) and fields added
    later (the ranks) reach every later event without re-binding. Fields the event sets itself
    win."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}

    def update(self, **fields: Any) -> None:
        """Add or replace fields (None values are dropped)."""
        self.fields.update({k: v for k, v in fields.items() if v is not None})

    def as_fields(self) -> dict[str, Any]:
        """``{"pid", "process", **fields}`` for this process now."""
        return {"pid": os.getpid(), "process": process_name(), **self.fields}

    def __call__(self, logger: Any, method_name: str, event_dict: dict) -> dict:
        """Processor: add the context fields the event does not set itself."""
        for key, value in self.as_fields().items():
            event_dict.setdefault(key, value)
        return event_dict


class _ContextThenConfigured:
    """The framework logger's processor chain: ``first`` (the process context), then whatever
    chain is configured when the event is emitted (read live, so ``capture_logs`` and a later
    ``structlog.configure`` apply)."""

    def __init__(self, first: Callable) -> None:
        self.first = first

    def __iter__(self) -> Iterator[Callable]:
        yield self.first
        yield from structlog.get_config()["processors"]

    def __len__(self) -> int:
        return 1 + len(structlog.get_config()["processors"])

    def __repr__(self) -> str:
        return f"<{self.first!r} + configured processors>"


@functools.lru_cache(maxsize=None)
def _safe_wrapper(base: type) -> type:
    """A subclass of the configured bound-logger class whose ``_proxy_to_logger`` (every level
    method goes through it) never raises, and reports lost lines once when a line goes through."""

    class Safe(base):  # type: ignore[misc, valid-type]
        def _proxy_to_logger(self, method_name, event=None, **event_kw):
            before = HEALTH.failures
            try:
                result = super()._proxy_to_logger(method_name, event, **event_kw)
            except Exception as exc:
                HEALTH.failed("processor", exc)
                return None
            if HEALTH.unreported and HEALTH.failures == before and not HEALTH.reporting:
                _report_dropped(super()._proxy_to_logger)
            return result

    # the level methods of a filtering logger format ``event % args`` before _proxy_to_logger:
    # ``log.info("rate %d", "abc")`` must not raise either
    for name in _LEVEL_METHODS:
        method = getattr(base, name, None)
        if callable(method):
            setattr(Safe, name, _guarded(method))
    Safe.__name__ = Safe.__qualname__ = f"NeverRaising{base.__name__}"
    return Safe


_LEVEL_METHODS = ("debug", "info", "warning", "warn", "error", "err", "critical", "fatal",
                  "exception", "msg", "log")


def _guarded(method: Callable) -> Callable:
    """``method`` (a bound-logger level method) made never-raising: errors counted."""

    @functools.wraps(method)
    def call(self, *args: Any, **kw: Any) -> Any:
        try:
            return method(self, *args, **kw)
        except Exception as exc:
            HEALTH.failed("render", exc)
            return None

    return call


def _report_dropped(emit: Callable) -> None:
    """Emit ``log.errors`` (how many lines failed since the last report, the last error) through
    ``emit``; marked
    reported only when that line itself went through."""
    HEALTH.reporting = True
    try:
        failures, before = HEALTH.failures, HEALTH.failures
        emit("warning", "log.errors", errors=failures - HEALTH.reported, total=failures,
             last_error=HEALTH.last_error)
        if HEALTH.failures == before:
            HEALTH.reported = failures
    except Exception as exc:
        HEALTH.failed("processor", exc)
    finally:
        HEALTH.reporting = False


def process_name() -> str:
    """This process's multiprocessing name (``SpawnProcess-1``), ``MainProcess`` when
    multiprocessing was never imported here (no multiprocessing child is, then): the stdlib
    ``logging.LogRecord`` idiom, so the report does not import multiprocessing itself."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return "MainProcess"
    try:
        return mp.current_process().name
    except Exception:  # a half-imported or replaced module: the report still goes out
        return "MainProcess"


def _context_only(logger: Any, method_name: str, event_dict: dict) -> dict:
    """Processor for events without a runtime: ``pid`` and ``process``."""
    event_dict.setdefault("pid", os.getpid())
    event_dict.setdefault("process", process_name())
    return event_dict


#: processors of a host's chain that drop events by level (the report never goes through them)
def _level_filters() -> tuple:
    try:
        from structlog.stdlib import filter_by_level
        return (filter_by_level,)
    except Exception:  # pragma: no cover - structlog without stdlib support
        return ()


class _ReportChain(_ContextThenConfigured):
    """The report's chain: like ``_ContextThenConfigured`` without the configured chain's level
    filters (``structlog.stdlib.filter_by_level``)."""

    def __iter__(self) -> Iterator[Callable]:
        filters = _level_filters()
        return (p for p in super().__iter__() if p not in filters)

    def __len__(self) -> int:
        return len(list(iter(self)))


_STDLIB_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "log": logging.INFO,
                  "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR,
                  "err": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
                  "fatal": logging.CRITICAL}


class _UnfilteredStdlib:
    """A host's ``logging.Logger`` (``structlog.stdlib.LoggerFactory``) seen by the report: each
    level method hands the record to the logger's handlers whatever the logger's own level
    (``Logger.handle``: a disabled logger, its filters and its handlers' levels still apply)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def __getattr__(self, name: str) -> Callable:
        level = _STDLIB_LEVELS.get(name, logging.INFO)
        logger = self._logger

        def emit(msg: Any = "", *args: Any, **kw: Any) -> None:
            extra = kw.get("extra") if isinstance(kw.get("extra"), dict) else None
            logger.handle(logger.makeRecord(logger.name, level, "(dsv41_flags)", 0, msg, args, None,
                                            extra=extra))

        return emit


class _UnfilteredBase(structlog.make_filtering_bound_logger(logging.NOTSET)):  # type: ignore[misc]
    """The report's wrapper class: structlog's filtering bound logger at NOTSET (filters nothing);
    a stdlib logger underneath is reached around its own level (``_UnfilteredStdlib``)."""

    def _proxy_to_logger(self, method_name, event=None, **event_kw):
        if isinstance(self._logger, logging.Logger):
            self._logger = _UnfilteredStdlib(self._logger)
        return super()._proxy_to_logger(method_name, event, **event_kw)


_UNFILTERED = _UnfilteredBase


def get_logger(context: ProcessContext | None = None, *, report: bool = True, **bound: Any):
    """The framework's logger: ``context`` (or pid/process only) added by a processor, then the
    configured chain; every level method never raises (errors are counted in ``HEALTH``).
    ``bound``: fields bound into every event. Safe to call before ``configure`` and before any
    runtime exists (e.g. for ``flags.error``).

    report=True (the framework's report events: ``flags.resolved``, ``feature.*``, ``snapshot.*``,
    ``flags.error``, ...): no level filter applies, neither ``log_level`` nor a host's filtering
    wrapper class or ``filter_by_level`` processor: the configured processors (renderer, and
    ``capture_logs``) still see every event, so every process says which patches are on whatever
    the level. report=False (a feature's own events, ``ctx.log``): the configured
    wrapper class filters as configured (``log_level``)."""
    if report:
        wrapper, chain = _safe_wrapper(_UNFILTERED), _ReportChain(context or _context_only)
    else:
        wrapper = _safe_wrapper(structlog.get_config()["wrapper_class"])
        chain = _ContextThenConfigured(context or _context_only)
    return structlog.wrap_logger(None, processors=chain, wrapper_class=wrapper,
                                 cache_logger_on_first_use=False,
                                 logger_factory_args=(LOGGER_NAME,), **bound)


# ------------------------------------------------------------------------- safe console
def safe_fields(logger: Any, method_name: str, event_dict: dict) -> dict:
    """Processor before the console renderer: every string of the event (its name, keys and
    values, in nested dicts, lists and tuples too) through ``text.safe_text``, so a field that
    came from outside (``requested_by``, a feature name of a refused switch, a reason) shows its
    control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``) and a console line stays one
    line. JSON lines need no such step: ``json.dumps`` escapes them (``ensure_ascii``)."""
    return {safe_text(k) if isinstance(k, str) else k: _safe_value(v, 0)
            for k, v in event_dict.items()}


def _safe_value(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if depth >= _MAX_DEPTH:
        return value
    if type(value) is dict:
        return {(safe_text(k) if isinstance(k, str) else k): _safe_value(v, depth + 1)
                for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_safe_value(v, depth + 1) for v in value)
    return value


# ------------------------------------------------------------------------------ configure
def configure(log_format: str = "auto", level: str = "info", stream=None,
              context: ProcessContext | None = None) -> bool:
    """Configure structlog for this process unless it is already configured.

    log_format: ``auto`` (console when ``sys.stderr`` is a terminal now, JSON otherwise),
    ``json`` or ``console``. level: debug | info | warning | error. stream: a fixed stream (tests);
    default: whatever ``sys.stderr`` is at each write. context: the process's ``ProcessContext``,
    added to every line (``pid``, ``process``, ``role``, ranks), a feature module's own
    ``structlog.get_logger()`` lines too. Returns True when this call configured structlog.
    """
    if structlog.is_configured():
        return False
    if log_format == "auto":
        probe = sys.stderr if stream is None else stream
        try:
            log_format = "console" if probe is not None and probe.isatty() else "json"
        except Exception:  # closed or odd stream
            log_format = "json"
    renderer = (structlog.dev.ConsoleRenderer() if log_format == "console"
                else structlog.processors.JSONRenderer(serializer=strict_dumps))
    processors = [context] if context is not None else []
    processors += [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if log_format != "console":
        processors.append(structlog.processors.format_exc_info)
    else:
        processors.append(safe_fields)
    processors.append(_never_raise(renderer))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=StderrLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    return True
