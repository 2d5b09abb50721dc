"""The static drift check of the installed engine, remembered across commands (issue 11).

``status``, ``check``, ``validate`` and ``run`` parse each armed feature's target source with
``ast`` and follow it (``_static.Checker``): about 20 ms per command for the two shipped features,
plus importing ``_static`` itself. The answer depends only on what the check looked at, so it is
kept with a record of exactly that and reused while every recorded input is unchanged:

- the question: the feature's target and ``requires`` texts, the checker's own code (sha256 of
  ``_static.py``, ``_sources.py``, ``_drift.py``, ``_declare.py``, ``_requires.py`` and this
  module) and the interpreter (``sys.version``, ``sys.executable``: standard-library modules
  are looked at live);
- every module lookup the check made (``InstalledView.find``: module -> file and whether it is a
  package, or not found), replayed: a module that appears, moves or disappears is a change;
- the sha256 of every source file it read (the bytes themselves, not their size or time: an edit
  within the same second and of the same size is still a change).

A check that read a file it could not read, or looked at a non-stdlib module live (``msgspec``,
``typing_extensions``: their installed version is not recorded), is not kept.

Where: ``$XDG_CACHE_HOME/dsv41-flags/static/`` (``~/.cache/...`` when unset), one JSON file per
target, ``requires`` and interpreter (named by their sha256: a newer checker replaces the entry
instead of adding one). Written atomically (a temporary file in the same directory, then
``os.replace``); an entry is trusted only when it is a regular file owned by this user and holds
the very question asked. The cache is never needed for a correct answer: a directory that cannot
be created or written (read-only, full, another user's), an entry that is corrupt, foreign or
stale, each means the check runs as without a cache; nothing is raised, nothing is deleted.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

#: the modules whose code decides a static verdict (their bytes are part of every question)
_CHECKER_MODULES = ("_static.py", "_sources.py", "_drift.py", "_declare.py", "_requires.py",
                    "_static_cache.py")
#: an entry larger than this is not one of ours
_ENTRY_MAX_BYTES = 4 * 1024 * 1024
_FORMAT = 1


def cache_root() -> Path:
    """The framework's cache directory: ``$XDG_CACHE_HOME/dsv41-flags``, else
    ``~/.cache/dsv41-flags`` (fetched engine releases live in ``engines/``, static checks in
    ``static/``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsv41-flags"


def static_dir() -> Path:
    """Where static check answers are kept: ``cache_root() / "static"``."""
    return cache_root() / "static"


def installed_check(feature) -> tuple[list[dict], str | None]:
    """``(verdicts, source)`` of the static drift check of ``feature`` (a ``Feature``) against the
    installed environment: one ``Verdict.to_dict()`` per ``requires`` entry, and the target's
    source file (None when not found), exactly as ``_static.check_feature(feature)`` gives them.
    Answered from the cache when every input the last check looked at is unchanged, else checked
    (and the answer kept when it can be). Never raises because of the cache."""
    question = _question(feature)
    if question is not None:
        found = _load(question)
        if found is not None:
            return found
    verdicts, source, record = _check(feature)
    if question is not None and record is not None:
        _store(question, record, verdicts, source)
    return verdicts, source


# ---------------------------------------------------------------------------- the question
def _question(feature) -> dict | None:
    """What the answer is a function of, besides the recorded lookups and files; None when the
    checker's own code cannot be read (then nothing is cached)."""
    checker = _checker_digest()
    if checker is None:
        return None
    return {"format": _FORMAT, "target": feature.target, "requires": list(feature.requires),
            "checker": checker, "python": sys.version, "executable": sys.executable}


@lru_cache(maxsize=1)
def _checker_digest() -> str | None:
    """sha256 of the checker's modules (``_CHECKER_MODULES``), read once per process (the code
    running does not change under it); None when one cannot be read."""
    here = Path(__file__).resolve().parent
    code = hashlib.sha256()
    try:
        for name in _CHECKER_MODULES:
            code.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    except OSError:
        return None
    return code.hexdigest()


def _entry_path(question: dict) -> Path:
    """The entry for ``question``: named by its target, ``requires`` and interpreter only, so a
    new version of the checker replaces the answer of the old one instead of adding a file."""
    name = {k: question[k] for k in ("target", "requires", "executable")}
    blob = json.dumps(name, sort_keys=True, separators=(",", ":")).encode()
    return static_dir() / f"{hashlib.sha256(blob).hexdigest()}.json"


# ---------------------------------------------------------------------------- checking
def _check(feature) -> tuple[list[dict], str | None, dict | None]:
    """Run the static check through a recording view: ``(verdicts, source, record)``, the record
    None when the answer must not be kept."""
    from ._static import Checker, InstalledView

    class _Recording(InstalledView):
        """The installed environment, noting every lookup, every file read (its sha256) and
        every non-stdlib module looked at live."""

        def __init__(self) -> None:
            self.finds: dict[str, Any] = {}
            self.files: dict[str, str] = {}
            self.keep = True

        def find(self, module: str):
            found = super().find(module)
            self.finds.setdefault(module, list(found) if found else None)
            return found

        def read(self, key: str) -> bytes:
            try:
                data = super().read(key)
            except BaseException:
                self.keep = False
                raise
            self.files[key] = hashlib.sha256(data).hexdigest()
            return data

        def note_live(self, module: str) -> None:
            self.keep = False

    view = _Recording()
    result = Checker(view).check(feature)
    verdicts = [v.to_dict() for v in result.verdicts]
    record = {"finds": view.finds, "files": view.files} if view.keep else None
    return verdicts, result.source, record


# ---------------------------------------------------------------------------- the entries
def _load(question: dict) -> tuple[list[dict], str | None] | None:
    """The kept answer to ``question`` when its entry is ours, well formed, and every recorded
    lookup and file is as recorded; else None."""
    try:
        from ._files import read_regular

        def ours(st: os.stat_result) -> None:
            if hasattr(os, "getuid") and st.st_uid != os.getuid():
                raise OSError("owned by another user")

        entry = json.loads(read_regular(_entry_path(question), _ENTRY_MAX_BYTES,
                                        follow_symlinks=False, check=ours))
        if not isinstance(entry, dict) or entry.get("question") != question:
            return None
        finds, files, answer = entry["finds"], entry["files"], entry["answer"]
        if not (isinstance(finds, dict) and isinstance(files, dict) and isinstance(answer, dict)):
            return None
        verdicts, source = answer["verdicts"], answer["source"]
        if not (isinstance(verdicts, list) and all(isinstance(v, dict) for v in verdicts)
                and (source is None or isinstance(source, str))):
            return None
        if not _unchanged(finds, files):
            return None
        return verdicts, source
    except Exception:  # noqa: BLE001 - missing, unreadable, foreign, corrupt: checked afresh
        return None


def _unchanged(finds: dict, files: dict) -> bool:
    """True when every recorded module lookup gives the same answer now and every recorded file
    has the same sha256."""
    from ._sources import InstalledView

    view = InstalledView()
    for module, was in finds.items():
        now = view.find(module)
        if (list(now) if now else None) != was:
            return False
    for key, digest in files.items():
        try:
            if hashlib.sha256(view.read(key)).hexdigest() != digest:
                return False
        except OSError:
            return False
    return True


def _store(question: dict, record: dict, verdicts: list[dict], source: str | None) -> None:
    """Keep the answer: written to a temporary file in the cache directory, then renamed over the
    entry (readers see the old entry or the new one, never a part). Any failure (read-only, full,
    not ours) leaves the cache as it was and is not an error."""
    import tempfile

    tmp = None
    try:
        path = _entry_path(question)   # no home directory to be found: RuntimeError, no cache
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"question": question, **record,
                           "answer": {"verdicts": verdicts, "source": source}}).encode()
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        tmp = None
    except Exception:  # noqa: BLE001 - the cache is optional
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
