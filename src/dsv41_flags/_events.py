"""structlog configuration and the process-context processor.

Configured once per process (by ``activate``), before any feature module is imported: JSON lines
when stderr is not a terminal, structlog's console renderer when it is. If the host application
already configured structlog, its configuration is kept and our events go through it.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from typing import Any

import structlog

LOGGER_NAME = "dsv41_flags"


class ProcessContext:
    """Who says it: ``pid``, ``process`` (name), ``role`` and, once known, ``tp_rank`` /
    ``pp_rank`` / ``dp_rank``. Owned by the per-process runtime, which binds these fields into every
    event (binding, not a processor, so that ``structlog.testing.capture_logs`` sees them too)."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}

    def update(self, **fields: Any) -> None:
        """Add or replace fields (None values are dropped)."""
        self.fields.update({k: v for k, v in fields.items() if v is not None})

    def as_fields(self) -> dict[str, Any]:
        """``{"pid", "process", **fields}`` for this process now."""
        return {"pid": os.getpid(), "process": multiprocessing.current_process().name, **self.fields}


def configure(log_format: str = "auto", level: str = "info", stream=None) -> bool:
    """Configure structlog for this process unless it is already configured.

    log_format: ``auto`` (console on a terminal, JSON otherwise), ``json`` or ``console``.
    level: debug | info | warning | error. Returns True when this call configured structlog.
    """
    stream = sys.stderr if stream is None else stream
    if structlog.is_configured():
        return False
    if log_format == "auto":
        log_format = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    renderer = (structlog.dev.ConsoleRenderer() if log_format == "console"
                else structlog.processors.JSONRenderer(sort_keys=False, default=str))
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if log_format != "console":
        processors.append(structlog.processors.format_exc_info)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    return True


def get_logger(**bound: Any):
    """The framework's logger, bound with ``bound`` fields."""
    return structlog.get_logger(LOGGER_NAME).bind(**bound) if bound else structlog.get_logger(LOGGER_NAME)
