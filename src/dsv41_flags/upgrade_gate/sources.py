"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Where module sources come from, for the static drift check: the ``SourceView`` seam and the
installed environment's view (``InstalledView``), found without importing anything but a
top-level name's finder. Kept apart from ``static_check`` (the checker) so that finding a source
costs no import of the checker.

Every read is size-capped before a byte is read (``SOURCE_MAX_BYTES``) and refused with
``Unreadable`` (saying which file and why) rather than raising whatever the file system or an
archive raises.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

from dsv41_flags.files import FileRefused, read_regular

#: the largest module source read (bytes): about six times the largest ``.py`` file of the
#: engine's environment (torch's 1.3 MB), so a real source is never refused; a bigger one is
#: ``Unreadable`` before it is read (a hostile release cannot exhaust memory through it)
SOURCE_MAX_BYTES = 8 * 1024 * 1024


class Unreadable(ValueError):
    """A source (or a release's file) that cannot be read or parsed: the message says which file
    and why. Every reader of a release raises this and nothing else for a bad file."""


class SourceView(Protocol):
    """Where module sources come from (the installed environment, a wheel, a source tree)."""

    label: str

    def find(self, module: str) -> tuple[str, bool] | None:
        """``(key, is_package)`` for dotted ``module``, or None when this view has no source."""

    def read(self, key: str) -> bytes:
        """The source bytes of ``key`` (from ``find``), at most ``SOURCE_MAX_BYTES``: the parser
        honours a coding declaration. Raises ``Unreadable`` (only) for a file that cannot be read."""

    def owns(self, top: str) -> bool:
        """True when top-level package ``top`` belongs to this view (not a fallback)."""


def module_parts(module: str) -> list[str] | None:
    """The parts of dotted ``module`` when each is an identifier (so none is ``..``, empty, or
    holds a path separator), else None."""
    parts = module.split(".")
    return parts if all(p.isidentifier() for p in parts) else None


def read_file(path: Path | str, max_bytes: int = SOURCE_MAX_BYTES, *, inside: Path | None = None
              ) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``; a FIFO, a device, a
    directory is refused before reading). ``inside``: the file, symlinks resolved, must lie under
    this directory (resolved too): a symlink pointing out of a release is refused. Raises
    ``Unreadable`` naming the file and why."""
    if inside is not None:
        try:
            real, root = Path(path).resolve(strict=True), inside.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # missing, a symlink loop
            raise Unreadable(f"{path} cannot be read: {exc}") from None
        if not real.is_relative_to(root):
            raise Unreadable(f"{path} resolves to {real}, outside {root}: not read")
        path = real
    try:
        return read_regular(path, max_bytes)
    except FileRefused as exc:
        raise Unreadable(str(exc)) from None


class InstalledView:
    """Sources of the installed environment, found through ``find_spec`` of the top-level name
    (which imports nothing but that name's finder), then by path."""

    label = "installed environment"

    def find(self, module: str) -> tuple[str, bool] | None:
        parts = module_parts(module)
        if parts is None:
            return None
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if len(parts) == 1:
            if spec.origin and spec.origin.endswith((".py",) + COMPILED):
                return spec.origin, spec.origin.endswith("__init__.py")
            return ("", True) if spec.submodule_search_locations else None
        for base in spec.submodule_search_locations or ():
            found = find_in_dir(Path(base).joinpath(*parts[1:]))
            if found:
                return found
        return None

    def read(self, key: str) -> bytes:
        return read_file(key) if key else b""

    def owns(self, top: str) -> bool:
        return True


#: file suffixes of compiled extension modules
COMPILED = (".so", ".pyd")


def find_in_dir(path: Path) -> tuple[str, bool] | None:
    """``(key, is_package)`` for the module at ``path`` (without suffix): ``path.py``,
    ``path/__init__.py``, a compiled ``path.*.so`` / ``.pyd``, or a namespace package directory."""
    if path.with_suffix(".py").is_file():
        return str(path.with_suffix(".py")), False
    if (path / "__init__.py").is_file():
        return str(path / "__init__.py"), True
    if path.parent.is_dir():
        compiled = sorted(path.parent.glob(f"{path.name}.*so")) + sorted(path.parent.glob(f"{path.name}.*pyd"))
        if compiled:
            return str(compiled[0]), False
    return ("", True) if path.is_dir() else None


def locate(module: str) -> Path | None:
    """Installed source file of dotted ``module`` (no import), or None."""
    found = InstalledView().find(module)
    return Path(found[0]) if found and found[0] else None
