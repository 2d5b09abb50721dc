"""The upgrade gate: would each feature install on an engine release that is not installed?
One cell per feature and release, from the release's source (no install, no import).

Cell states, first match wins:

- ``unreadable``: the release, or a source of it that a requirement needs, could not be read or
  parsed (why; whatever the reader or parser raised);
- ``n/a``: the feature targets another engine distribution (a release where every feature is
  ``n/a`` checked nothing: every cell of it is ``unreadable``, saying so);
- ``fixed-upstream``: the release is in the feature's ``fixed_in`` range (the patch can go);
- ``drifted``: a requirement is missing (what, with the closest name that exists there);
- ``undecided``: a requirement the static check cannot decide (why): never counted as ok;
- ``out-of-range``: the structure is there, the version is outside the feature's ``engine``;
- ``ok``.

A feature "would not install" on a release (``FAILING``) for drifted, undecided, out-of-range
and unreadable.
"""
from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsv41_flags.declare import Feature
from dsv41_flags.state import FAILING, Cell  # noqa: F401  (FAILING: the failing cells' words)
from dsv41_flags.upgrade_gate.releases import Release
from dsv41_flags.upgrade_gate.static_check import Checker
from dsv41_flags.text import exception_text


def cell(feature: Feature, release: Release, checker: Checker | None) -> dict:
    """The gate's cell for ``feature`` on ``release``: ``{"release", "version", "state",
    "detail", "missing", "undecided", "verdicts"}``. ``missing`` and ``undecided`` are the lists
    of a ``status`` row (``status.feature_record``): the drift found (with the closest name) and
    what the static check could not decide; verdicts: one per requires entry (``Verdict``).
    ``checker`` reads ``release.view`` (None when the release is unreadable). Never raises: a
    failure of the check itself is an ``unreadable`` cell naming it."""
    try:
        return _cell(feature, release, checker)
    except Exception as exc:  # noqa: BLE001 - the promise: a cell says why, never a traceback
        return {"release": release.label, "version": release.version, "state": "unreadable",
                "detail": f"the check failed: {exception_text(exc)}", "missing": [],
                "undecided": [], "verdicts": []}


def _cell(feature: Feature, release: Release, checker: Checker | None) -> dict:
    out = {"release": release.label, "version": release.version, "state": "", "detail": "",
           "missing": [], "undecided": [], "verdicts": []}
    if release.error or checker is None:
        return {**out, "state": "unreadable", "detail": release.error or "no source"}
    if not feature.engine:
        return {**out, "state": "n/a", "detail": f"{feature.name} declares no engine"}
    engine = feature.engine_requirement
    if release.name and canonicalize_name(engine.name) != release.name:
        return {**out, "state": "n/a", "detail": f"{feature.name} targets {engine.name}"}
    try:
        version = Version(release.version) if release.version else None
    except InvalidVersion:
        return {**out, "state": "unreadable", "detail": f"unparseable version {release.version!r}"}
    if version is not None and feature.fixed_in and \
            SpecifierSet(feature.fixed_in).contains(version, prereleases=True):
        return {**out, "state": "fixed-upstream",
                "detail": f"{release.version} is in fixed_in {feature.fixed_in}: upstream carries "
                          f"the fix ({', '.join(feature.refs) or 'no refs'})"}
    top = feature.target.split(".")[0]
    if not checker.view.owns(top):  # never answered from the installed environment instead
        piece = f"module {feature.target}"
        return {**out, "state": "drifted", "missing": [piece],
                "detail": f"missing: {piece} (the release has no package {top})",
                "verdicts": [{"requirement": r, "verdict": "missing", "piece": piece, "closest": "",
                              "why": f"the release has no package {top}"} for r in feature.requires]}
    result = checker.check(feature)
    out["verdicts"] = [v.to_dict() for v in result.verdicts]
    if result.unreadable and not result.ok:
        return {**out, "state": "unreadable", "detail": "; ".join(result.unreadable)}
    missing = [v for v in result.verdicts if v.verdict == "missing"]
    undecided = [v for v in result.verdicts if v.verdict == "undecided"]
    in_range = version is not None and engine.specifier.contains(version, prereleases=True)
    range_note = "" if in_range else (f"version unknown, range {feature.engine}" if version is None
                                      else f"{release.version} is outside {feature.engine}")
    if missing or undecided:
        out["missing"] = list(dict.fromkeys(v.describe(closest=True) for v in missing))
        out["undecided"] = list(dict.fromkeys(v.describe() for v in undecided))
        state = "drifted" if missing else "undecided"
        detail = "; ".join(([f"missing: {'; '.join(out['missing'])}"] if missing else [])
                           + out["undecided"])
        return {**out, "state": state, "detail": detail + (f" ({range_note})" if range_note else "")}
    if not in_range:
        return {**out, "state": "out-of-range", "detail": f"{range_note}; structure ok"}
    return {**out, "state": "ok", "detail": f"structure ok, {release.version} in {feature.engine}"}


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
