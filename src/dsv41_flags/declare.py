"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Declarations: ``Feature`` and ``Option``, small frozen dataclasses validated on creation by
small named field validators (``FEATURE_CHECKS``, ``OPTION_CHECKS``: ``check(declaration, field,
value)``, as attrs writes validators)."""
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

#: a field validator, as attrs writes them: ``check(declaration, field name, value)``; raises
#: DeclarationError naming the declaration, the field and the value
Check = Callable[[Any, str, Any], None]


def _where(declaration: Any) -> str:
    if isinstance(declaration, Option):
        return f"option {declaration.name!r}"
    return f"feature {declaration.name!r}" + (f" ({declaration.source})" if declaration.source else "")


def _refuse(declaration: Any, message: str) -> DeclarationError:
    return DeclarationError(f"{_where(declaration)}: {message}")


# ----------------------------------------------------------------------- option validators
def option_name(option: "Option", field: str, value: Any) -> None:
    """A lower-case identifier (its key is ``<FLAG>_<NAME>``)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise DeclarationError(f"option name {value!r} is not a lower-case identifier")


def option_kind(option: "Option", field: str, value: Any) -> None:
    """One of ``values.KINDS``; a ``choice`` has choices."""
    if value not in KINDS:
        raise _refuse(option, f"kind {value!r} is not one of {', '.join(KINDS)}")
    if value == Kind.CHOICE and not option.choices:
        raise _refuse(option, "kind 'choice' needs choices")


def option_default(option: "Option", field: str, value: Any) -> None:
    """A value the option accepts (its kind, bounds and choices)."""
    try:
        option.cast(value)
    except CastError as exc:
        raise _refuse(option, f"default {value!r} is not {exc.accepted}") from None


OPTION_CHECKS: tuple[tuple[str, Check], ...] = (
    ("name", option_name), ("kind", option_kind), ("default", option_default))


# ---------------------------------------------------------------------- feature validators
def feature_name(feature: "Feature", field: str, value: Any) -> None:
    """A lower-case identifier (the flag is its upper-case form)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise _refuse(feature, "name must be a lower-case identifier like 'folded_fence'")


def dotted_module(feature: "Feature", field: str, value: Any) -> None:
    """A dotted module name (``requires.DOTTED_NAME``)."""
    if not isinstance(value, str) or not re.fullmatch(DOTTED_NAME, value):
        raise _refuse(feature, f"{field} {value!r} is not a dotted module name")


def is_callable(feature: "Feature", field: str, value: Any) -> None:
    if not callable(value):
        raise _refuse(feature, f"{field} {value!r} is not callable")


def one_line(feature: "Feature", field: str, value: Any) -> None:
    """A str (one line)."""
    if not isinstance(value, str):
        raise _refuse(feature, f"{field} must be a str (one line), got {type(value).__name__} {value!r}")


def frozen_tuple(feature: "Feature", field: str, value: Any) -> None:
    """A tuple: a list would stay mutable inside a frozen declaration. The refusal gives the fix."""
    if not isinstance(value, tuple):
        hint = (f": write it as a tuple, {tuple(value)!r}" if isinstance(value, list)
                else f": write it as a tuple, ({value!r},)" if isinstance(value, str) else "")
        raise _refuse(feature, f"{field} must be a tuple, got {type(value).__name__} {value!r}{hint}")


def text(empty_means: str, *, none_ok: bool = False) -> Check:
    """A str (None too when ``none_ok``); the refusal says what ``""`` means (``empty_means``)."""
    def check(feature: "Feature", field: str, value: Any) -> None:
        if not isinstance(value, str) and not (none_ok and value is None):
            raise _refuse(feature, f"{field} must be a str, got {type(value).__name__} {value!r} "
                                   f'(write {field}="" for {empty_means})')
    return check


def requirements(feature: "Feature", field: str, value: Any) -> None:
    """Every entry parses as a requirement on the target (``requires.Require.parse``)."""
    try:
        for entry in value:
            Require.parse(entry)
    except DeclarationError as exc:
        raise _refuse(feature, str(exc)) from None


def engine_range(feature: "Feature", field: str, value: Any) -> None:
    """A distribution name and version range as packaging parses it (``"sglang>=0.5,<0.6"``)."""
    if value:
        try:
            EngineRange.parse(value)
        except (InvalidSpecifier, ValueError) as exc:
            raise _refuse(feature, f"engine range {value!r} is not a distribution name and version "
                                   f"range like 'name>=1.2,<2' ({exc})") from None


def version_range(feature: "Feature", field: str, value: Any) -> None:
    """A version range as packaging parses it (``">=0.5.30"``)."""
    if value:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise _refuse(feature, f"{field} {value!r} is not a version range like '>=0.5.30'") from None


def unique_option_names(feature: "Feature", field: str, value: Any) -> None:
    names = [o.name for o in value]
    if len(set(names)) != len(names):
        raise _refuse(feature, f"duplicate option names in {names}")


def boolean(feature: "Feature", field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _refuse(feature, f"{field} must be True or False, got {value!r}")


TUPLE_FIELDS = ("requires", "volatile", "options", "refs", "after")
#: the checks of a Feature, in order: the first that fails is the error
FEATURE_CHECKS: tuple[tuple[str, Check], ...] = (
    ("name", feature_name), ("target", dotted_module), ("install", is_callable),
    ("summary", one_line), *((name, frozen_tuple) for name in TUPLE_FIELDS),
    ("engine", text("no engine: no version check", none_ok=True)),
    ("fixed_in", text("no upstream fix")),
    ("requires", requirements), ("engine", engine_range), ("fixed_in", version_range),
    ("options", unique_option_names), ("default", boolean), ("live", boolean))


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
        for name, check in OPTION_CHECKS:
            check(self, name, getattr(self, name))

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
        for name, check in FEATURE_CHECKS:
            check(self, name, getattr(self, name))

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
