"""Discovery of feature declarations: a features directory plus the entry-point group
``dsv41_flags.features``.

Each module in the directory declares ``FEATURE = Feature(...)`` (or ``FEATURES = [...]``).
Modules are imported under the private package name ``dsv41_flags_features.<stem>``, never as a
top-level ``features`` package (which could shadow or be shadowed by another one).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path

from ._declare import RESERVED_KEYS, Feature
from ._errors import DeclarationError
from ._fingerprint import check_volatile_declarations

ENTRY_POINT_GROUP = "dsv41_flags.features"
PACKAGE = "dsv41_flags_features"

def _features_of(obj, origin: str) -> list[Feature]:
    if isinstance(obj, Feature):
        found = [obj]
    elif isinstance(obj, types.ModuleType):
        found = list(getattr(obj, "FEATURES", ())) or (
            [obj.FEATURE] if hasattr(obj, "FEATURE") else [])
    elif isinstance(obj, (list, tuple)):
        found = list(obj)
    else:
        found = []
    if not found or not all(isinstance(f, Feature) for f in found):
        raise DeclarationError(f"{origin}: declares no Feature (expected FEATURE = Feature(...) "
                               f"or FEATURES = [...])")
    return [_with_source(f, origin) for f in found]


def _with_source(feature: Feature, origin: str) -> Feature:
    object.__setattr__(feature, "source", origin)
    return feature


def _import_file(path: Path):
    if PACKAGE not in sys.modules:
        pkg = types.ModuleType(PACKAGE)
        pkg.__path__ = []
        sys.modules[PACKAGE] = pkg
    name = f"{PACKAGE}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except DeclarationError as exc:
        del sys.modules[name]
        raise DeclarationError(f"{path}: {exc}") from None
    except BaseException as exc:  # SystemExit from a module body included
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise DeclarationError(f"{path}: importing the feature module raised "
                               f"{type(exc).__name__}: {exc}") from exc
    return module


def feature_entry_points() -> list[tuple[str, str]]:
    """``(name, value)`` of every installed entry point of group ``dsv41_flags.features``."""
    return [(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]


def discover(features_dir: Path | None, *,
             entry_points: bool | list[tuple[str, str]] = True) -> tuple[Feature, ...]:
    """Load every feature: ``*.py`` in ``features_dir`` (sorted, ``_``-prefixed files skipped) and
    the entry points of group ``dsv41_flags.features`` (``entry_points``: True = scan the installed
    distributions, False = none, a list of ``(name, value)`` = exactly those, as in a snapshot).

    Returns features sorted by name. Raises DeclarationError naming the file (or entry point) on
    a module that fails to import, declares nothing, declares a duplicate name or key, or a
    volatile name that matches no flag, option or engine variable prefix.
    """
    features: list[Feature] = []
    if features_dir is not None and features_dir.is_dir():
        for path in sorted(features_dir.glob("*.py")):
            if path.name.startswith("_"):
                continue
            features.extend(_features_of(_import_file(path.resolve()), str(path.resolve())))
    if entry_points:
        pairs = feature_entry_points() if entry_points is True else entry_points
        for name, value in pairs:
            ep = importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)
            origin = f"entry point {ep.name} = {ep.value}"
            try:
                obj = ep.load()
            except DeclarationError as exc:
                raise DeclarationError(f"{origin}: {exc}") from None
            except Exception as exc:
                raise DeclarationError(f"{origin}: loading raised {type(exc).__name__}: {exc}") from exc
            for feature in _features_of(obj, origin):
                object.__setattr__(feature, "entry_point", (name, value))
                features.append(feature)
    check_unique(features)
    check_volatile_declarations(features)  # against the whole set: one feature may name another's keys
    return tuple(sorted(features, key=lambda f: f.name))


def check_unique(features: list[Feature]) -> None:
    """Raise DeclarationError when two features share a name or a setting key, a key is reserved by
    the framework, or ``after`` names the feature itself or no known feature."""
    owner: dict[str, Feature] = {}
    for feature in features:
        for key in feature.keys():
            if key in RESERVED_KEYS:
                raise DeclarationError(f"feature {feature.name!r} ({feature.source}): key {key} is "
                                       f"reserved by the framework ({', '.join(RESERVED_KEYS)})")
            other = owner.get(key)
            if other is not None:
                what = "name" if other.name == feature.name else f"setting key {key}"
                raise DeclarationError(
                    f"feature {feature.name!r} ({feature.source}) duplicates the {what} of feature "
                    f"{other.name!r} ({other.source})")
            owner[key] = feature
    names = {f.name for f in features}
    for feature in features:
        for dep in feature.after:
            if dep == feature.name or dep not in names:
                raise DeclarationError(
                    f"feature {feature.name!r} ({feature.source}): after={dep!r} names "
                    f"{'itself' if dep == feature.name else 'no known feature'}; "
                    f"known: {', '.join(sorted(names))}")
    by_name = {f.name: f for f in features}
    for feature in features:  # an 'after' cycle
        seen: set[str] = set()
        todo = [(feature.name, (feature.name,))]
        while todo:
            name, trail = todo.pop()
            for dep in by_name[name].after:
                if dep == feature.name and len(trail) > 1:
                    raise DeclarationError(f"feature {feature.name!r} ({feature.source}): 'after' "
                                           f"forms a cycle: {' -> '.join(trail + (dep,))}")
                if dep in by_name and dep not in seen and dep != feature.name:
                    seen.add(dep)
                    todo.append((dep, trail + (dep,)))
