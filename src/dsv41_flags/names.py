"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The names the framework owns, defined once: the ``DSV41_`` prefix, the reserved names (never
flags; each with its type and meaning), the variables that carry them, and the one "did you
mean" suggestion used by every message that names an unknown key.

Standard library and ``values`` (the option kinds) only: every process imports this, a child
activating from the snapshot too.
"""

from typing import Any, Iterable, NamedTuple

from dsv41_flags.values import Kind

ENV_PREFIX = "DSV41_"
#: the prefix of the fleet settings' variables (``DSV41_FLEET_<FIELD>``, ``fleet_settings``)
FLEET_VARIABLE_PREFIX = f"{ENV_PREFIX}FLEET_"
#: the source of a key that no settings file and no variable sets: its declared default (the
#: feature's ``Option.default`` / ``Feature.default``, or a reserved name's default). Never
#: "default", which would read as the ``[default]`` profile.
DECLARED_DEFAULT = "declared default"


class ReservedName(NamedTuple):
    """One name reserved by the framework (a settings key and its ``DSV41_<KEY>`` variable).

    key: upper-case key (``STRICT``); what: one line for ``explain`` and the README;
    kind / default / choices: how a typed reserved *setting* is cast (``kind`` None: not a setting
    read through the resolution, e.g. ``ENV`` picks the profile, ``FINGERPRINT`` is a table read
    on its own).
    """

    key: str
    what: str
    kind: Kind | None = None
    default: Any = None
    choices: tuple[str, ...] = ()

    @property
    def variable(self) -> str:
        """Its variable: ``DSV41_<KEY>``."""
        return ENV_PREFIX + self.key


RESERVED: dict[str, ReservedName] = {r.key: r for r in (
    ReservedName("ENV", "profile (DSV41_ENV)"),
    ReservedName("SETTINGS", "settings files (DSV41_SETTINGS)"),
    ReservedName("SNAPSHOT", "snapshot handed to child processes (DSV41_SNAPSHOT)"),
    ReservedName("LAUNCH", "the launch a child process belongs to, set beside DSV41_SNAPSHOT by "
                           "the launching process (DSV41_LAUNCH: its pid and fingerprint)"),
    ReservedName("STRICT", "strict mode: drift, failed installs and unknown keys are errors",
                 Kind.BOOL, True),
    ReservedName("FEATURES_DIR", "directory of the feature modules", Kind.STR, ""),
    ReservedName("LOG_FORMAT", "log rendering", Kind.CHOICE, "auto", ("auto", "json", "console")),
    ReservedName("LOG_LEVEL", "lowest level logged", Kind.CHOICE, "info",
                 ("debug", "info", "warning", "error")),
    ReservedName("RANK_GUARD", "rank consistency guard mode", Kind.CHOICE, "raise",
                 ("raise", "warn", "off")),
    ReservedName("EXTERNAL", "variables read by adapters not ported yet: known, not flags",
                 Kind.LIST, ()),
    ReservedName("FINGERPRINT", "the fingerprint table (prefixes, volatile, volatile_argv)"),
    ReservedName("FLEET", "the fleet table: the flag service that drives live features "
                          "(docs/fleet.md; DSV41_FLEET_<FIELD> variables)"),
    ReservedName("SECRET_NAMES", "names that mark a secret, added to the engine's (a variable or "
                 "launch option whose name holds one is never kept; see secrecy.is_secret)",
                 Kind.LIST, ()),
    ReservedName("API_KEY", "key sent by set / status --url to the server (DSV41_API_KEY): a "
                 "secret, read only by the CLI, never kept"),
)}
#: every reserved key (settings keys; variables with the DSV41_ prefix): never flags
RESERVED_KEYS: tuple[str, ...] = tuple(RESERVED)
#: typed reserved settings: key -> (kind, default, choices)
RESERVED_TYPES: dict[str, tuple[str, Any, tuple[str, ...]]] = {
    r.key: (r.kind, r.default, r.choices) for r in RESERVED.values() if r.kind is not None}

PROFILE_VAR = RESERVED["ENV"].variable
SETTINGS_VAR = RESERVED["SETTINGS"].variable
SNAPSHOT_VAR = RESERVED["SNAPSHOT"].variable
LAUNCH_VAR = RESERVED["LAUNCH"].variable


def suggest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean X?"`` for the candidate that resembles ``name`` most, or ``""`` when none
    does. The one suggestion of every "matches nothing" message (variables, settings keys,
    fingerprint settings, feature names).

    Names are compared without the ``DSV41_`` prefix and without case (``DSV41_FOLDED_FENSE`` is
    compared as ``FOLDED_FENSE``), so the shared prefix never makes two names look alike: with
    ``difflib``'s ratio of the remaining parts at least ``cutoff``. ``X`` is the candidate as
    given (prefix included)."""
    import difflib

    def bare(text: str) -> str:
        upper = text.upper()
        return upper[len(ENV_PREFIX):] if upper.startswith(ENV_PREFIX) else upper

    by_bare: dict[str, str] = {}
    for candidate in candidates:
        by_bare.setdefault(bare(candidate), candidate)
    match = difflib.get_close_matches(bare(name), list(by_bare), n=1, cutoff=cutoff)
    return f"; did you mean {by_bare[match[0]]}?" if match else ""
