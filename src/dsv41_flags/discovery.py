"""Discovery of feature declarations: a features directory plus the entry-point group
``dsv41_flags.features``.

Each module in the directory declares ``FEATURE = Feature(...)`` (or ``FEATURES = [...]``).
Modules are imported under the private package name ``dsv41_flags_features.<stem>``, never as a
top-level ``features`` package (which could shadow or be shadowed by another one).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path
from typing import Sequence

from dsv41_flags.declare import CHECKED_BY_LAUNCH, Feature
from dsv41_flags.names import RESERVED_KEYS, suggest
from dsv41_flags.errors import DeclarationError
from dsv41_flags.files import FEATURE_MAX_BYTES, FileRefused, read_regular
from dsv41_flags.fingerprint import check_volatile_declarations

ENTRY_POINT_GROUP = "dsv41_flags.features"
PACKAGE = "dsv41_flags_features"


def _features_of(obj, origin: str, sha256: str = "") -> list[Feature]:
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
    return [dataclasses.replace(f, source=origin, source_sha256=sha256) for f in found]


def _import_file(path: Path, source: bytes):
    """Import the feature module at ``path`` by executing ``source`` (the bytes read once, whose
    sha256 the launch records: what is hashed is what runs)."""
    if PACKAGE not in sys.modules:
        pkg = types.ModuleType(PACKAGE)
        pkg.__path__ = []
        sys.modules[PACKAGE] = pkg
    name = f"{PACKAGE}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
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
    return [(ep.name, ep.value) for ep in installed_entry_points(ENTRY_POINT_GROUP)]


def installed_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of ``group``: what ``importlib.metadata.entry_points(group=
    group)`` returns (the first distribution of each name along ``sys.path``, in that order), read
    the same way, but only the distributions whose ``entry_points.txt`` names ``group`` in a
    section header are parsed, and distribution names are worked out only when one does: beside
    sglang, a few of the hundreds installed (issue 11: the parent's scan). Every call reads the
    files again (a distribution installed meanwhile is seen). Raises what importlib.metadata
    raises on an unreadable ``entry_points.txt`` of a distribution it would read."""
    header = f"[{group}]"  # importlib.metadata reads a header as the line stripped of [ and ]
    dists: list[importlib.metadata.Distribution] = []
    names: list[str] = []  # names of dists[:len(names)], worked out on demand

    def shadowed(dist) -> bool:
        """Whether a distribution of the same name comes earlier along sys.path."""
        while len(names) < len(dists):  # importlib.metadata's own key for "the same distribution"
            names.append(dists[len(names)]._normalized_name)
        return dist._normalized_name in names

    found: list[importlib.metadata.EntryPoint] = []
    for dist in importlib.metadata.distributions():
        if not hasattr(type(dist), "_normalized_name"):  # pragma: no cover - the library's scan
            return list(importlib.metadata.entry_points(group=group))
        try:
            text = dist.read_text("entry_points.txt")
        except Exception:  # the library never reads a shadowed distribution's file
            if shadowed(dist):
                dists.append(dist)
                continue
            raise
        if text and header in text and not shadowed(dist):
            found.extend(dist.entry_points.select(group=group))
        dists.append(dist)
    return found


def discover(features_dir: Path | None, *, entry_points: bool | list[tuple[str, str]] = True,
             sources: dict[Path, bytes] | None = None, checked: bool = False) -> tuple[Feature, ...]:
    """Load every feature: ``*.py`` in ``features_dir`` (sorted, ``_``-prefixed files skipped) and
    the entry points of group ``dsv41_flags.features`` (``entry_points``: True = scan the installed
    distributions, False = none, a list of ``(name, value)`` = exactly those, as in a snapshot);
    ``sources``: path -> bytes of the feature files to load instead of reading ``features_dir``
    (the snapshot's verified files). Each feature gets ``source`` and ``source_sha256``.

    ``checked``: the launching process already checked these declarations (a child re-reading
    the launch's feature set): their version ranges are not parsed again (``CHECKED_BY_LAUNCH``).

    Returns features sorted by name. Raises DeclarationError naming the file (or entry point) on
    a module that fails to import, declares nothing, declares a duplicate name or key, or a
    volatile name that matches no flag, option or engine variable prefix.
    """
    token = CHECKED_BY_LAUNCH.set(checked)
    try:
        return _discover(features_dir, entry_points, sources, checked)
    finally:
        CHECKED_BY_LAUNCH.reset(token)


def _discover(features_dir: Path | None, entry_points: bool | list[tuple[str, str]],
              sources: dict[Path, bytes] | None, checked: bool) -> tuple[Feature, ...]:
    features: list[Feature] = []
    if sources is None and features_dir is not None and features_dir.is_dir():
        sources = {}
        for path in sorted(p for p in features_dir.iterdir() if p.name.endswith(".py")):  # *.py
            if not path.name.startswith("_"):
                try:  # a regular file directly in the directory: no FIFO, device or symlink
                    data = read_regular(path, FEATURE_MAX_BYTES, follow_symlinks=False)
                    sources[path.resolve()] = data
                except FileRefused as exc:
                    raise DeclarationError(f"feature file {exc}: a feature file must be a regular "
                                           f"file directly in {features_dir}") from None
                except Exception as exc:
                    raise DeclarationError(f"feature file {path}: cannot read it: "
                                           f"{type(exc).__name__}: {exc}") from None
    for path, source in sorted((sources or {}).items()):
        features.extend(_features_of(_import_file(path, source), str(path),
                                     hashlib.sha256(source).hexdigest()))
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
                features.append(dataclasses.replace(feature, entry_point=(name, value)))
    check_unique(features)
    if not checked:  # against the whole set: one feature may name another's keys
        check_volatile_declarations(features)
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
                    f"known: {', '.join(sorted(names))}"
                    f"{suggest(dep, names) if dep != feature.name else ''}")
    install_order(features)  # an 'after' cycle


def install_order(features: Sequence[Feature]) -> list[Feature]:
    """``features`` ordered so that each comes after the ones its ``after`` names: the standard
    library's ``graphlib.TopologicalSorter``; among the features free to go next, the given order
    is kept. Names in ``after`` outside ``features`` are ignored here (``check_unique`` refuses
    them at discovery). Raises DeclarationError naming the cycle (``a -> b -> a``: a after b after
    a) when ``after`` forms one. The one ordering of the framework (discovery and the runtime)."""
    by_name = {f.name: f for f in features}
    if not any(f.after for f in by_name.values()):
        return list(by_name.values())  # nothing to order (and graphlib stays unimported)
    import heapq
    from graphlib import CycleError, TopologicalSorter

    index = {name: i for i, name in enumerate(by_name)}
    sorter = TopologicalSorter({f.name: [d for d in f.after if d in by_name] for f in by_name.values()})
    try:
        sorter.prepare()
    except CycleError as exc:
        cycle = list(reversed(exc.args[1]))  # graphlib lists predecessors first
        first = by_name[cycle[0]]
        raise DeclarationError(f"feature {first.name!r} ({first.source or 'declared in code'}): "
                               f"'after' forms a cycle: {' -> '.join(cycle)}") from None
    ready = [(index[n], n) for n in sorter.get_ready()]
    heapq.heapify(ready)
    ordered: list[Feature] = []
    while ready:
        _, name = heapq.heappop(ready)
        ordered.append(by_name[name])
        sorter.done(name)
        for n in sorter.get_ready():
            heapq.heappush(ready, (index[n], n))
    return ordered
