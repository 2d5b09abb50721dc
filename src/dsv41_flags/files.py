"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The framework's file access: the bounded, non-blocking read, the owner check and the atomic
write.

Reading a file the framework did not write itself, without ever blocking or exhausting memory:

Every file dsv41_flags reads (settings files and their ``.local`` companions, feature files, the
snapshot's spill file, autotune caches and sidecars) goes through ``read_regular``: it is opened
with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer) and ``O_CLOEXEC``
(``O_NOFOLLOW`` too where a link must not be followed), checked with ``fstat`` to be a regular
file BEFORE one byte is read, and read up to a size cap. A FIFO, a device (``/dev/zero``), a
directory, a socket, a symlink where none is allowed, a symlink loop or a file over the cap is
refused with ``FileRefused`` naming the path and why; the caller turns it into its own error
(SettingsError, SnapshotError, DeclarationError) or event. ``owned_privately`` is the owner
check run on the very file read (the snapshot's spill file).

Every file the framework writes (a cache sidecar, the snapshot's spill file, a downloaded wheel)
goes through ``write_atomic``: a temporary in the same directory, fsync, ``rename(2)``; readers see
the old file or the new one, never half of one. ``clean_stale_temps`` removes the temporaries of
writes that crashed.
"""
from __future__ import annotations

import errno
import fnmatch
import os
import stat
import time
from pathlib import Path
from typing import Callable, Sequence

#: default caps (bytes) for the files the framework reads
SETTINGS_MAX_BYTES = 4 * 1024 * 1024
FEATURE_MAX_BYTES = 4 * 1024 * 1024
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024


class FileRefused(OSError):
    """A file could not be read as a regular file. ``path``: the path as given; ``reason``: why,
    as a sentence fragment ("is a FIFO, not a regular file"). ``str()`` is ``"<path> <reason>"``.
    ``errno`` is ``EFBIG`` for a file over the caller's size cap (its content refused, the file
    itself readable), ``ENOENT`` for a missing one."""

    def __init__(self, path: os.PathLike | str, reason: str, err: int = 0):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(err or errno.EINVAL, f"{self.path} {reason}")

    def __str__(self) -> str:
        return f"{self.path} {self.reason}"


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, with its article: ``"a FIFO"``, ``"a directory"``..."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: os.PathLike | str, max_bytes: int, *, follow_symlinks: bool = True
                 ) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading without blocking and check it is a regular file of at most
    ``max_bytes``; returns ``(fd, stat)`` (the caller closes ``fd``; ``O_NONBLOCK`` stays set,
    which changes nothing for a regular file). Raises FileRefused."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            reason = ("is a symbolic link, which is not followed here" if not follow_symlinks
                      and os.path.islink(path) else "is a symbolic link loop (too many levels)")
        elif exc.errno == errno.ENOENT:
            reason = "does not exist"
        else:
            reason = f"cannot be opened: {exc.strerror or exc}"
        raise FileRefused(path, reason, exc.errno or 0) from None
    except (ValueError, TypeError) as exc:  # an embedded NUL byte, a bad type
        raise FileRefused(str(path), f"is not a usable path: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(path, f"is {file_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise FileRefused(path, f"is {st.st_size} bytes, over the limit of {max_bytes} bytes",
                              errno.EFBIG)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: os.PathLike | str, max_bytes: int, *, follow_symlinks: bool = True,
                 check: Callable[[os.stat_result], None] | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``), read without blocking:
    opened ``O_NONBLOCK | O_CLOEXEC`` (plus ``O_NOFOLLOW`` when ``follow_symlinks`` is False: a
    symlink as last component is refused), ``fstat``-checked as a regular file before reading.
    Raises FileRefused naming the path and why (missing, a FIFO / device / directory / socket, a
    symlink or symlink loop, over the cap, an I/O error); never blocks on a FIFO or a device.
    ``check(stat)``, when given, runs on the opened file's ``fstat`` before reading (what it raises
    propagates: an owner/mode check on the very file read)."""
    fd, st = open_regular(path, max_bytes, follow_symlinks=follow_symlinks)
    try:
        if check is not None:
            check(st)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise FileRefused(path, f"is over the limit of {max_bytes} bytes", errno.EFBIG)
        return b"".join(chunks)
    except OSError as exc:
        if isinstance(exc, FileRefused):
            raise
        raise FileRefused(path, f"cannot be read: {exc.strerror or exc}", exc.errno or 0) from None
    finally:
        os.close(fd)


def owned_privately(path: os.PathLike | str) -> Callable[[os.stat_result], None]:
    """A ``read_regular`` check: the opened file must belong to this process's effective user and
    be unreadable by anyone else (no group or other bits). Raises FileRefused naming the path,
    its mode and owner."""
    def check(st: os.stat_result) -> None:
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise FileRefused(path, f"is not a private regular file of this user (mode "
                                    f"{oct(st.st_mode & 0o777)}, owner uid {st.st_uid})")
    return check


class SymlinkRefused(OSError):
    """A write would go through a symbolic link (``errno.ELOOP``): refused."""


#: tag in the name of ``write_atomic``'s temporaries: ``.<name>.dsv41-<host>-<pid>-<random>.tmp``
TEMP_TAG = ".dsv41-"
#: a temporary file older than this is left over by a crashed write, whatever its pid
TEMP_MAX_AGE_S = 3600.0


def host_tag() -> str:
    """This host's name as written in a temporary's name (``-`` and ``.`` as ``_``)."""
    return os.uname().nodename.replace("-", "_").replace(".", "_") or "host"


def write_atomic(path: os.PathLike | str, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically; returns the absolute path. A temporary in the same
    directory (``.<name>.dsv41-<host>-<pid>-<random>.tmp``, ``O_EXCL | O_NOFOLLOW``; crashed
    ones removed first, ``clean_stale_temps``), fsync, ``rename(2)`` (which replaces a link at
    ``path`` itself, never its target). ``path`` being a symbolic link raises ``SymlinkRefused``.
    mode: the new file's (0o600 for a private file); None: an existing regular file's mode is
    kept, a new file gets 0o666 minus the umask (never changed: thread-safe). Raises OSError
    (not writable, ``EROFS``, ``ENOSPC``); the temporary is removed, the old file untouched."""
    path = Path(os.path.abspath(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise SymlinkRefused(errno.ELOOP, "is a symbolic link: refused, not written through", str(path))
    if mode is None and st is not None and stat.S_ISREG(st.st_mode):
        mode = stat.S_IMODE(st.st_mode)
    clean_stale_temps(path.parent, path.name)
    tmp = path.with_name(f".{path.name}{TEMP_TAG}{host_tag()}-{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if mode is not None else 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # our own new file: no race, no umask change
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, another user's
        return True
    return True


def clean_stale_temps(directory: os.PathLike | str, name: str | None = None, *,
                      patterns: Sequence[str] = (), max_age_s: float = TEMP_MAX_AGE_S,
                      now: float | None = None) -> list[Path]:
    """Remove temporary files left by crashed writes in ``directory``; returns those removed.

    ``write_atomic``'s temporaries (only those of ``name`` when given) go when their pid is dead
    on this host, or when older than ``max_age_s`` (another host, or a reused pid); files
    matching ``patterns`` (globs of other writers' temporaries, e.g. FlashInfer's
    ``.autotuner_*.tmp``) go when older than ``max_age_s``. Symbolic links are never followed
    (``lstat``; ``unlink`` removes a link itself). Never raises: a file that vanished, or a
    directory where nothing can be removed, is skipped."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        fname = entry.name
        own = fname.startswith(".") and fname.endswith(".tmp") and TEMP_TAG in fname and \
            (name is None or fname.startswith(f".{name}{TEMP_TAG}"))
        if not (own or any(fnmatch.fnmatch(fname, pat) for pat in patterns)):
            continue
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > max_age_s
        except OSError:
            continue
        parts = fname.rsplit(TEMP_TAG, 1)[1].split("-") if own else []
        dead = (not old and len(parts) >= 3 and parts[0] == host_tag() and parts[1].isdigit()
                and int(parts[1]) != os.getpid() and not pid_alive(int(parts[1])))
        if old or dead:
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed
