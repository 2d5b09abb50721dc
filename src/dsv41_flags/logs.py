"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

structlog configuration, the process-context processor and the never-raising framework logger.

Configured once per process (by ``activate``), before any feature module is imported: JSON lines
(``JSONRenderer(serializer=wire.dumps)``: strict JSON whatever a feature logs) when stderr is not
a terminal, structlog's console renderer when it is; a host's own structlog configuration is kept.
Logging never breaks the host: each line goes to the stream that is ``sys.stderr`` at write time
(``StderrLogger``); a write, render or processor error is never raised into the caller (an engine
import, an install, the rank guard) but counted in ``HEALTH`` and reported once, as a
``log.errors`` event, on the next line that goes through. A line whose renderer raised is still
written, as strict JSON with a ``render_error`` field; a line that could not be written is lost.
"""
from __future__ import annotations

import io
import logging
import os
import sys
import threading
from typing import Any, Callable, Mapping

import structlog
from structlog.stdlib import filter_by_level

from dsv41_flags.text import safe_text
from dsv41_flags.wire import MAX_DEPTH, dumps, text_of

LOGGER_NAME = "dsv41_flags"


# ------------------------------------------------------------------------------- health
class LogHealth:
    """Process-wide count of log lines hit by a write, render or processor error (a forked child
    inherits its parent's). failures: such lines so far; reported: how many a ``log.errors`` event
    reported; last_error: ``"<kind>: <ExcType>: <message>"`` of the latest; cut_line: the last
    write stopped inside a line. Takes no lock: one held by another thread at ``os.fork`` would
    hang the child's next log line."""

    def __init__(self) -> None:
        self.failures = 0
        self.reported = 0
        self.last_error = ""
        self.reporting = False
        self.cut_line = False

    def failed(self, kind: str, exc: BaseException) -> None:
        """Count one line hit by an error (``kind``: write | render | processor)."""
        self.failures += 1
        self.last_error = f"{kind}: {type(exc).__name__}: {text_of(exc)}"

    @property
    def unreported(self) -> int:
        """Lines with an error not yet reported by a ``log.errors`` event."""
        return self.failures - self.reported

    def as_dict(self) -> dict[str, Any]:
        """``{"errors", "last_error"}`` for reports."""
        return {"errors": self.failures, "last_error": self.last_error}


HEALTH = LogHealth()


# --------------------------------------------------------------------------------- output
#: serialises lines to a stream without a descriptor; a new lock in a forked child
_OTHER_STREAM_LOCK = [threading.Lock()]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _OTHER_STREAM_LOCK.__setitem__(0, threading.Lock()))


class StderrLogger:
    """structlog logger (the sink): each rendered line to ``stream``, or to the stream that is
    ``sys.stderr`` when the line is written. A missing, closed or failing stream loses the line,
    counted in ``HEALTH``; it never raises.

    A text stream over a descriptor (``sys.stderr``) gets the line's bytes through its raw file
    after a flush (order kept), and the count written is checked: CPython's text and buffered
    layers, and so ``structlog.WriteLogger``, report success while they drop the bytes of a full
    non-blocking pipe. What such a pipe does not take is a lost line, with no wait; a line cut
    after its first bytes is followed by a newline first. Any other stream (a ``StringIO``, a
    host's wrapper) gets ``write`` and ``flush`` under one lock that a forked child renews
    (``structlog.WriteLogger``'s lock per stream would stay held in a child forked while
    another thread writes: the child would hang at its first event)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def msg(self, message: str) -> None:
        """Write ``message`` and a newline; count instead of raising on failure."""
        try:
            stream = sys.stderr if self.stream is None else self.stream
            if stream is None:
                raise OSError("no stream (sys.stderr is None)")
            buffer = getattr(stream, "buffer", None)   # FileIO itself when unbuffered (-u)
            raw = buffer if isinstance(buffer, io.RawIOBase) else getattr(buffer, "raw", None)
            if not (isinstance(stream, io.TextIOWrapper) and isinstance(raw, io.RawIOBase)):
                with _OTHER_STREAM_LOCK[0]:
                    stream.write(message + "\n")
                    stream.flush()
                return
            stream.flush()
            data = (("\n" if HEALTH.cut_line else "") + message + "\n").encode(
                stream.encoding or "utf-8", "backslashreplace")
            written = 0
            while written < len(data):
                count = raw.write(data[written:])  # None: a full non-blocking descriptor
                if not count:
                    break
                written += count
            HEALTH.cut_line = 0 < written < len(data) or (HEALTH.cut_line and not written)
            if written < len(data):
                raise BlockingIOError(f"{len(data) - written} of {len(data)} bytes not written: "
                                      "stream full")
        except Exception as exc:
            HEALTH.failed("write", exc)

    log = debug = info = warn = warning = error = err = critical = fatal = exception = failure = msg


def _never_raise(renderer: Callable) -> Callable:
    """The final processor: ``renderer``, or, when it raises, the event as strict JSON with a
    ``render_error`` field (counted in ``HEALTH``)."""

    def render(logger: Any, method_name: str, event_dict: dict) -> str:
        try:
            return renderer(logger, method_name, dict(event_dict))  # renderers pop keys
        except Exception as exc:
            HEALTH.failed("render", exc)
            return dumps({**event_dict, "render_error": f"{type(exc).__name__}: {text_of(exc)}"})

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


# ------------------------------------------------------------------- the framework logger
#: the report's wrapper class: structlog's filtering bound logger at NOTSET (filters nothing)
_UNFILTERED = structlog.make_filtering_bound_logger(logging.NOTSET)
_STDLIB_LEVELS = logging.getLevelNamesMapping()


class _AroundLevel:
    """A host's ``logging.Logger`` (``structlog.stdlib.LoggerFactory``) seen by the report: each
    level method hands the record to the logger's handlers whatever the logger's own level
    (``Logger.handle``: a disabled logger, its filters and its handlers' levels still apply)."""

    def __init__(self, target: logging.Logger) -> None:
        self.target = target
        self.name = target.name

    def __getattr__(self, method: str) -> Any:
        name = "ERROR" if method == "exception" else method.upper()
        if name not in _STDLIB_LEVELS or name == "NOTSET":  # not a level method: the logger's own
            return getattr(self.target, method)
        level, target = _STDLIB_LEVELS[name], self.target

        def emit(msg: Any = "", *args: Any, extra: Mapping | None = None, **_kw: Any) -> None:
            target.handle(target.makeRecord(target.name, level, "(dsv41_flags)", 0, msg, args,
                                            None, extra=dict(extra) if extra else None))

        return emit


class FrameworkLogger:
    """The framework's logger: no level method raises (errors are counted in ``HEALTH``); the
    first line that goes through after a failure is followed by one ``log.errors`` event.

    Each event goes through a structlog bound logger built from the configuration current then
    (``structlog.get_config()``, ``structlog.wrap_logger``), so ``capture_logs`` and a later
    ``structlog.configure`` apply: ``context`` first, then the configured processors.
    report=True (``flags.*``, ``feature.*``, ``snapshot.*``...): no level filter applies (neither
    ``log_level`` nor a host's filtering wrapper or ``filter_by_level``), and a host's stdlib
    logger is reached around its level (``_AroundLevel``). report=False (a feature's own events,
    ``ctx.log``): the configured wrapper class filters as configured."""

    __slots__ = ("context", "report", "fields")

    def __init__(self, context: Callable, report: bool, fields: Mapping[str, Any]) -> None:
        self.context, self.report, self.fields = context, report, dict(fields)

    def bind(self, **fields: Any) -> "FrameworkLogger":
        """This logger with ``fields`` added to every event."""
        return FrameworkLogger(self.context, self.report, {**self.fields, **fields})

    def _bound(self, report: bool) -> Any:
        config = structlog.get_config()
        logger = config["logger_factory"](LOGGER_NAME)
        processors = [self.context, *config["processors"]]
        wrapper = config["wrapper_class"]
        if report:
            processors = [p for p in processors if p is not filter_by_level]
            wrapper = _UNFILTERED
            if isinstance(logger, logging.Logger):
                logger = _AroundLevel(logger)
        return structlog.wrap_logger(logger, processors=processors, wrapper_class=wrapper,
                                     cache_logger_on_first_use=False, **self.fields)

    def _emit(self, method: str, *args: Any, **kw: Any) -> None:
        before = HEALTH.failures
        try:
            getattr(self._bound(self.report), method)(*args, **kw)
        except Exception as exc:
            HEALTH.failed("processor", exc)
            return
        if HEALTH.unreported and HEALTH.failures == before and not HEALTH.reporting:
            self._report_errors()

    def _report_errors(self) -> None:
        """Emit ``log.errors`` (lines failed since the last report, the last error); marked
        reported only when that line itself went through."""
        HEALTH.reporting = True
        try:
            failures = HEALTH.failures
            report = FrameworkLogger(self.context, True, {})._bound(True)
            report.warning("log.errors", errors=failures - HEALTH.reported, total=failures,
                           last_error=HEALTH.last_error)
            if HEALTH.failures == failures:
                HEALTH.reported = failures
        except Exception as exc:
            HEALTH.failed("processor", exc)
        finally:
            HEALTH.reporting = False

    def _level(name: str) -> Callable[..., None]:  # noqa: N805 - a helper of the class body
        def method(self: "FrameworkLogger", event: Any = None, *args: Any, **kw: Any) -> None:
            self._emit(name, event, *args, **kw)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = f"Emit ``event`` at ``{name}`` (``event % args`` when args); never raises."
        return method

    debug, info, warning, warn = _level("debug"), _level("info"), _level("warning"), _level("warn")
    error, critical, exception = _level("error"), _level("critical"), _level("exception")
    del _level


def get_logger(context: ProcessContext | None = None, *, report: bool = True,
               **bound: Any) -> FrameworkLogger:
    """The framework's logger (``FrameworkLogger``): ``context`` (or pid/process only) added by a
    processor, then the configured chain; ``bound``: fields bound into every event. Safe to call
    before ``configure`` and before any runtime exists (e.g. for ``flags.error``)."""
    return FrameworkLogger(context or ProcessContext(), report, bound)


# ------------------------------------------------------------------------- safe console
def safe_fields(logger: Any, method_name: str, event_dict: dict) -> dict:
    """Processor before the console renderer: every string of the event (its name, keys and
    values, in nested dicts, lists and tuples too) through ``text.safe_text``, so a field that
    came from outside (``requested_by``, a feature name of a refused switch, a reason) shows its
    control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``) and a console line stays one
    line. JSON lines need no such step: ``wire.dumps`` escapes them (ASCII only)."""
    return _safe_value(event_dict, 0)


def _safe_value(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if depth >= MAX_DEPTH:
        return value
    if type(value) is dict:
        return {_safe_value(k, MAX_DEPTH): _safe_value(v, depth + 1) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_safe_value(v, depth + 1) for v in value)
    return value


# ------------------------------------------------------------------------------ configure
def configure(log_format: str = "auto", level: str = "info", stream: Any = None,
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
    console = log_format == "console"
    processors = [*([context] if context is not None else []),
                  structlog.contextvars.merge_contextvars,
                  structlog.processors.add_log_level,
                  structlog.processors.TimeStamper(fmt="iso", utc=True),
                  structlog.processors.StackInfoRenderer(),
                  safe_fields if console else structlog.processors.format_exc_info,
                  _never_raise(structlog.dev.ConsoleRenderer() if console
                               else structlog.processors.JSONRenderer(serializer=dumps))]
    sink = StderrLogger(stream)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=lambda *args: sink,
        cache_logger_on_first_use=False,
    )
    return True
