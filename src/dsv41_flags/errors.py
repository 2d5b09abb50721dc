"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Exception classes. Every message names the offending feature, key, value and origin."""

from typing import NamedTuple

class FlagsError(Exception):
    """Base class of every error raised by dsv41_flags."""


class DeclarationError(FlagsError):
    """A feature declaration is invalid (bad name, target, version range, option...).

    The message names the feature and, once discovered, the file that declared it.
    """


class Problem(NamedTuple):
    """One problem found while resolving settings.

    key: the setting key (``FOLDED_FENCE``) or variable name concerned.
    origin: where the value came from (``env DSV41_X``, ``/path/settings.toml [tp3]``).
    message: a full sentence naming the value as written and what is accepted.
    severity: ``"error"`` or ``"warning"``.
    """

    key: str
    origin: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return self.message


class SettingsError(FlagsError):
    """Resolution found errors. ``problems`` holds every one (not only the first)."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p.message}" for p in self.problems)
        super().__init__(f"{len(self.problems)} settings problem(s):\n{lines}")

    def __reduce__(self):
        """Pickled with its problems (a multiprocessing worker's error reaches its parent whole;
        the default would call ``SettingsError(message)`` and fail on the text)."""
        return (type(self), (self.problems,))


class DriftError(FlagsError, RuntimeError):
    """Strict mode: an armed feature drifted or its install failed.

    The message names the feature, its target module and what is missing or what raised.
    """


class SnapshotError(FlagsError):
    """The launch's snapshot (``DSV41_SNAPSHOT``) was refused: not written by this version, schema
    or types wrong, a value outside its declared type or bounds, code the launch did not choose
    (an entry point no installed distribution declares, a feature file whose content changed).
    The message names the part refused."""


class ActivationError(FlagsError):
    """An earlier activation of this process failed; ``activate()`` raises it again on retry
    (a half-armed runtime is never handed out). ``__cause__`` is the original error."""


class SwitchError(FlagsError):
    """A live switch was refused: unknown feature, bad value, a feature that is not live-safe, a
    patch that is not in place in this process, or ranks that disagree. The message names the
    feature and says what to do instead. Public as ``dsv41_flags.live.SwitchError``."""


class NotLiveError(SwitchError):
    """The feature is not declared ``live=True``: it may only change at the next launch. Public as
    ``dsv41_flags.live.NotLiveError``."""


class RestoreError(FlagsError):
    """An uninstall could not put back every patched attribute (an owner refused ``setattr`` /
    ``delattr``: a locked metaclass, a read-only type). Every other restore was done; the ones
    listed are still patched and their features report so. ``failures`` holds ``(feature,
    "Owner.attr", reason)`` for each."""

    def __init__(self, failures: list[tuple[str, str, str]]):
        self.failures = list(failures)
        lines = "\n".join(f"  - feature {f!r}: {where}: {why}" for f, where, why in self.failures)
        super().__init__(f"{len(self.failures)} patched attribute(s) could not be restored and "
                         f"are still patched (every other restore was done):\n{lines}")

    def __reduce__(self):
        """Pickled with its failures (as ``SettingsError``)."""
        return (type(self), (self.failures,))


class PatchConflict(FlagsError):
    """A patch was refused because it would not reach code another feature's patch already
    stands for: a base class's attribute patched after a subclass's patch captured it in a form
    that cannot call through at call time (see ``Ledger.patch``). The message names both features,
    both ``Owner.attr`` and what to do."""


class StateError(FlagsError, RuntimeError):
    """A feature was asked to move between two states that ``state.TRANSITIONS`` does not link: a
    framework error (the runtime's own rule broken), never a user's. The message names the
    feature, both states and the states it may move to."""
