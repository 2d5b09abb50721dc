"""A feature's cache sidecar: the launch fingerprint stored beside a cache file it vouches for.

A feature that keeps a cache across boots (``autotune_keep``) writes ``<cache>.launch`` with the
fingerprint of the launch that produced the cache and, at the next boot, keeps the cache only when
that sidecar matches the new launch. Writes are atomic and never follow a symbolic link
(``files.write_atomic``); reads never block and never load more than ``SIDECAR_MAX_BYTES``; a
damaged or foreign sidecar reads as one that matches nothing, with its ``error``.
``read_json`` reads the cache file itself the same way. The public API is ``__all__``.
Source: the launch sidecar of the sglang#40320 workaround (the digest fix is sglang#40420).
Loaded by a feature when it uses it (at install), never by activation itself.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dsv41_flags.files import FileRefused, SymlinkRefused, clean_stale_temps, read_regular, write_atomic
from dsv41_flags.fingerprint import Fingerprint
from dsv41_flags.snapshot_schema import PayloadWire, SidecarWire, problem
from dsv41_flags.text import exception_text
from dsv41_flags.wire import dumps

__all__ = ["SIDECAR_SUFFIX", "SIDECAR_MAX_BYTES", "FileRefused", "Sidecar", "SymlinkRefused",
           "clean_stale_temps", "diff", "matches", "payload_problem", "read_json", "read_sidecar",
           "sidecar_path", "write_sidecar"]

SIDECAR_SUFFIX = ".launch"


# ------------------------------------------------------------------------------- sidecar
def sidecar_path(cache_path: os.PathLike | str) -> Path:
    """Sidecar beside a cache file: ``x.json`` -> ``x.launch``."""
    return Path(cache_path).with_suffix(SIDECAR_SUFFIX)


def write_sidecar(path: os.PathLike | str, fingerprint: Fingerprint) -> Path:
    """Write ``{"fingerprint", "payload"}`` JSON to ``path`` atomically (``files.write_atomic``:
    readers see the old file or the new one; never through a symbolic link, ``SymlinkRefused``;
    an existing file's mode is kept, a new one gets 0o666 minus the umask). Raises OSError when
    the directory is not writable, read-only (``EROFS``) or full (``ENOSPC``); the old file is
    left untouched."""
    doc = {"fingerprint": fingerprint.digest, "payload": fingerprint.payload}
    return write_atomic(path, dumps(doc, sort_keys=True, indent=1).encode())


#: largest sidecar read (a real one is a few KiB): a bigger file is unreadable, never loaded whole
SIDECAR_MAX_BYTES = 1 << 20


def read_json(path: os.PathLike | str, max_bytes: int, *, follow_symlinks: bool = True) -> Any:
    """The JSON document in the regular file ``path`` (a cache file, a sidecar), read without
    blocking and at most ``max_bytes`` (``files.read_regular``). Raises ``FileRefused`` (an
    OSError: ``errno.ENOENT`` for a missing file; a FIFO, a device, a directory, a symbolic link
    when ``follow_symlinks`` is False, a file over the cap) and ValueError for anything that is
    not a JSON document (bad UTF-8, bad JSON, nesting too deep for the parser)."""
    data = read_regular(path, max_bytes, follow_symlinks=follow_symlinks)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def payload_problem(payload: Any) -> str | None:
    """Why ``payload`` is not a fingerprint payload (``snapshot_schema.PayloadWire``: a JSON object of
    exactly ``argv``, a list of str, ``env``, an object of str -> str, and ``settings``, an object
    of str -> a JSON scalar or a list of them), or None when it is one."""
    return problem(PayloadWire, payload, "payload")


@dataclass(frozen=True)
class Sidecar:
    """A sidecar as read: digest ("" if unreadable), payload (None for an unreadable file;
    otherwise a payload ``payload_problem`` accepts) and ``error`` (``"<path>: <why>"`` when
    unreadable)."""

    digest: str
    payload: Mapping[str, Any] | None
    error: str = ""


def read_sidecar(path: os.PathLike | str) -> Sidecar:
    """Read a sidecar. Total: never raises, whatever the file holds or is.

    A missing file, a symbolic link (never followed), a FIFO / device / directory (never blocks:
    opened non-blocking, ``fstat``-checked), a file over ``SIDECAR_MAX_BYTES``, bad UTF-8, bad or
    too deeply nested JSON, or JSON that is not ``{"fingerprint": "<64 hex>", "payload": <payload>}``
    (``payload_problem``: every type inside checked) gives ``payload=None`` and ``error`` (so it
    matches no launch)."""
    try:
        return _read_sidecar(path)
    except Exception as exc:  # last resort: a fault not foreseen above is still an answer
        return Sidecar("", None, error=f"{path}: unreadable ({exception_text(exc)})")


def _read_sidecar(path: os.PathLike | str) -> Sidecar:
    expected = 'expected JSON {"fingerprint": "<64 hex>", "payload": {"argv", "env", "settings"}}'
    try:
        doc = read_json(path, SIDECAR_MAX_BYTES, follow_symlinks=False)
    except OSError as exc:  # FileRefused: "<path> <why>"
        why = getattr(exc, "reason", None) or exc.strerror or str(exc)
        return Sidecar("", None, error=f"{path}: cannot read it: {why}")
    except ValueError as exc:
        return Sidecar("", None, error=f"{path}: not a sidecar ({exc}; {expected})")
    wrong = problem(SidecarWire, doc, "sidecar")
    if wrong:
        return Sidecar("", None, error=f"{path}: not a sidecar ({wrong}; {expected})")
    return Sidecar(doc["fingerprint"], doc["payload"])


def matches(sidecar: Sidecar, fingerprint: Fingerprint) -> bool:
    """True when the sidecar was written by a launch with this fingerprint ."""
    return sidecar.payload is not None and sidecar.digest == fingerprint.digest


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict]:
    """Key-by-key differences between two payloads: ``[{"part", "key", "old", "new"}]`` where
    ``part`` is argv/env/settings and a missing side is None (argv compared as a whole).
    Meant for payloads ``payload_problem`` accepts (``read_sidecar`` returns no other); a part
    that is not of its type counts as empty, so it never raises over a payload's content."""
    old = old if isinstance(old, Mapping) else {}
    new = new if isinstance(new, Mapping) else {}
    changes = []
    seq = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
    if seq(old.get("argv")) != seq(new.get("argv")):
        changes.append({"part": "argv", "key": "argv", "old": old.get("argv"), "new": new.get("argv")})
    for part in ("env", "settings"):
        a, b = old.get(part), new.get(part)
        a, b = (a if isinstance(a, Mapping) else {}), (b if isinstance(b, Mapping) else {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                changes.append({"part": part, "key": key, "old": a.get(key), "new": b.get(key)})
    return changes
