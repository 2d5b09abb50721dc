"""File helpers shared by the test tiers."""
from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` atomically (tmp + ``os.replace``) with a strictly later mtime: flagd's
    file watcher reloads only a file whose mtime grew."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    if tmp.stat().st_mtime_ns <= before:
        later = before + 10_000_000
        os.utime(tmp, ns=(later, later))
    os.replace(tmp, path)
