"""A feature's cache sidecar: the launch fingerprint stored beside a cache file it vouches for.

A feature that keeps a cache across boots (``autotune_keep``) writes ``<cache>.launch`` with the
fingerprint of the launch that produced the cache and, at the next boot, keeps the cache only when
that sidecar matches the new launch. Writes are atomic, private to this host's process, never
follow a symbolic link; reads never block and never load more than ``SIDECAR_MAX_BYTES``; a
damaged or foreign sidecar reads as one that matches nothing, with its ``error``.
Source: the launch sidecar of the sglang#40320 workaround (the digest fix is sglang#40420).
Loaded by a feature when it uses it (at install), never by activation itself.
"""
from __future__ import annotations

import errno
import json
import os
import fnmatch
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from dsv41_flags.files import read_regular
from dsv41_flags.fingerprint import Fingerprint, is_sha256
from dsv41_flags.resolution import _jsonable
from dsv41_flags.text import exception_text

SIDECAR_SUFFIX = ".launch"


# ------------------------------------------------------------------------------- sidecar
def sidecar_path(cache_path: os.PathLike | str) -> Path:
    """Sidecar beside a cache file: ``x.json`` -> ``x.launch``."""
    return Path(cache_path).with_suffix(SIDECAR_SUFFIX)


#: temporary files of ``write_sidecar``: ``.<name>.dsv41-<host>-<pid>-<random>.tmp``
TEMP_TAG = ".dsv41-"
#: a temporary file older than this is left over by a crashed write, whatever its pid
TEMP_MAX_AGE_S = 3600.0


class SymlinkRefused(OSError):
    """A write or move would go through a symbolic link (``errno.ELOOP``): refused."""


def _host() -> str:
    return os.uname().nodename.replace("-", "_").replace(".", "_") or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_temps(directory: os.PathLike | str, name: str | None = None, *,
                      patterns: Sequence[str] = (), max_age_s: float = TEMP_MAX_AGE_S,
                      now: float | None = None) -> list[Path]:
    """Remove temporary files left by crashed writes in ``directory``; returns those removed.

    Own temporaries (``.<name>.dsv41-<host>-<pid>-<random>.tmp``, only those of ``name`` when
    given) go when their pid is dead on this host, or when older than ``max_age_s`` (another host,
    or a reused pid); files matching ``patterns`` (globs of other writers' temporaries, e.g.
    FlashInfer's ``.autotuner_*.tmp``) go when older than ``max_age_s``. Symbolic links are
    never followed (``lstat``; ``unlink`` removes a link itself). Never raises: a file that
    vanished, or a directory where nothing can be removed, is skipped."""
    directory = Path(directory)
    now = time.time() if now is None else now
    removed: list[Path] = []
    host = _host()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        fname = entry.name
        own = fname.startswith(".") and fname.endswith(".tmp") and TEMP_TAG in fname and \
            (name is None or fname.startswith(f".{name}{TEMP_TAG}"))
        other = any(fnmatch.fnmatch(fname, pat) for pat in patterns)
        if not (own or other):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        old = now - st.st_mtime > max_age_s
        dead = False
        if own and not old:
            parts = fname.rsplit(TEMP_TAG, 1)[1].split("-")
            if len(parts) >= 3 and parts[0] == host and parts[1].isdigit():
                pid = int(parts[1])
                dead = pid != os.getpid() and not _pid_alive(pid)
        if old or dead:
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def write_sidecar(path: os.PathLike | str, fingerprint: Fingerprint) -> Path:
    """Write ``{"fingerprint", "payload"}`` JSON to ``path`` atomically: a temporary file in the
    same directory (``.<name>.dsv41-<host>-<pid>-<random>.tmp``), fsync, rename; readers see the
    old file or the new one, never half of one. Temporaries of crashed writes are removed first
    (``clean_stale_temps``).

    Never through a symbolic link: ``path`` itself being a link raises ``SymlinkRefused``
    (``errno.ELOOP``); the temporary is created with ``O_EXCL | O_NOFOLLOW``. The file is created
    by the kernel with mode 0o666 minus the process umask (thread-safe: the umask is never
    changed); replacing an existing regular file keeps that file's mode. Raises OSError when the
    directory is not writable, read-only (``EROFS``) or full (``ENOSPC``); the temporary is
    removed and the old file is left untouched."""
    path = Path(os.path.abspath(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(errno.ELOOP, "is a symbolic link: refused, not written through", str(path))
    clean_stale_temps(path.parent, path.name)
    data = json.dumps({"fingerprint": fingerprint.digest, "payload": _jsonable(fingerprint.payload)},
                      sort_keys=True, indent=1).encode()
    tmp = path.with_name(f".{path.name}{TEMP_TAG}{_host()}-{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        try:
            if st is not None and stat.S_ISREG(st.st_mode):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # our own new file: no race, no umask change
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)  # rename(2) replaces a link at ``path`` itself, never its target
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


#: largest sidecar read (a real one is a few KiB): a bigger file is unreadable, never loaded whole
SIDECAR_MAX_BYTES = 1 << 20


def load_json_bytes(data: bytes) -> Any:
    """``json.loads`` of UTF-8 ``data``; raises ValueError for anything that is not a JSON document
    (bad UTF-8, bad JSON, nesting too deep for the parser: RecursionError becomes ValueError)."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def payload_problem(payload: Any) -> str | None:
    """Why ``payload`` is not a fingerprint payload, or None when it is one: a JSON object with
    ``argv`` (list of str), ``env`` (object of str -> str) and ``settings`` (object of str -> JSON
    value: str, number, bool, null, or a list of those), and nothing else."""
    if not isinstance(payload, dict):
        return f"payload is {type(payload).__name__}, not an object"
    extra = sorted(set(payload) - {"argv", "env", "settings"})
    if extra:
        return f"payload has unknown key(s) {extra}"
    argv = payload.get("argv")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "payload.argv is not a list of strings"
    env = payload.get("env")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        return "payload.env is not an object of strings"
    settings = payload.get("settings")
    if not isinstance(settings, dict):
        return "payload.settings is not an object"
    scalar = (str, int, float, bool, type(None))
    for key, value in settings.items():
        if not (isinstance(value, scalar) or (isinstance(value, list)
                                              and all(isinstance(v, scalar) for v in value))):
            return f"payload.settings[{key!r}] is {type(value).__name__} (a nested value)"
    return None


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
    try:
        data = read_regular(path, max_bytes=SIDECAR_MAX_BYTES, follow_symlinks=False)
    except OSError as exc:  # FileRefused: "<path> <why>"
        why = getattr(exc, "reason", None) or exc.strerror or str(exc)
        return Sidecar("", None, error=f"{path}: cannot read it: {why}")
    expected = 'expected JSON {"fingerprint": "<64 hex>", "payload": {"argv", "env", "settings"}}'
    try:
        doc = load_json_bytes(data)
    except ValueError as exc:
        return Sidecar("", None, error=f"{path}: not a sidecar ({exc}; {expected})")
    if not isinstance(doc, dict):
        return Sidecar("", None, error=f"{path}: not a sidecar ({expected})")
    digest = doc.get("fingerprint")
    if not is_sha256(digest):
        return Sidecar("", None, error=f"{path}: not a sidecar (fingerprint is not 64 hex; {expected})")
    problem = payload_problem(doc.get("payload"))
    if problem:
        return Sidecar("", None, error=f"{path}: not a sidecar ({problem}; {expected})")
    return Sidecar(digest, doc["payload"])


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
