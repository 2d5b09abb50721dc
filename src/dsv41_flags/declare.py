"""Declarations: ``Feature`` and ``Option``, small frozen dataclasses validated on creation."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from dsv41_flags.errors import DeclarationError
from dsv41_flags.names import ENV_PREFIX
from dsv41_flags.requires import DOTTED_NAME, EngineRange, Require
from dsv41_flags.values import KINDS, CastError, Kind, cast

if TYPE_CHECKING:  # pragma: no cover
    from dsv41_flags.patch import InstallContext

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Option:
    """A typed parameter of a feature.

    name: lower-case identifier; its key is ``<FLAG>_<NAME>`` (env ``DSV41_<FLAG>_<NAME>``).
    kind: ``bool | int | float | str | choice | list`` (list = list of str).
    default: the declared default, valid for ``kind`` (checked at declaration).
    minimum / maximum: inclusive bounds for int and float.
    choices: accepted values for ``choice``.
    volatile: True when the option does not change tuned kernels (left out of the fingerprint).
    help: one line for ``explain``.
    Raises DeclarationError on a bad name, kind or default.
    """

    name: str
    kind: str
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    volatile: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise DeclarationError(f"option name {self.name!r} is not a lower-case identifier")
        if self.kind not in KINDS:
            raise DeclarationError(f"option {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == Kind.CHOICE and not self.choices:
            raise DeclarationError(f"option {self.name!r}: kind 'choice' needs choices")
        try:
            cast(self.kind, self.default, minimum=self.minimum, maximum=self.maximum, choices=self.choices)
        except CastError as exc:
            raise DeclarationError(
                f"option {self.name!r}: default {self.default!r} is not {exc.accepted}") from None

    def cast(self, raw: Any) -> Any:
        """Cast a raw value by this option's kind and bounds. Raises CastError."""
        return cast(self.kind, raw, minimum=self.minimum, maximum=self.maximum, choices=self.choices)


@dataclass(frozen=True)
class Feature:
    """One declared patch.

    name: lower-case identifier; the flag key is ``name.upper()`` and its variable
      ``DSV41_<NAME>`` (``folded_fence`` -> ``DSV41_FOLDED_FENCE``).
    target: dotted module name the patch applies to.
    install: ``install(module, ctx) -> None``; patches through ``ctx.patch`` so the ledger can
      uninstall and re-install without stacking wrappers.
    summary: one line.
    requires: names that must exist on the target, ``"Cls.method(param)"`` form allowed.
    engine: requirement string for the engine distribution; None (the default): the installed
      engine adapter's range (``"sglang>=0.5.23,<0.6"`` for sglang, the supported engine
      release), filled in where features are loaded (``discovery.with_engine_default``: building a
      Feature reads no installed metadata). ``""``: no engine (a target in the user's own code): no
      version check, ``n/a`` in the upgrade gate, shown as ``no engine range``. Any other type is
      a DeclarationError naming the feature and the value.
    fixed_in: version range in which upstream carries the fix (feature then skipped), or "".
    volatile: variable names (``DSV41_...``, ``SGLANG_...``) and argv options (``--port``) this
      feature owns that do not change tuned kernels; left out of the launch fingerprint.
    options: typed parameters.
    refs: upstream references (``"sglang#40320"``).
    after: names of features whose patches must be applied before this one.
    default: flag value when no settings file or variable sets it.
    live: True when the feature may be switched while serving (``Runtime.switch``, ``dsv41-flags
      set``): its patch is installed even when the flag is off at boot, bypassed (one attribute
      read per call) until switched on. Declare it only for a patch that is correct to turn on or
      off between two calls (``folded_fence``: it only clones outputs after the verify); a patch
      that acts at boot (``autotune_keep``) is not live-safe.
    Tuple fields must be tuples (a list is refused: a declaration is frozen, copied with
    ``dataclasses.replace``, never changed after construction).
    source: file that declared it (set by discovery); entry_point: ``(name, value)`` when it came
      from the ``dsv41_flags.features`` entry-point group (set by discovery); source_sha256:
      sha256 of the feature file's bytes that were executed (set by discovery).
    Raises DeclarationError, naming the feature, on any invalid field.
    """

    name: str
    target: str
    install: Callable[[ModuleType, "InstallContext"], None]
    summary: str
    requires: tuple[str, ...] = ()
    engine: str | None = None
    fixed_in: str = ""
    volatile: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    refs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    default: bool = False
    live: bool = False
    source: str = field(default="", compare=False)
    entry_point: tuple[str, ...] = field(default=(), compare=False)
    source_sha256: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"feature {self.name!r}" + (f" ({self.source})" if self.source else "")
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise DeclarationError(f"{where}: name must be a lower-case identifier like 'folded_fence'")
        if not isinstance(self.target, str) or not re.fullmatch(DOTTED_NAME, self.target):
            raise DeclarationError(f"{where}: target {self.target!r} is not a dotted module name")
        if not callable(self.install):
            raise DeclarationError(f"{where}: install {self.install!r} is not callable")
        if not isinstance(self.summary, str):
            raise DeclarationError(f"{where}: summary must be a str (one line), got "
                                   f"{type(self.summary).__name__} {self.summary!r}")
        for attr in ("requires", "volatile", "options", "refs", "after"):
            value = getattr(self, attr)
            if not isinstance(value, tuple):  # frozen: a list would stay mutable inside it
                hint = (f": write it as a tuple, {tuple(value)!r}" if isinstance(value, list)
                        else f": write it as a tuple, ({value!r},)" if isinstance(value, str) else "")
                raise DeclarationError(f"{where}: {attr} must be a tuple, got "
                                       f"{type(value).__name__} {value!r}{hint}")
        for attr in ("engine", "fixed_in"):
            value = getattr(self, attr)
            if not isinstance(value, str) and not (attr == "engine" and value is None):
                raise DeclarationError(
                    f"{where}: {attr} must be a str, got {type(value).__name__} {value!r} (write "
                    f'{attr}="" for ' + ("no engine: no version check" if attr == "engine"
                                         else "no upstream fix") + ")")
        self._check_parsed(where)
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise DeclarationError(f"{where}: duplicate option names in {names}")
        if not isinstance(self.default, bool):
            raise DeclarationError(f"{where}: default must be True or False, got {self.default!r}")
        if not isinstance(self.live, bool):
            raise DeclarationError(f"{where}: live must be True or False, got {self.live!r}")

    def _check_parsed(self, where: str) -> None:
        """Parse ``requires`` (``dsv41_flags.requires``) and check ``engine`` and ``fixed_in`` as
        packaging parses them. Raises DeclarationError."""
        try:
            for text in self.requires:
                Require.parse(text)
        except DeclarationError as exc:
            raise DeclarationError(f"{where}: {exc}") from None
        if self.engine:
            try:
                EngineRange.parse(self.engine)
            except (InvalidSpecifier, ValueError) as exc:
                raise DeclarationError(
                    f"{where}: engine range {self.engine!r} is not a distribution name and version "
                    f"range like 'name>=1.2,<2' ({exc})") from None
        if self.fixed_in:
            try:
                SpecifierSet(self.fixed_in)
            except InvalidSpecifier:
                raise DeclarationError(
                    f"{where}: fixed_in {self.fixed_in!r} is not a version range like '>=0.5.30'") from None

    @property
    def flag(self) -> str:
        """The flag key: ``FOLDED_FENCE``."""
        return self.name.upper()

    @property
    def env_var(self) -> str:
        """The flag's variable: ``DSV41_FOLDED_FENCE``."""
        return ENV_PREFIX + self.flag

    @property
    def engine_label(self) -> str:
        """``engine`` as shown to people: the range, ``no engine range`` for ``""``, ``the engine
        adapter's range`` for None (not filled in by discovery)."""
        if self.engine is None:
            return "the engine adapter's range"
        return self.engine or "no engine range"

    @property
    def engine_requirement(self) -> "EngineRange":
        """The parsed ``engine`` range (distribution ``name`` + ``specifier``). Raises ValueError /
        packaging's InvalidSpecifier for a range that was never checked (see ``requires``);
        ValueError for None (the engine adapter's range, not filled in by discovery)."""
        if self.engine is None:
            raise ValueError("engine range not filled in: the engine adapter's range is filled in "
                             "by discovery.with_engine_default")
        return EngineRange.parse(self.engine)

    @property
    def parsed_requires(self) -> tuple[Require, ...]:
        """``requires`` parsed into Require objects. Raises DeclarationError on a malformed entry."""
        return tuple(Require.parse(t) for t in self.requires)

    def keys(self) -> dict[str, Option | None]:
        """Setting keys owned by this feature: its flag (-> None) and each option key (-> Option)."""
        keys: dict[str, Option | None] = {self.flag: None}
        for option in self.options:
            keys[self.option_key(option)] = option
        return keys

    def option_key(self, option: Option) -> str:
        """Setting key of an option: ``<FLAG>_<OPTION>`` (``AUTOTUNE_KEEP_MAX_OLD_COPIES``)."""
        return f"{self.flag}_{option.name.upper()}"
