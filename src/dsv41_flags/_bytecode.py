"""Compiled code of a feature file's verified bytes, cached the way the import system caches modules.

Discovery executes the bytes it read (and hashed) itself, never a second read of the file, so the
import system's own bytecode cache cannot be used as is: its default pyc is validated by the
source file's mtime and size, not by the bytes that run. This room uses the other pyc form the
import system defines (PEP 552, "checked hash-based pyc"), under its own optimisation tag
(``__pycache__/<stem>.<cache tag>.opt-dsv41o<N>.pyc`` beside the feature file, a name the
interpreter neither reads nor writes; ``N`` is the optimisation level, ``-O`` / ``-OO``, which
decides the code as much as the bytes do: asserts, ``__debug__`` and docstrings). Its header holds ``importlib.util.source_hash`` of the source it was
compiled from; it is used only when that hash equals the hash of the verified bytes, its code
names this file, and the file is a regular file owned by this user and writable by no one else.
So what runs is always the compilation of the bytes that were hashed. Without it, compiling
``autotune_keep.py`` costs every activating process about 5 ms (issue 11).

The cache is never needed for correctness: a missing, foreign, damaged, oversized, symlinked,
shared or unreadable pyc is ignored and the source compiled; writing is best effort (a private
temporary file, then ``os.replace``; a read-only, shared or full directory just means no cache, as
for the interpreter's own pycs) and skipped under ``PYTHONDONTWRITEBYTECODE``.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from types import CodeType

from ._files import FEATURE_MAX_BYTES, FileRefused, read_regular

#: optimisation tag of the cache files (``importlib.util.cache_from_source(optimization=...)``):
#: one per optimisation level, as for the interpreter's own pycs (``opt-1``, ``opt-2``), since
#: ``compile`` strips asserts and docstrings at ``-O`` / ``-OO``. ("o<N>": issue 11 review; the
#: earlier untagged name held code compiled with this package's ``__future__`` flags.)
CACHE_TAG = f"dsv41o{sys.flags.optimize}"
#: PEP 552 flags: bit 0 hash-based, bit 1 check the source
_CHECKED_HASH = (0b11).to_bytes(4, "little")
#: largest cache file read (a feature file is capped at FEATURE_MAX_BYTES of source)
CACHE_MAX_BYTES = 4 * FEATURE_MAX_BYTES


def code_of(path: os.PathLike | str, source: bytes) -> CodeType:
    """The code object of ``source`` (the verified bytes of the feature file ``path``), compiled as
    the import system compiles a module (``dont_inherit``: this package's ``__future__`` flags do
    not leak into the feature's code). Taken from the cache when it holds exactly these bytes'
    compilation (see the module docstring); otherwise compiled and the cache written (best
    effort). Raises what ``compile`` raises (SyntaxError, ValueError); never an error of the
    cache."""
    path = os.fspath(path)
    header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH + importlib.util.source_hash(source)
    cache = cache_path(path)
    if cache:
        try:
            data = read_regular(cache, CACHE_MAX_BYTES, follow_symlinks=False, check=_own)
        except OSError:  # missing, another user's, a symlink, a FIFO, a directory...
            data = b""
        if data[:len(header)] == header:
            try:
                code = marshal.loads(memoryview(data)[len(header):])
            except (EOFError, ValueError, TypeError):
                code = None
            if isinstance(code, CodeType) and code.co_filename == path:
                return code
    code = compile(source, path, "exec", dont_inherit=True)
    if cache and not sys.dont_write_bytecode:
        _write(cache, header + marshal.dumps(code))
    return code


def cache_path(path: str) -> str:
    """The cache file of the feature file ``path``, or "" when this interpreter has no cache tag."""
    try:
        return importlib.util.cache_from_source(path, optimization=CACHE_TAG)
    except (NotImplementedError, ValueError):  # sys.implementation.cache_tag is None
        return ""


def _own(st: os.stat_result) -> None:
    """Refuse (FileRefused) a cache file another user owns or may write: its code would run here."""
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise FileRefused("bytecode cache", "is not owned by this user alone")


def _write(cache: str, data: bytes) -> None:
    """Write ``data`` to ``cache`` atomically: a new temporary file beside it (``O_EXCL``, never
    following a link, mode 0644), then ``os.replace`` (which replaces a link at ``cache`` itself,
    never its target). Any OSError leaves no partial file and is not raised."""
    tmp = f"{cache}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, cache)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
