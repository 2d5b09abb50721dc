"""Engine releases read in place, for the upgrade gate (issue 14): a wheel file (read with
zipfile: no install, no import), an unpacked source tree (a site-packages directory or a
checkout), or a requirement such as ``sglang==0.5.24`` fetched with ``pip download --no-deps``
into a cache directory and reused.

The cache directory is ``$XDG_CACHE_HOME/dsv41-flags/engines`` (``~/.cache/...`` when unset). A
download goes to a temporary directory inside it and is moved in whole: never a half-written
wheel in the cache. Nothing in the cache is ever deleted.
"""
from __future__ import annotations

import ast
import email.parser
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from dsv41_flags.upgrade_gate.sources import SourceView, find_in_dir

PIP_TIMEOUT_S = 900

#: sub-directories of a source checkout that may hold the top-level package (the engine's own
#: repository keeps it under ``python/``, many projects under ``src/``)
CHECKOUT_LAYOUTS = ("", "python", "src")


def version_from_tree(base: Path, top: str) -> str | None:
    """The version written in a source tree without metadata: the first string assigned to
    ``__version__`` in ``<top>/_version.py`` (written at build time by setuptools-scm, as for
    sglang) or ``<top>/version.py``; else None. Reads, never imports."""
    for name in ("_version.py", "version.py"):
        try:
            tree = ast.parse((base / top / name).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    return node.value.value
    return None


def cache_dir() -> Path:
    """Where fetched engine wheels are kept: ``$XDG_CACHE_HOME/dsv41-flags/engines``, else
    ``~/.cache/dsv41-flags/engines``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsv41-flags" / "engines"


class WheelView:
    """Module sources inside a wheel, read with zipfile (nothing extracted, nothing imported)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = path.name
        self._zip = zipfile.ZipFile(path)
        self._names = set(self._zip.namelist())
        self._dirs = {n.rsplit("/", 1)[0] for n in self._names if "/" in n}
        self._dirs |= {d.rsplit("/", i)[0] for d in list(self._dirs) for i in range(1, d.count("/") + 1)}
        self.tops = {n.split("/")[0] for n in self._names if "/" in n} | \
            {n[:-3] for n in self._names if "/" not in n and n.endswith(".py")}
        self.tops = {t for t in self.tops if not t.endswith((".dist-info", ".data"))}
        self._compiled = {}  # "pkg/mod" -> "pkg/mod.cpython-311-x86_64-linux-gnu.so"
        for n in self._names:
            if n.endswith((".so", ".pyd")):
                head, _, leaf = n.rpartition("/")
                self._compiled.setdefault((head + "/" if head else "") + leaf.split(".")[0], n)

    def find(self, module: str) -> tuple[str, bool] | None:
        rel = module.replace(".", "/")
        if rel + ".py" in self._names:
            return rel + ".py", False
        if rel + "/__init__.py" in self._names:
            return rel + "/__init__.py", True
        if rel in self._compiled:
            return self._compiled[rel], False
        return ("", True) if rel in self._dirs else None

    def read(self, key: str) -> bytes:
        return self._zip.read(key) if key else b""

    def owns(self, top: str) -> bool:
        return top in self.tops

    def children(self, module: str) -> list[str]:
        """Names of the submodules of package ``module``."""
        prefix = module.replace(".", "/") + "/"
        out = set()
        for n in self._names | self._dirs:
            if n.startswith(prefix):
                head = n[len(prefix):].split("/")[0]
                out.add(head[:-3] if head.endswith(".py") else head)
        return sorted(out - {"__init__", ""})

    def metadata(self) -> dict[str, str]:
        """``Name`` and ``Version`` from the wheel's ``*.dist-info/METADATA`` ({} when absent)."""
        meta = next((n for n in self._names if n.count("/") == 1 and
                     n.split("/")[0].endswith(".dist-info") and n.endswith("/METADATA")), None)
        if meta is None:
            return {}
        msg = email.parser.HeaderParser().parsestr(self._zip.read(meta).decode("utf-8", "replace"))
        return {k: msg[k] for k in ("Name", "Version") if msg[k]}


class TreeView:
    """Module sources under a directory that holds top-level packages (a site-packages
    directory, or a checkout's package root)."""

    def __init__(self, base: Path, label: str) -> None:
        self.base = base
        self.label = label

    def find(self, module: str) -> tuple[str, bool] | None:
        return find_in_dir(self.base.joinpath(*module.split(".")))

    def read(self, key: str) -> bytes:
        return Path(key).read_bytes() if key else b""

    def owns(self, top: str) -> bool:
        return (self.base / top).is_dir() or (self.base / f"{top}.py").is_file()

    def children(self, module: str) -> list[str]:
        path = self.base.joinpath(*module.split("."))
        if not path.is_dir():
            return []
        return sorted({p.stem for p in path.iterdir() if p.suffix == ".py" or p.is_dir()} - {"__init__"})


@dataclass(frozen=True)
class Release:
    """One engine release to check against.

    spec: as given on the command line; name: distribution name (canonical, ``sglang``);
    version: from its metadata ("" when unknown); where: the wheel or directory read;
    view: its module sources (None when unreadable); error: why it is unreadable ("" if not).
    """

    spec: str
    name: str = ""
    version: str = ""
    where: str = ""
    view: SourceView | None = None
    error: str = ""

    @property
    def label(self) -> str:
        """Column title: ``sglang 0.5.23`` (or the spec when unreadable)."""
        return f"{self.name} {self.version}".strip() if self.name and not self.error else self.spec


def open_release(spec: str, engines: tuple[str, ...] = (), tops: tuple[str, ...] = (),
                 cache: Path | None = None) -> Release:
    """Open ``spec`` (a wheel file, a source tree, or a requirement fetched into ``cache``).

    engines: distribution names the features target (``Feature.engine``; a source tree's version
    is looked up under them); tops: the top-level packages of their targets (where a source
    tree's package root is; a tree is unreadable without them).
    Never raises for a bad spec: the Release carries ``error`` (unreadable, and why).
    """
    path = Path(spec).expanduser()
    if path.is_file():
        return _open_wheel(spec, path)
    if path.is_dir():
        return _open_tree(spec, path, engines, tops)
    if path.suffix == ".whl" or os.sep in spec:
        return Release(spec, error=f"no such file or directory: {spec}")
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        return Release(spec, error=f"{spec!r} is neither a wheel file, a directory, nor a requirement "
                                   f"like NAME==VERSION ({exc})")
    return _fetch(spec, req, cache or cache_dir())


def _open_wheel(spec: str, path: Path) -> Release:
    try:
        view = WheelView(path)
    except (zipfile.BadZipFile, OSError) as exc:
        return Release(spec, where=str(path), error=f"{path} is not a readable wheel ({exc})")
    meta = view.metadata()
    name, version = meta.get("Name", ""), meta.get("Version", "")
    if not (name and version):
        try:
            wname, wversion, _, _ = parse_wheel_filename(path.name)
            name, version = name or str(wname), version or str(wversion)
        except InvalidWheelFilename:
            return Release(spec, where=str(path), error=f"{path} has no METADATA with a name and version")
    return Release(spec, str(canonicalize_name(name)), version, str(path), view)


def _open_tree(spec: str, root: Path, engines: tuple[str, ...], tops: tuple[str, ...]) -> Release:
    root = root.resolve()
    candidates = [root / sub if sub else root for sub in CHECKOUT_LAYOUTS]
    if root.name in tops and (root / "__init__.py").is_file():
        candidates.insert(0, root.parent)
    base = next((c for c in candidates if any((c / t).is_dir() for t in tops)), None)
    if not tops:
        return Release(spec, where=str(root), error="no feature is checked, so no package to look "
                                                    "for in the tree")
    if base is None:
        return Release(spec, where=str(root), error=f"{root} holds none of the packages "
                       f"{', '.join(tops)} (looked in {', '.join(str(c) for c in candidates)})")
    name, version = engines[0] if engines else "", ""
    for engine in engines:
        for info in sorted(base.glob("*.dist-info")):
            dist = info.name[: -len(".dist-info")].rsplit("-", 1)
            if canonicalize_name(dist[0]) == canonicalize_name(engine) and len(dist) == 2:
                name, version = engine, dist[1]
                break
        if version:
            break
    if not version:
        version = next((v for t in tops if (v := version_from_tree(base, t))), None) or ""
    if not version:
        version = _pyproject_version(root, base)
    return Release(spec, str(canonicalize_name(name)) if name else "", version, str(base),
                   TreeView(base, str(base)))


def _pyproject_version(*dirs: Path) -> str:
    for d in dirs:
        try:
            data = tomllib.loads((d / "pyproject.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        version = data.get("project", {}).get("version")
        if isinstance(version, str):
            return version
    return ""


def _cached(req: Requirement, cache: Path) -> Path | None:
    """A wheel in ``cache`` that an exact pin (``name==version``) asks for, or None."""
    pins = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if len(pins) != 1 or not cache.is_dir():
        return None
    for whl in sorted(cache.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(whl.name)
        except InvalidWheelFilename:
            continue
        try:
            if name == canonicalize_name(req.name) and version == Version(pins[0].version):
                return whl
        except InvalidVersion:
            continue
    return None


def _fetch(spec: str, req: Requirement, cache: Path) -> Release:
    found = _cached(req, cache)
    if found is not None:
        return _open_wheel(spec, found)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=cache))
    except OSError as exc:
        return Release(spec, error=f"cannot create the engine cache {cache}: {exc.strerror or exc}")
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(tmp), str(req)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Release(spec, error=f"pip download {req} did not finish within {PIP_TIMEOUT_S} s")
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
            why = lines[-1].strip() if lines else f"exit code {proc.returncode}, no wheel"
            return Release(spec, error=f"pip download {req} failed (is the package registry "
                                       f"reachable?): {why}")
        final = cache / wheels[0].name
        os.replace(wheels[0], final)
        return _open_wheel(spec, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
