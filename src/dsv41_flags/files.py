"""Reading a file the framework did not write itself, without ever blocking or exhausting memory.

Every file dsv41_flags reads (settings files and their ``.local`` companions, feature files, the
snapshot's spill file, autotune caches and sidecars) goes through ``read_regular``: it is opened
with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer) and ``O_CLOEXEC``
(``O_NOFOLLOW`` too where a link must not be followed), checked with ``fstat`` to be a regular
file BEFORE one byte is read, and read up to a size cap. A FIFO, a device (``/dev/zero``), a
directory, a socket, a symlink where none is allowed, a symlink loop or a file over the cap is
refused with ``FileRefused`` naming the path and why; the caller turns it into its own error
(SettingsError, SnapshotError, DeclarationError) or event.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Callable

#: default caps (bytes) for the files the framework reads
SETTINGS_MAX_BYTES = 4 * 1024 * 1024
FEATURE_MAX_BYTES = 4 * 1024 * 1024
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024


class FileRefused(OSError):
    """A file could not be read as a regular file. ``path``: the path as given; ``reason``: why,
    as a sentence fragment ("is a FIFO, not a regular file"). ``str()`` is ``"<path> <reason>"``."""

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
            raise FileRefused(path, f"is {st.st_size} bytes, over the limit of {max_bytes} bytes")
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
                raise FileRefused(path, f"is over the limit of {max_bytes} bytes")
        return b"".join(chunks)
    except OSError as exc:
        if isinstance(exc, FileRefused):
            raise
        raise FileRefused(path, f"cannot be read: {exc.strerror or exc}", exc.errno or 0) from None
    finally:
        os.close(fd)
