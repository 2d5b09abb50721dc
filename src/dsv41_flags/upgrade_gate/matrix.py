"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The upgrade gate: would each feature install on an engine release that is not installed?
One cell per feature and release, from the release's source (no install, no import).

Cell states (``dsv41_flags.state.Cell``), first match wins:

- ``unreadable``: the release, or a source of it that a requirement needs, could not be read or
  parsed (why; whatever the reader or parser raised);
- ``n/a``: the feature targets another engine distribution (a release where every feature is
  ``n/a`` checked nothing: every cell of it is ``unreadable``, saying so);
- ``fixed-upstream``: the release is in the feature's ``fixed_in`` range (the patch can go);
- ``drifted``: a requirement is missing (what, with the closest name that exists there);
- ``undecided``: a requirement the static check cannot decide (why): never counted as ok;
- ``out-of-range``: the structure is there, the version is outside the feature's ``engine``;
- ``ok``.

A feature "would not install" on a release (``Cell.failing``) for drifted, undecided, out-of-range
and unreadable.
"""
from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsv41_flags.declare import Feature
from dsv41_flags.drift import Presence
from dsv41_flags.state import Cell
from dsv41_flags.upgrade_gate.releases import Release
from dsv41_flags.upgrade_gate.static_check import Checker
from dsv41_flags.text import exception_text


def cell(feature: Feature, release: Release, checker: Checker | None) -> dict:
    """The gate's cell for ``feature`` on ``release``: ``{"release", "version", "state",
    "detail", "missing", "undecided", "verdicts"}``. ``missing`` and ``undecided`` are the lists
    of a status record (``status.FeatureStatus``): the drift found (with the closest name) and
    what the static check could not decide; verdicts: one per requires entry (``Verdict``).
    ``checker`` reads ``release.view`` (None when the release is unreadable). Never raises: a
    failure of the check itself is an ``unreadable`` cell naming it."""
    out = {"release": release.label, "version": release.version, "state": Cell.OK, "detail": "",
           "missing": [], "undecided": [], "verdicts": []}
    try:
        return _cell(feature, release, checker, out)
    except Exception as exc:  # noqa: BLE001 - the promise: a cell says why, never a traceback
        return {**out, "state": Cell.UNREADABLE, "detail": f"the check failed: {exception_text(exc)}"}


def _cell(feature: Feature, release: Release, checker: Checker | None, out: dict) -> dict:
    out = dict(out)  # the caller's stays as it was, for an unreadable cell
    if release.error or checker is None:
        return {**out, "state": Cell.UNREADABLE, "detail": release.error or "no source"}
    if not feature.engine:
        return {**out, "state": Cell.NOT_APPLICABLE, "detail": f"{feature.name} declares no engine"}
    engine = feature.engine_requirement
    if release.name and canonicalize_name(engine.name) != release.name:
        return {**out, "state": Cell.NOT_APPLICABLE, "detail": f"{feature.name} targets {engine.name}"}
    try:
        version = Version(release.version) if release.version else None
    except InvalidVersion:
        return {**out, "state": Cell.UNREADABLE, "detail": f"unparseable version {release.version!r}"}
    if version is not None and feature.fixed_in and \
            SpecifierSet(feature.fixed_in).contains(version, prereleases=True):
        return {**out, "state": Cell.FIXED_UPSTREAM,
                "detail": f"{release.version} is in fixed_in {feature.fixed_in}: upstream carries "
                          f"the fix ({', '.join(feature.refs) or 'no refs'})"}
    top = feature.target.split(".")[0]
    if not checker.view.owns(top):  # never answered from the installed environment instead
        piece = f"module {feature.target}"
        return {**out, "state": Cell.DRIFTED, "missing": [piece],
                "detail": f"missing: {piece} (the release has no package {top})",
                "verdicts": [{"requirement": r, "verdict": Presence.MISSING, "piece": piece, "closest": "",
                              "why": f"the release has no package {top}"} for r in feature.requires]}
    result = checker.check(feature)
    out["verdicts"] = [v.to_dict() for v in result.verdicts]
    if result.unreadable and not result.ok:
        return {**out, "state": Cell.UNREADABLE, "detail": "; ".join(result.unreadable)}
    missing = [v for v in result.verdicts if v.verdict == Presence.MISSING]
    undecided = [v for v in result.verdicts if v.verdict == Presence.UNDECIDED]
    in_range = version is not None and engine.specifier.contains(version, prereleases=True)
    range_note = "" if in_range else (f"version unknown, range {feature.engine}" if version is None
                                      else f"{release.version} is outside {feature.engine}")
    if missing or undecided:
        out["missing"] = list(dict.fromkeys(v.describe(closest=True) for v in missing))
        out["undecided"] = list(dict.fromkeys(v.describe() for v in undecided))
        state = Cell.DRIFTED if missing else Cell.UNDECIDED
        detail = "; ".join(([f"missing: {'; '.join(out['missing'])}"] if missing else [])
                           + out["undecided"])
        return {**out, "state": state, "detail": detail + (f" ({range_note})" if range_note else "")}
    if not in_range:
        return {**out, "state": Cell.OUT_OF_RANGE, "detail": f"{range_note}; structure ok"}
    return {**out, "detail": f"structure ok, {release.version} in {feature.engine}"}


def matrix(features: list[Feature], releases: list[Release]) -> list[dict]:
    """Rows ``{"feature", "target", "engine", "cells": [cell per release]}``; each readable
    release is parsed once for every feature."""
    checkers = [Checker(r.view) if r.view is not None and not r.error else None for r in releases]
    rows = [{"feature": f.name, "target": f.target, "engine": f.engine,
             "cells": [cell(f, r, c) for r, c in zip(releases, checkers)]} for f in features]
    for i, release in enumerate(releases):   # a column of nothing but n/a checked nothing
        if rows and all(row["cells"][i]["state"] == Cell.NOT_APPLICABLE for row in rows):
            for row in rows:
                was = row["cells"][i]
                row["cells"][i] = {**was, "state": Cell.UNREADABLE, "detail": (
                    f"nothing was checked on {release.label}: every feature is n/a ({was['detail']})")}
    return rows
