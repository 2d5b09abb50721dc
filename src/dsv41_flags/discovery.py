"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Discovery of feature declarations, from three sources that ADD to each other:

1. the features shipped in the package (``dsv41_flags/_data/features``, ``SHIPPED_FEATURES``);
2. one local features directory (``features_dir`` / ``DSV41_FEATURES_DIR``, or ``features/``
   beside the settings file): the operator's own hot fixes, beside the shipped ones;
3. the entry points of group ``dsv41_flags.features`` of the installed distributions.

A feature name (or setting key) declared by two sources is a DeclarationError naming both.
Each module in a directory declares ``FEATURE = Feature(...)`` (or ``FEATURES = [...]``).
Modules are imported under the private package name ``dsv41_flags_features.<stem>``, never as a
top-level ``features`` package (which could shadow or be shadowed by another one), so a file
name is unique across the two directories too.
"""
from __future__ import annotations

import dataclasses
import hashlib
import heapq
import importlib.metadata
import importlib.util
import sys
import types
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.engine import adapter
from dsv41_flags.names import RESERVED_KEYS, suggest
from dsv41_flags.errors import DeclarationError
from dsv41_flags.files import FEATURE_MAX_BYTES, FileRefused, read_regular
from dsv41_flags.fingerprint import check_volatile_declarations
from dsv41_flags.text import exception_text

ENTRY_POINT_GROUP = "dsv41_flags.features"
PACKAGE = "dsv41_flags_features"
#: the features shipped in the package (the repository's top-level features/ is a symlink to it):
#: always discovered, beside the local directory and the entry points
SHIPPED_FEATURES = Path(__file__).resolve().parent / "_data" / "features"


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
                               f"{exception_text(exc)}") from exc
    return module


def feature_entry_points() -> list[tuple[str, str]]:
    """``(name, value)`` of every installed entry point of group ``dsv41_flags.features``."""
    return [(ep.name, ep.value) for ep in installed_entry_points(ENTRY_POINT_GROUP)]


def installed_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of ``group`` (``importlib.metadata.entry_points``: the first
    distribution of each name along ``sys.path``). Every call reads the installed metadata again
    (a distribution installed meanwhile is seen). Raises what importlib.metadata raises on an
    unreadable ``entry_points.txt``."""
    return list(importlib.metadata.entry_points(group=group))


def with_engine_default(features: Sequence[Feature]) -> list[Feature]:
    """``features`` with every ``engine=None`` (not declared) replaced by the installed engine
    adapter's range (``dsv41_flags.engine.adapter().default_range``); the adapter is looked up
    only when a feature needs it. Raises FlagsError when a declared adapter cannot be loaded."""
    if all(f.engine is not None for f in features):
        return list(features)
    default = adapter().default_range
    return [f if f.engine is not None else dataclasses.replace(f, engine=default) for f in features]


def discover(features_dir: Path | None, *, entry_points: bool | list[tuple[str, str]] = True,
             sources: dict[Path, bytes] | None = None) -> tuple[Feature, ...]:
    """Load every feature: ``*.py`` (sorted, ``_``-prefixed files skipped) in the shipped
    directory ``SHIPPED_FEATURES`` and in ``features_dir`` (the local directory, None: none; the
    shipped directory itself adds nothing), and the entry points of group
    ``dsv41_flags.features`` (``entry_points``: True = scan the installed distributions, False =
    none, a list of ``(name, value)`` = exactly those, as in a snapshot); ``sources``: path ->
    bytes of the feature files to load instead of reading the directories (the snapshot's
    verified files). Each feature gets ``source`` and ``source_sha256``, and the engine adapter's
    range when it declares no ``engine`` (``with_engine_default``). Every declaration is
    validated the same way whoever calls.

    Returns features sorted by name. Raises DeclarationError naming the file (or entry point) on
    a module that fails to import or declares nothing; naming both sources on a feature name or
    key declared twice (shipped, local or installed) or two feature files of the same name in
    the two directories; on a volatile name that matches no flag, option or engine variable
    prefix.
    """
    features: list[Feature] = []
    if sources is None:
        sources, stems = {}, {}
        for directory in feature_directories(features_dir):
            if directory.is_dir():
                _read_directory(directory, sources, stems)
    for path, source in sorted(sources.items()):
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
                raise DeclarationError(f"{origin}: loading raised {exception_text(exc)}") from exc
            for feature in _features_of(obj, origin):
                features.append(dataclasses.replace(feature, entry_point=(name, value)))
    check_unique(features)
    check_volatile_declarations(features)  # against the whole set: one may name another's keys
    return tuple(sorted(with_engine_default(features), key=lambda f: f.name))


def feature_directories(features_dir: Path | None) -> list[Path]:
    """The directories features are read from, in order: ``SHIPPED_FEATURES``, then
    ``features_dir`` unless it is the shipped one (compared resolved)."""
    dirs = [SHIPPED_FEATURES]
    if features_dir is not None:
        try:
            same = Path(features_dir).resolve() == SHIPPED_FEATURES
        except (OSError, RuntimeError):  # a symlink loop: read (and refused) below
            same = False
        if not same:
            dirs.append(Path(features_dir))
    return dirs


def _read_directory(directory: Path, sources: dict[Path, bytes], stems: dict[str, Path]) -> None:
    """Add ``path -> bytes`` of every ``*.py`` directly in ``directory`` (``_``-prefixed skipped)
    to ``sources``. Raises DeclarationError for a file that is not a regular file, cannot be read,
    or has the module name of a file of another directory (``stems``: stem -> first path)."""
    for path in sorted(p for p in directory.iterdir() if p.name.endswith(".py")):  # *.py
        if path.name.startswith("_"):
            continue
        other = stems.get(path.stem)
        if other is not None:
            raise DeclarationError(
                f"feature file {path} and feature file {other} are both named {path.name}: "
                f"features from {other.parent} and {directory} are loaded side by side (module "
                f"{PACKAGE}.{path.stem}), so a file name and a feature name are unique across "
                f"them; to change a shipped feature, give your copy another file and feature name "
                f"and turn the shipped one off")
        try:  # a regular file directly in the directory: no FIFO, device or symlink
            data = read_regular(path, FEATURE_MAX_BYTES, follow_symlinks=False)
            sources[path.resolve()] = data
        except FileRefused as exc:
            raise DeclarationError(f"feature file {exc}: a feature file must be a regular "
                                   f"file directly in {directory}") from None
        except Exception as exc:
            raise DeclarationError(f"feature file {path}: cannot read it: "
                                   f"{exception_text(exc)}") from None
        stems[path.stem] = path


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
                    f"{other.name!r} ({other.source}): feature names and setting keys are unique "
                    f"across the shipped features, the local features directory and the "
                    f"installed entry points")
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
        return list(by_name.values())  # nothing to order
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
