"""Where module sources come from, for the static drift check: the ``SourceView`` seam and the
installed environment's view (``InstalledView``), found without importing anything but a
top-level name's finder. Kept apart from ``_static`` (the checker) so that asking whether a kept
check is still valid (``_static_cache``) costs no import of the checker.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol


class SourceView(Protocol):
    """Where module sources come from (the installed environment, a wheel, a source tree)."""

    label: str

    def find(self, module: str) -> tuple[str, bool] | None:
        """``(key, is_package)`` for dotted ``module``, or None when this view has no source."""

    def read(self, key: str) -> bytes:
        """The source bytes of ``key`` (from ``find``): the parser honours a coding declaration."""

    def owns(self, top: str) -> bool:
        """True when top-level package ``top`` belongs to this view (not a fallback)."""


class InstalledView:
    """Sources of the installed environment, found through ``find_spec`` of the top-level name
    (which imports nothing but that name's finder), then by path."""

    label = "installed"

    def find(self, module: str) -> tuple[str, bool] | None:
        parts = module.split(".")
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        if len(parts) == 1:
            if spec.origin and spec.origin.endswith((".py",) + _COMPILED):
                return spec.origin, spec.origin.endswith("__init__.py")
            return ("", True) if spec.submodule_search_locations else None
        for base in spec.submodule_search_locations or ():
            found = find_in_dir(Path(base).joinpath(*parts[1:]))
            if found:
                return found
        return None

    def read(self, key: str) -> bytes:
        return Path(key).read_bytes() if key else b""

    def owns(self, top: str) -> bool:
        return True


_COMPILED = (".so", ".pyd")


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
