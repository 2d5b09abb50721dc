"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The resolution value: per key its typed value, its source and the chain of every value that
was set for it (``Resolved``), and the whole result of reading settings (``Resolution``).

Produced by the settings loader (``settings``, in the process that resolves a launch) and read
back from the snapshot by children (``snapshot``, which holds their JSON codec): this module
imports neither Dynaconf nor a TOML parser, so a child that activates from the snapshot imports no
settings machinery.
"""

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from dsv41_flags.errors import Problem, SettingsError

if TYPE_CHECKING:  # pragma: no cover
    from dsv41_flags.declare import Feature

#: the shared read-only empty mapping: default of the records' mapping fields
EMPTY: Mapping[str, Any] = MappingProxyType({})


class Resolved(NamedTuple):
    """One resolved key.

    key: setting key (``FOLDED_FENCE``); feature: owning feature name ("" for reserved keys);
    option: option name or None for a flag; value: typed value; source: where the final value came
    from (``declared default`` / ``<file> [<section>]`` / ``env DSV41_<KEY>``); chain: every
    ``(source, raw value)`` in order of precedence, lowest first.
    """

    key: str
    feature: str
    option: str | None
    value: Any
    source: str
    chain: tuple[tuple[str, Any], ...]


class Resolution(NamedTuple):
    """The result of reading settings.

    profile: active profile; profiles: profiles present in the loaded files; files: settings files
    actually loaded (``settings.local.toml`` included); values: key -> Resolved for every flag and
    option; reserved: typed reserved settings (STRICT, FEATURES_DIR, LOG_FORMAT, LOG_LEVEL,
    RANK_GUARD, EXTERNAL, FINGERPRINT); volatile_sources: volatile name -> who declared it in
    settings; problems: every error and warning; notes: informational remarks for the report;
    reserved_values: typed reserved key -> Resolved with its chain (for ``explain``; only in the
    process that read the settings: not part of the snapshot).
    """

    profile: str
    profiles: tuple[str, ...]
    files: tuple[str, ...]
    values: Mapping[str, Resolved]
    reserved: Mapping[str, Any]
    volatile_sources: Mapping[str, str] = EMPTY
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()
    reserved_values: Mapping[str, Resolved] = EMPTY

    @property
    def strict(self) -> bool:
        """Strict mode (drift, failure and unknown keys are errors)."""
        return bool(self.reserved.get("STRICT", True))

    @property
    def errors(self) -> tuple[Problem, ...]:
        """Problems of severity ``error``."""
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """Problems of severity ``warning``."""
        return tuple(p for p in self.problems if p.severity == "warning")

    def flag(self, feature: "Feature") -> bool:
        """The resolved flag value of ``feature``."""
        return bool(self.values[feature.flag].value)

    def raise_for_errors(self) -> None:
        """Raise SettingsError listing every error problem, if any."""
        if self.errors:
            raise SettingsError(list(self.errors))
