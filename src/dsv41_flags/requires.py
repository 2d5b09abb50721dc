"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

What a feature requires, parsed: its engine range and its ``requires`` entries.

``Feature`` keeps the text it was declared with (``engine="sglang>=0.5.23,<0.6"``,
``requires=("Cls.method(param)",)``); this module parses it for those who check it: declaration
validation, the drift check when a target is imported, the static check and the upgrade gate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from dsv41_flags.errors import DeclarationError

#: a dotted Python name (``pkg.module``, ``Cls.attr``): feature targets and ``requires`` paths
DOTTED_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
_ENGINE = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<spec>[<>=!~].*)?$")
_REQUIRE = re.compile(r"^(?P<path>[A-Za-z_][A-Za-z0-9_.]*?)(\((?P<params>[A-Za-z0-9_,\s]*)\))?$")


@dataclass(frozen=True, slots=True)
class EngineRange:
    """A feature's engine: distribution ``name`` and version ``specifier`` (packaging
    SpecifierSet), parsed from ``"sglang>=0.5.23,<0.6"``. Raises ValueError / InvalidSpecifier."""

    name: str
    specifier: SpecifierSet

    @classmethod
    def parse(cls, text: str) -> "EngineRange":
        """Parse ``"name<spec>"``. Raises ValueError (no name) or InvalidSpecifier (bad range)."""
        m = _ENGINE.match(text)
        if not m:
            raise ValueError("expected a distribution name followed by a version range")
        return cls(m["name"], SpecifierSet(m["spec"] or ""))


@dataclass(frozen=True, slots=True)
class Require:
    """One parsed ``requires`` entry: a dotted path on the target and optional keyword parameters.

    ``"TargetVerifyExecutor.accept_and_finalize(folded_accept)"`` -> path
    ``("TargetVerifyExecutor", "accept_and_finalize")``, params ``("folded_accept",)``.
    """

    text: str
    path: tuple[str, ...]
    params: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Require":
        """Parse a requires entry. Raises DeclarationError when it is malformed."""
        m = _REQUIRE.match(text.strip())
        if not m or not re.fullmatch(DOTTED_NAME, m["path"]):
            raise DeclarationError(
                f"requires entry {text!r} is not 'Name.attr' or 'Name.func(param, ...)'")
        params = tuple(p.strip() for p in (m["params"] or "").split(",") if p.strip())
        return cls(text=text.strip(), path=tuple(m["path"].split(".")), params=params)
