"""Live drift check: before install, every ``requires`` name (and keyword parameter) must exist on
the imported target, and the installed engine version must be in the feature's range.
Source: the hand-written ``hasattr`` checks of both seeds.
"""
from __future__ import annotations

import importlib.metadata
import inspect
from types import ModuleType

from ._declare import Feature


def engine_version(feature: Feature) -> str | None:
    """Installed version of the feature's engine distribution, or None when not installed."""
    if not feature.engine:
        return None
    try:
        return importlib.metadata.version(feature.engine_requirement.name)
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


def fixed_upstream(feature: Feature) -> str | None:
    """A sentence when the installed engine is in ``feature.fixed_in`` (upstream carries the fix)."""
    if not feature.fixed_in:
        return None
    version = engine_version(feature)
    if version is None:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        if SpecifierSet(feature.fixed_in).contains(Version(version), prereleases=True):
            return (f"{feature.engine_requirement.name} {version} is in fixed_in {feature.fixed_in}: "
                    f"upstream carries the fix ({', '.join(feature.refs) or 'no refs'})")
    except InvalidVersion:
        return None
    return None


def missing_on(feature: Feature, module: ModuleType) -> list[str]:
    """``requires`` entries (or their parameters) missing on the imported ``module``.

    Returns strings like ``"TargetVerifyExecutor.accept_and_finalize"`` or
    ``"TargetVerifyExecutor.accept_and_finalize(folded_accept)"``; empty when all are present.
    """
    missing = []
    for req in feature.parsed_requires:
        obj = module
        found = True
        for part in req.path:
            try:
                obj = inspect.getattr_static(obj, part)
            except AttributeError:
                found = False
                break
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
        if not found:
            missing.append(".".join(req.path))
            continue
        if req.params:
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                missing.append(f"{'.'.join(req.path)}(signature unreadable)")
                continue
            for p in req.params:
                if p not in params:
                    missing.append(f"{'.'.join(req.path)}({p})")
    return missing
