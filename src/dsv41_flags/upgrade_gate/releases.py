"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Engine releases read in place, for the upgrade gate: a wheel file (read with zipfile: no
install, no import), an unpacked source tree (a site-packages directory or a checkout), or a
requirement such as ``sglang==0.5.24`` fetched with ``pip download --no-deps`` into a cache
directory and reused.

A release comes from outside and may be hostile. Every read from it is size-capped before it is
read: a wheel's central directory (``CENTRAL_DIRECTORY_MAX_BYTES``), a member's declared size and
the bytes it actually decompresses to (read in chunks, stopped at the cap: a zip bomb never
allocates beyond it), ``METADATA`` (its header block within ``METADATA_MAX_BYTES``), a source
(``SOURCE_MAX_BYTES``), a tree's ``pyproject.toml`` and version file. A tree's file is read only
when it lies inside the tree, symlinks resolved. Whatever a reader raises (``BadZipFile``,
``NotImplementedError`` for an unknown compression method, ``RuntimeError`` for an encrypted
member, ``zlib.error``, a CRC mismatch, ``EOFError``...) becomes ``Unreadable`` with the reason,
and a release that cannot be opened is a ``Release`` with ``error``: never a traceback.

A release is the distribution the checked features target or it is not read: given their
engines, a wheel whose ``METADATA`` ``Name`` is another distribution, whose file name (PEP 427)
says another name or version than its ``METADATA``, a requirement of another distribution (before
any fetch) and a source tree whose ``pyproject.toml`` or ``PKG-INFO`` names another project are a
``Release`` with ``error`` naming the file, the name found and the one expected. Names compare by
``packaging.utils.canonicalize_name``.

The cache directory is ``$XDG_CACHE_HOME/dsv41-flags/engines`` (``~/.cache/...`` when unset). A
download goes to a temporary directory inside it and is moved in whole: never a half-written
wheel in the cache. Nothing in the cache is ever deleted.
"""
from __future__ import annotations

import ast
import email.parser
import os
import re
import shutil
import struct
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

from dsv41_flags.upgrade_gate.sources import (
    SOURCE_MAX_BYTES, SourceView, Unreadable, find_in_dir, module_parts, read_file)
from dsv41_flags.text import exception_text
from dsv41_flags.files import write_atomic

PIP_TIMEOUT_S = 900
#: the largest zip central directory read (bytes): a real engine wheel's is under 1 MB (about
#: 9,000 members); each entry costs memory once parsed, so it is capped first
CENTRAL_DIRECTORY_MAX_BYTES = 16 * 1024 * 1024
#: how much of ``METADATA`` is read (bytes): its header block must end within it (the long
#: description after it is never needed)
METADATA_MAX_BYTES = 1024 * 1024
#: a tree's ``pyproject.toml`` (bytes; a real one is under 30 KB)
PYPROJECT_MAX_BYTES = 256 * 1024
#: a tree's ``_version.py`` / ``version.py`` (bytes; a real one is under 1 KB): small, since
#: parsing costs up to about 900 bytes of memory per byte of source
VERSION_FILE_MAX_BYTES = 64 * 1024
#: the longest ``Name`` / ``Version`` taken from a release (characters)
FIELD_MAX = 200
#: a distribution name (PEP 508)
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
#: the longest member name and the deepest member path of a wheel read (a real one's are under
#: 200 characters and 12 levels); every directory of every member is listed, so both are capped
MEMBER_NAME_MAX = 1024
MEMBER_DEPTH_MAX = 64
_CHUNK = 1 << 16

#: sub-directories of a source checkout that may hold the top-level package (the engine's own
#: repository keeps it under ``python/``, many projects under ``src/``)
CHECKOUT_LAYOUTS = ("", "python", "src")


def version_from_tree(base: Path, top: str) -> str | None:
    """The version written in a source tree without metadata: the first string assigned to
    ``__version__`` in ``<top>/_version.py`` (written at build time by setuptools-scm, as for
    sglang) or ``<top>/version.py``; else None. Reads, never imports."""
    for name in ("_version.py", "version.py"):
        path = base / top / name
        if not path.is_file():
            continue
        try:
            tree = ast.parse(read_file(path, VERSION_FILE_MAX_BYTES, inside=base).decode("utf-8"))
        except Exception:  # noqa: BLE001 - any parser failure (RecursionError...): not a version
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


def central_directory_size(path: Path) -> int | None:
    """The size in bytes of the zip central directory of ``path``, from its end record (zip64
    too), read from the file's last 64 KiB; None when no end record is found (then zipfile
    refuses the file itself)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        tail_len = min(size, 22 + 0xFFFF + 20 + 56)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    cd_size = struct.unpack("<4s4H2LH", tail[at:at + 22])[5]
    loc = at - 20
    if loc >= 56 and tail[loc:loc + 4] == b"PK\x06\x07" and tail[loc - 56:loc - 52] == b"PK\x06\x06":
        cd_size = struct.unpack("<4sQ2H2L4Q", tail[loc - 56:loc])[7]
    return cd_size


def read_member(archive: zipfile.ZipFile, name: str, max_bytes: int, *, prefix: bool = False,
                where: str = "") -> bytes:
    """The bytes of member ``name`` of ``archive``, at most ``max_bytes``: a declared size over
    the cap is refused before reading; the data is decompressed in chunks and reading stops at
    the cap whatever the header says (``prefix``: the first ``max_bytes`` are returned instead of
    a refusal). Raises ``Unreadable`` naming ``where:name`` and why, for every failure of the
    archive (bad CRC, corrupt deflate data, unknown compression, encryption, truncation)."""
    label = f"{where}:{name}" if where else name
    try:
        info = archive.getinfo(name)
        if info.file_size > max_bytes and not prefix:
            raise Unreadable(f"{label} is {info.file_size} bytes once decompressed, over the limit "
                             f"of {max_bytes} bytes: not read")
        chunks, total = [], 0
        with archive.open(info) as member:
            while total <= max_bytes:
                chunk = member.read(min(_CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        data = b"".join(chunks)
    except Unreadable:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever zipfile / zlib / bz2 / lzma raise
        raise Unreadable(f"{label} cannot be read: {exception_text(exc)}") from None
    if len(data) > max_bytes:
        if prefix:
            return data[:max_bytes]
        raise Unreadable(f"{label} decompresses to more than {max_bytes} bytes (its header says "
                         f"{info.file_size}): not read further")
    return data


class WheelView:
    """Module sources inside a wheel, read with zipfile (nothing extracted, nothing imported).

    Raises ``Unreadable`` when the file is not a zip archive, its central directory is over
    ``CENTRAL_DIRECTORY_MAX_BYTES``, or a member name is over ``MEMBER_NAME_MAX`` characters or
    ``MEMBER_DEPTH_MAX`` levels."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = path.name
        try:
            cd_size = central_directory_size(path)
            if cd_size is not None and cd_size > CENTRAL_DIRECTORY_MAX_BYTES:
                raise Unreadable(f"{path} has a zip central directory of {cd_size} bytes, over the "
                                 f"limit of {CENTRAL_DIRECTORY_MAX_BYTES} bytes: not read")
            self._zip = zipfile.ZipFile(path)
        except Unreadable:
            raise
        except Exception as exc:  # noqa: BLE001 - BadZipFile, OSError, struct.error, ...
            raise Unreadable(f"{path} is not a readable wheel ({exception_text(exc)})") from None
        self._names = set(self._zip.namelist())
        odd = next((n for n in self._names if len(n) > MEMBER_NAME_MAX or n.count("/") > MEMBER_DEPTH_MAX), None)
        if odd is not None:
            raise Unreadable(f"{path} has a member name of {len(odd)} characters and {odd.count('/')} "
                             f"levels (the limits are {MEMBER_NAME_MAX} and {MEMBER_DEPTH_MAX}): not read")
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
        if module_parts(module) is None:
            return None
        rel = module.replace(".", "/")
        if rel + ".py" in self._names:
            return rel + ".py", False
        if rel + "/__init__.py" in self._names:
            return rel + "/__init__.py", True
        if rel in self._compiled:
            return self._compiled[rel], False
        return ("", True) if rel in self._dirs else None

    def read(self, key: str) -> bytes:
        return read_member(self._zip, key, SOURCE_MAX_BYTES, where=self.label) if key else b""

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
        """``Name`` and ``Version`` from the header block of the wheel's ``*.dist-info/METADATA``
        (read up to ``METADATA_MAX_BYTES``). Raises ``Unreadable`` when the wheel has no
        METADATA, it cannot be read, or its header block does not end within the cap."""
        meta = sorted(n for n in self._names if n.count("/") == 1 and
                      n.split("/")[0].endswith(".dist-info") and n.endswith("/METADATA"))
        if not meta:
            raise Unreadable(f"{self.path} has no *.dist-info/METADATA: not a wheel")
        data = read_member(self._zip, meta[0], METADATA_MAX_BYTES, prefix=True, where=self.label)
        text = data.decode("utf-8", "replace").replace("\r\n", "\n")
        if len(data) >= METADATA_MAX_BYTES and "\n\n" not in text:
            raise Unreadable(f"{self.label}:{meta[0]} has no end of its header block within "
                             f"{METADATA_MAX_BYTES} bytes: not read further")
        try:
            msg = email.parser.HeaderParser().parsestr(text.split("\n\n", 1)[0] + "\n")
            return {k: str(msg[k]).strip() for k in ("Name", "Version") if msg[k]}
        except Exception as exc:  # noqa: BLE001 - a malformed header
            raise Unreadable(f"{self.label}:{meta[0]} cannot be parsed: {type(exc).__name__}: "
                             f"{exc}") from None


class TreeView:
    """Module sources under a directory that holds top-level packages (a site-packages
    directory, or a checkout's package root)."""

    def __init__(self, base: Path, label: str) -> None:
        self.base = base
        self.label = label

    def find(self, module: str) -> tuple[str, bool] | None:
        parts = module_parts(module)
        return find_in_dir(self.base.joinpath(*parts)) if parts else None

    def read(self, key: str) -> bytes:
        """The source at ``key``, refused when it resolves outside the tree (a symlink) or is
        over ``SOURCE_MAX_BYTES``."""
        return read_file(key, inside=self.base) if key else b""

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
    Never raises for a bad spec or a hostile release: the Release carries ``error`` (unreadable,
    and why).
    """
    if not spec.strip():
        return Release(spec, error="an empty release spec names no wheel, directory or requirement")
    try:
        return _open(spec, engines, tops, cache)
    except Exception as exc:  # noqa: BLE001 - the promise: a cell says why, never a traceback
        return Release(spec, error=f"{spec} cannot be read: {exception_text(exc)}")


def _not_the_engine(engines: tuple[str, ...], name: str) -> bool:
    """True when distribution ``name`` is none of ``engines`` (compared by
    ``canonicalize_name``); False when ``engines`` is empty (no feature targets an engine: every
    cell is ``n/a`` and ``matrix`` refuses that column)."""
    return bool(engines) and canonicalize_name(name) not in {canonicalize_name(e) for e in engines}


def _not_the_engine_error(where: str, found: str, engines: tuple[str, ...]) -> str:
    return (f"{where} {found!r}, not {' or '.join(repr(e) for e in engines)} (the engine the "
            "checked features target): not the engine, not checked")


def _open(spec: str, engines: tuple[str, ...], tops: tuple[str, ...], cache: Path | None) -> Release:
    path = Path(spec).expanduser()
    if path.exists() and not (path.is_file() or path.is_dir()):
        return Release(spec, where=str(path), error=f"{path} is neither a regular file (a wheel) "
                       "nor a directory: not read")
    if path.is_file():
        return _open_wheel(spec, path, engines)
    if path.is_dir():
        return _open_tree(spec, path, engines, tops)
    if path.suffix == ".whl" or os.sep in spec:
        return Release(spec, error=f"no such file or directory: {spec}")
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        return Release(spec, error=f"{spec!r} is neither a wheel file, a directory, nor a requirement "
                                   f"like NAME==VERSION ({exc})")
    if _not_the_engine(engines, req.name):
        return Release(spec, str(canonicalize_name(req.name)), error=_not_the_engine_error(
            f"requirement {spec!r} names the distribution", req.name, engines))
    return _fetch(spec, req, engines, cache or cache_dir())


def _open_wheel(spec: str, path: Path, engines: tuple[str, ...] = ()) -> Release:
    """A wheel is read by its METADATA (what an install would record): a wheel without one, or
    whose Name or Version is missing or not valid, whose Name is none of ``engines``, or whose
    file name (PEP 427) says another name or version, is unreadable."""
    try:
        view = WheelView(path)
        meta = view.metadata()
    except Unreadable as exc:
        return Release(spec, where=str(path), error=str(exc))
    name, version = meta.get("Name", ""), meta.get("Version", "")
    if not (name and version):
        return Release(spec, where=str(path), error=f"{path}: METADATA has no "
                       f"{'Name' if not name else 'Version'} header")
    if len(name) > FIELD_MAX or not _NAME.fullmatch(name):
        return Release(spec, where=str(path), error=f"{path}: METADATA Name {name[:80]!r} is not a "
                       "distribution name (PEP 508)")
    if not _is_version(version):
        return Release(spec, where=str(path), error=f"{path}: METADATA Version {version[:80]!r} is "
                       "not a version (PEP 440)")
    if _not_the_engine(engines, name):
        return Release(spec, str(canonicalize_name(name)), version, str(path), error=(
            _not_the_engine_error(f"{path}: its METADATA names the distribution", name, engines)))
    try:
        file_name, file_version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return Release(spec, where=str(path), error=f"{path}: the file name is not a wheel's "
                       "(NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl, PEP 427): not read")
    if file_name != canonicalize_name(name) or file_version != Version(version):
        return Release(spec, where=str(path), error=(
            f"{path}: the file name says {file_name} {file_version}, its METADATA says "
            f"{canonicalize_name(name)} {version}: not one release, not read"))
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
    declared = _declared_name(root, base)
    if declared and _not_the_engine(engines, declared[0]):
        return Release(spec, str(canonicalize_name(declared[0])), where=str(base), error=(
            _not_the_engine_error(f"{declared[1]} names the project", declared[0], engines)))
    name, version = declared[0] if declared else engines[0] if engines else "", ""
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
    if version and not _is_version(version):
        return Release(spec, where=str(base), error=f"{root}: version {version[:80]!r} is not "
                       "a version (PEP 440)")
    return Release(spec, str(canonicalize_name(name)) if name else "", version, str(base),
                   TreeView(base, str(base)))


def _is_version(text: str) -> bool:
    """True for a PEP 440 version of at most ``FIELD_MAX`` characters."""
    try:
        return len(text) <= FIELD_MAX and bool(Version(text))
    except InvalidVersion:
        return False


def _declared_name(root: Path, base: Path) -> tuple[str, Path] | None:
    """The project name a source tree declares, and the file that says it: ``[project] name`` of
    ``pyproject.toml``, else the ``Name`` header of ``PKG-INFO`` (an unpacked sdist), in ``root``
    then ``base``; None when neither says one (a site-packages directory). Unreadable or
    malformed files declare nothing."""
    for d in dict.fromkeys((root, base)):
        for file in ("pyproject.toml", "PKG-INFO"):
            path = d / file
            if not path.is_file():
                continue
            try:
                data = read_file(path, PYPROJECT_MAX_BYTES if file == "pyproject.toml" else
                                 METADATA_MAX_BYTES, inside=d).decode("utf-8")
                if file == "pyproject.toml":
                    project = tomllib.loads(data).get("project")
                    name = project.get("name") if isinstance(project, dict) else None
                else:
                    name = email.parser.HeaderParser().parsestr(
                        data.replace("\r\n", "\n").split("\n\n", 1)[0] + "\n")["Name"]
            except Exception:  # noqa: BLE001 - any reader or parser failure: no name from it
                continue
            if isinstance(name, str) and len(name) <= FIELD_MAX and _NAME.fullmatch(name.strip()):
                return name.strip(), path
    return None


def _pyproject_version(*dirs: Path) -> str:
    for d in dirs:
        if not (d / "pyproject.toml").is_file():
            continue
        try:
            data = tomllib.loads(read_file(d / "pyproject.toml", PYPROJECT_MAX_BYTES,
                                           inside=dirs[0]).decode("utf-8"))
        except Exception:  # noqa: BLE001 - any parser failure: no version from this file
            continue
        project = data.get("project")
        version = project.get("version") if isinstance(project, dict) else None
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


def _download_failure(req: Requirement, code: int, stderr: str) -> str:
    """Why ``pip download req`` (exit status ``code``, its ``stderr``) gave no wheel: a version
    the index does not have (with the versions pip saw listed: its ``(from versions: ...)``), the
    index not reached (pip's connection retries), or pip's last error line."""
    listed = re.findall(r"\(from versions: ([^)]*)\)", stderr)
    versions = [v.strip() for v in (listed[-1].split(",") if listed else []) if v.strip() != "none"]
    unreached = re.search(r"Failed to establish a new connection: [^')]*|Temporary failure in name "
                          r"resolution|Read timed out|Could not fetch URL[^\n]*", stderr)
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    why = lines[-1].strip() if lines else f"exit code {code}, no wheel"
    if versions:
        more = f" and {len(versions) - 12} older" if len(versions) > 12 else ""
        return (f"{req} does not exist on the package index: no release matches; the index lists "
                f"{', '.join(versions[-12:])}{more}")
    if unreached:
        return f"pip download {req}: the package index could not be reached ({unreached[0]})"
    if listed:
        return (f"{req}: the package index lists no release of {req.name} (pip: from versions: "
                f"none): no such project there, or an index that answered nothing")
    return f"pip download {req} failed: {why}"


def _fetch(spec: str, req: Requirement, engines: tuple[str, ...], cache: Path) -> Release:
    found = _cached(req, cache)
    if found is not None:
        return _open_wheel(spec, found, engines)
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
            return Release(spec, error=_download_failure(req, proc.returncode, proc.stderr))
        final = write_atomic(cache / wheels[0].name, wheels[0].read_bytes())
        return _open_wheel(spec, final, engines)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
