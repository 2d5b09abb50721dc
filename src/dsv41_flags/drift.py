"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Live drift check: before install, every ``requires`` name (and keyword parameter) must exist on
the imported target, and the installed engine version must be in the feature's range.
Source: the hand-written ``hasattr`` checks of the workarounds for sglang#40919 and sglang#40320.
"""
from __future__ import annotations

import importlib.metadata
import inspect
import sys
from dataclasses import asdict, dataclass
from enum import StrEnum
from functools import lru_cache
from types import ModuleType

from dsv41_flags.declare import Feature
from dsv41_flags.state import State
from dsv41_flags.text import exception_text


def engine_version(feature: Feature) -> str | None:
    """Installed version of the feature's engine distribution, or None when not installed.
    Looked up once per distribution name and import path per process (``_installed_version``)."""
    if not feature.engine:
        return None
    return _installed_version(feature.engine_requirement.name, tuple(sys.path))


@lru_cache(maxsize=64)
def _installed_version(name: str, path: tuple) -> str | None:
    """``importlib.metadata.version(name)`` (None when not installed), remembered per import path
    ``path`` (``sys.path`` as a tuple): reading a distribution's metadata parses its whole METADATA
    file (about 5 ms for sglang's), and status asks for it several times per feature."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_problem(feature: Feature) -> str | None:
    """A sentence when the installed engine is outside ``feature.engine``, else None."""
    if not feature.engine:
        return None
    from packaging.version import InvalidVersion, Version

    req = feature.engine_requirement
    version = engine_version(feature)
    if version is None:
        return f"{req.name} is not installed (feature wants {feature.engine})"
    try:
        if not req.specifier.contains(Version(version), prereleases=True):
            return f"{req.name} {version} is outside {feature.engine}"
    except InvalidVersion:
        return f"{req.name} has an unparseable version {version!r}"
    return None


def fixed_upstream(feature: Feature) -> str:
    """A sentence when the installed engine is in ``feature.fixed_in`` (upstream carries the fix),
    else ``""`` (no ``fixed_in``, no engine installed, a version ``fixed_in`` does not hold)."""
    if not feature.fixed_in:
        return ""
    version = engine_version(feature)
    if version is None:
        return ""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        if SpecifierSet(feature.fixed_in).contains(Version(version), prereleases=True):
            return (f"{feature.engine_requirement.name} {version} is in fixed_in {feature.fixed_in}: "
                    f"upstream carries the fix ({', '.join(feature.refs) or 'no refs'})")
    except InvalidVersion:
        return ""
    return ""


class Presence(StrEnum):
    """The verdict words on one ``requires`` entry (a ``str`` enum: JSON carries the word)."""

    OK = "ok"                # present
    MISSING = "missing"      # absent (with the closest name that exists)
    UNDECIDED = "undecided"  # the check could not tell: never counted as ok


OK, MISSING, UNDECIDED = Presence.OK, Presence.MISSING, Presence.UNDECIDED


@dataclass(frozen=True)
class Verdict:
    """One verdict per declared ``requires`` entry.

    requirement: the entry as written (``"TargetVerifyExecutor.accept_and_finalize(folded_accept)"``).
    verdict: a ``Presence`` (ok, missing, undecided: the check could not tell, never counted as ok).
    why: one sentence saying how the verdict was reached.
    piece: for missing / undecided, the first piece that is (``"module sglang.srt.x"``,
      ``"Cls.meth"``, ``"Cls.meth(param)"``); "" when ok.
    closest: for missing, the closest name that does exist in the owner (difflib), or "".
    stops_boot: for undecided, True when the live check at import would refuse it too (a source
      that cannot be read or parsed: its import fails; a parameter only ``**kwargs`` would
      absorb: the live check has the same rule), so a strict boot stops; False for what only the
      live check can decide.
    """

    requirement: str
    verdict: Presence
    why: str = ""
    piece: str = ""
    closest: str = ""
    stops_boot: bool = False

    @property
    def ok(self) -> bool:
        """True only for a decided ``ok``."""
        return self.verdict == OK

    def describe(self, closest: bool = False) -> str:
        """Short text for lists of problems: ``"Cls.meth"`` (with ``closest``: ``"Cls.meth
        (closest: Cls.method)"``), ``"Cls.x (undecided: why)"``."""
        if self.verdict == MISSING:
            return self.piece + (f" (closest: {self.closest})" if closest and self.closest else "")
        if self.why.startswith("unverifiable:"):  # the source itself cannot be read or parsed
            return f"{self.piece or self.requirement} ({self.why})"
        return f"{self.piece or self.requirement} (undecided: {self.why})"

    def to_dict(self) -> dict:
        """JSON form: requirement, verdict, why, piece, closest, stops_boot."""
        return asdict(self)


def _closest(name: str, names) -> str:
    """The existing name most like ``name`` (difflib ratio >= 0.7, else one that contains it or
    that it contains, e.g. a method renamed with a suffix), or ""."""
    import difflib  # only when something is missing: a child process does not pay for it

    names = [n for n in names if isinstance(n, str) and n != name]
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
    if found:
        return found[0]
    if len(name) >= 4:
        near = [n for n in names if len(n) >= 4 and (name in n or n in name)]
        if near:
            return min(near, key=lambda n: (abs(len(n) - len(name)), n))
    return ""


def param_verdict(text: str, owner: str, wanted: tuple[str, ...], params: list[str],
                  var_keyword: bool) -> Verdict:
    """The one parameter rule shared by the live and the static check.

    A required parameter is ok when the signature has a parameter of that name, whatever its
    kind (positional, keyword-only, and also ``*args`` / ``**kwargs`` by their own names, so
    ``empty_context(kwargs)`` is ok for ``def empty_context(*args, **kwargs)``). A name that only
    a ``**kwargs`` parameter would absorb is ``undecided``: the signature cannot tell whether the
    function uses it. Otherwise ``missing``, with the closest parameter name.
    """
    absent = [p for p in wanted if p not in params]
    if not absent:
        return Verdict(text, OK, f"{owner} has parameter(s) {', '.join(wanted)}")
    piece = f"{owner}({', '.join(absent)})"
    if var_keyword:
        return Verdict(text, UNDECIDED, f"{', '.join(absent)} would only be absorbed by **kwargs",
                       piece, stops_boot=True)
    close = _closest(absent[0], params)
    return Verdict(text, MISSING, f"{owner} has no parameter {', '.join(absent)}", piece,
                   f"{owner}({close})" if close else "")


def _live_attr(obj, part: str):
    """``part`` of ``obj`` as Python finds it (``getattr``: a module's ``__getattr__`` and a
    metaclass count), preferring the raw class attribute (so staticmethod / classmethod / property
    objects are seen). Dataclass fields without a class default count as present. Raises
    AttributeError."""
    try:
        return inspect.getattr_static(obj, part)
    except AttributeError:
        pass
    try:
        return getattr(obj, part)
    except AttributeError:
        fields = getattr(obj, "__dataclass_fields__", None)
        if isinstance(obj, type) and isinstance(fields, dict) and part in fields:
            return fields[part]
        raise
    except Exception as exc:  # a lazy attribute whose import fails: reported, never a traceback
        raise AttributeError(f"{part}: {exception_text(exc)}") from None


def verdicts_on(feature: Feature, module: ModuleType) -> list[Verdict]:
    """One live verdict per ``requires`` entry of ``feature`` on the imported ``module``
    (``getattr`` along the path, ``inspect.signature`` for parameters, the rule of
    ``param_verdict``)."""
    out = []
    for req in feature.parsed_requires:
        obj, done = module, []
        for part in req.path:
            try:
                obj = _live_attr(obj, part)
            except AttributeError:
                owner = ".".join(done) or feature.target
                names = dir(obj) if done else list(vars(module))
                close = _closest(part, names)
                out.append(Verdict(req.text, MISSING, f"{owner} has no attribute {part}",
                                   ".".join(done + [part]),
                                   ".".join(done + [close]) if close else ""))
                break
            done.append(part)
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
        else:
            if not req.params:
                out.append(Verdict(req.text, OK, "present on the imported module"))
                continue
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError) as exc:
                out.append(Verdict(req.text, UNDECIDED, f"signature unreadable ({exc})",
                                   f"{'.'.join(req.path)}({', '.join(req.params)})"))
                continue
            params = list(sig.parameters)
            var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            out.append(param_verdict(req.text, ".".join(req.path), req.params, params, var_kw))
    return out


def missing_on(feature: Feature, module: ModuleType) -> list[str]:
    """``requires`` entries not decided ok on the imported ``module``, as short texts
    (``"TargetVerifyExecutor.accept_and_finalize"``, ``"Cls.meth(param)"``, ``"... (undecided:
    why)"``); empty when all are present. An undecided entry counts: never silently ok."""
    return [v.describe() for v in verdicts_on(feature, module) if not v.ok]


# ---------------------------------------------------------------------------------------------
# A feature's drift as status, check, validate and run report it: the verdicts (read from the
# target's source by the static check, or taken from an import in a separate process) split
# into what a boot stops on and what only the live check at import can decide.

#: longest wait for the import check of one feature (``verdicts_by_import``), seconds
IMPORT_TIMEOUT_S = 300


def stops_a_boot(verdict: Verdict) -> bool:
    """Whether ``verdict`` already says what a boot's live check at import would find not ok:
    ``missing``; an ``undecided`` that the live check refuses too (``Verdict.stops_boot``: a
    source that cannot be read or parsed, a parameter only ``**kwargs`` would absorb). Any other
    ``undecided`` is one only the live check can decide: never drift."""
    return verdict.verdict == MISSING or (verdict.verdict == UNDECIDED and verdict.stops_boot)


def split_verdicts(feature: Feature, verdicts, *, by_import: bool = False
                   ) -> tuple[list[str], list[str]]:
    """``(missing, undecided)`` of ``feature`` as short texts (``Verdict.describe``), each once:
    the engine version problem (``version_problem``) first, then every verdict a boot would stop
    on (``stops_a_boot``; with ``by_import``, verdicts of the imported module, every one not ok),
    and in ``undecided`` the verdicts only the live check at import can decide."""
    bad_version = version_problem(feature)
    missing, undecided = [bad_version] if bad_version else [], []
    for v in verdicts:
        if not v.ok:
            (missing if by_import or stops_a_boot(v) else undecided).append(v.describe())
    return list(dict.fromkeys(missing)), list(dict.fromkeys(undecided))


def verdicts_by_import(feature: Feature, features_dir, timeout_s: float = IMPORT_TIMEOUT_S
                       ) -> list[Verdict]:
    """``verdicts_on`` the imported target of ``feature``, the import done in a separate Python
    process (``report_by_import``: this process imports nothing of the engine), with the
    feature found again by name in ``features_dir`` (a ``Path``, discovered as at boot). An
    import that fails, does not finish within ``timeout_s`` seconds, or a process that gives no
    answer makes every requirement ``missing``, with the reason."""
    import json
    import subprocess

    def failed(why: str) -> list[Verdict]:
        piece = f"module {feature.target} ({why})"
        return [Verdict(r, MISSING, piece, piece) for r in (feature.requires or (feature.target,))]

    child = ("import sys; from dsv41_flags.drift import report_by_import; "
             "report_by_import(*sys.argv[1:])")
    try:
        proc = subprocess.run([sys.executable, "-c", child, str(features_dir), feature.name],
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return failed(f"import did not finish within {timeout_s:g} s")
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else \
            f"exit code {proc.returncode}"
        return failed(f"the import check process failed: {last}")
    if isinstance(data, dict):
        return failed(data.get("error", "no answer"))
    return [Verdict(**v) for v in data]


def report_by_import(features_dir: str, name: str) -> None:
    """The child side of ``verdicts_by_import``: discover the features of ``features_dir``,
    import the target of feature ``name`` and print, as one JSON line on stdout, the list of its
    verdicts (``Verdict.to_dict``), or ``{"error": why}`` when its import raised."""
    import importlib
    import json
    from pathlib import Path

    from dsv41_flags.discovery import discover

    feature = {f.name: f for f in discover(Path(features_dir))}[name]
    try:
        module = importlib.import_module(feature.target)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which names the feature
        print(json.dumps({"error": exception_text(exc)}))
        return
    print(json.dumps([v.to_dict() for v in verdicts_on(feature, module)]))


def drifted_text(target: str, missing) -> str:
    """``target T drifted: missing A; B``: the one wording of a drifted target (``missing``: the
    requirement texts not found) in errors, events' messages and the CLI."""
    return f"target {target} {State.DRIFTED}: missing {'; '.join(missing)}"
