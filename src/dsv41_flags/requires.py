"""What a feature requires, parsed: its engine range and its ``requires`` entries.

``Feature`` keeps the text it was declared with (``engine="sglang>=0.5.23,<0.6"``,
``requires=("Cls.method(param)",)``); this room parses it for those who check it: declaration
validation in the launching process, the drift check when a target is imported, the static check
and the upgrade gate. A child activating from the snapshot never imports it (nor packaging) until
one of its targets is imported.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsv41_flags.declare import DOTTED_NAME
from dsv41_flags.errors import DeclarationError

if TYPE_CHECKING:  # pragma: no cover
    from packaging.specifiers import SpecifierSet

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
        from packaging.specifiers import SpecifierSet

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


#: one plain comparison: ``<``, ``<=``, ``>``, ``>=``, ``==`` or ``!=`` and a release number of
#: ASCII digits and dots (no epoch, pre-, post-, dev- or local part, no wildcard, no ``~=``)
_PLAIN_ITEM = r"[ \t]*(?:[<>]=?|[=!]=)[ \t]*[0-9]+(?:\.[0-9]+)*[ \t]*"
#: compiled on first use (``re``'s cache): a child re-reading checked declarations never needs it
_PLAIN_RANGE = rf"(?:{_PLAIN_ITEM}(?:,{_PLAIN_ITEM})*)?"


def plain_range(text: str) -> bool:
    """True when ``text`` (a version range without the distribution name, ``">=0.5.23,<0.6"``;
    "" = any version) is in the plain form: comma-separated comparisons (``<``, ``<=``, ``>``,
    ``>=``, ``==``, ``!=``) of release numbers made of ASCII digits and dots, spaces or tabs
    around them. Every such text is a valid packaging ``SpecifierSet`` (a subset of PEP 440's
    grammar; ``tests/unit/test_declare_ranges.py`` checks it against packaging), so a declaration
    whose ranges are plain needs no version parser to be validated. False says nothing about
    validity: packaging decides (``Feature._check_parsed``)."""
    return re.fullmatch(_PLAIN_RANGE, text) is not None


def plain_engine_range(text: str) -> bool:
    """True when ``text`` is a distribution name followed by a plain range (``plain_range``):
    ``"sglang>=0.5.23,<0.6"``. False says nothing about validity (packaging decides)."""
    m = _ENGINE.match(text)
    return m is not None and plain_range(m["spec"] or "")
