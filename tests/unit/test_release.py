"""Releases read in place for the upgrade gate, on small made-up engines: a wheel built here with
zipfile (or byte by byte, for hostile archives), a checkout, the cache of fetched wheels. No
network, no engine."""
import json
import struct
import subprocess
import textwrap
import tracemalloc
import zipfile
import zlib

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.upgrade_gate.releases import open_release

ENGINE_V1 = """
class Runner:
    def step(self, batch, *, fence): ...
"""
ENGINE_V2 = """
class Runner:
    def step_v2(self, batch, *, fence): ...
"""


def make_wheel(where, version, source, name="toyengine"):
    path = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{name}/core.py", textwrap.dedent(source))
        z.writestr(f"{name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


@pytest.fixture
def gate(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "toy.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='toy', target='toyengine.core', install=lambda m, c: None,\n"
        "    summary='s', requires=('Runner.step(fence)',), engine='toyengine>=1.0,<2',\n"
        "    fixed_in='>=1.5')\n")
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ntoy = true\n")

    def run(*specs, extra=()):
        args = ["check", "-s", str(settings), *extra]
        for s in specs:
            args += ["--engine", str(s)]
        return CliRunner().invoke(app, args)
    return run


def test_matrix_over_wheels_json(tmp_path, gate):
    wheels = [make_wheel(tmp_path, "1.0", ENGINE_V1), make_wheel(tmp_path, "1.1", ENGINE_V2),
              make_wheel(tmp_path, "0.9", ENGINE_V1), make_wheel(tmp_path, "1.5", ENGINE_V2)]
    r = gate(*wheels, extra=["--json"])
    data = json.loads(r.stdout)
    cells = data["features"][0]["cells"]
    assert [c["release"] for c in cells] == ["toyengine 1.0", "toyengine 1.1", "toyengine 0.9", "toyengine 1.5"]
    assert [c["state"] for c in cells] == ["ok", "drifted", "out-of-range", "fixed-upstream"]
    assert cells[1]["missing"] == ["Runner.step (closest: Runner.step_v2)"]
    assert cells[1]["verdicts"][0]["closest"] == "Runner.step_v2"
    assert r.exit_code == 1


def test_only_clean_releases_exit_0_and_the_table_is_human(tmp_path, gate):
    r = gate(make_wheel(tmp_path, "1.0", ENGINE_V1))
    assert r.exit_code == 0 and "toyengine 1.0" in r.stdout and "ok" in r.stdout


def test_checkout_layout_and_version_from_pyproject(tmp_path, gate):
    pkg = tmp_path / "co" / "src" / "toyengine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(textwrap.dedent(ENGINE_V2))
    (tmp_path / "co" / "pyproject.toml").write_text('[project]\nname = "toyengine"\nversion = "1.2"\n')
    r = gate(tmp_path / "co", extra=["--json"])
    (cell,) = json.loads(r.stdout)["features"][0]["cells"]
    assert cell["release"] == "toyengine 1.2" and cell["state"] == "drifted"
    assert "closest: Runner.step_v2" in cell["detail"]


def test_a_release_without_the_target_package_is_drifted_not_the_installed_one(tmp_path, gate):
    path = tmp_path / "toyengine-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other/__init__.py", "")
        z.writestr("toyengine-1.0.dist-info/METADATA", "Name: toyengine\nVersion: 1.0\n")
    (cell,) = json.loads(gate(path, extra=["--json"]).stdout)["features"][0]["cells"]
    assert cell["state"] == "drifted" and cell["missing"] == ["module toyengine.core"]


def test_pinned_requirement_reuses_the_cache_without_pip(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    make_wheel(cache, "1.0", ENGINE_V1)

    def no_pip(*a, **k):
        raise AssertionError("pip must not run for a cached pin")
    monkeypatch.setattr(subprocess, "run", no_pip)
    r = open_release("toyengine==1.0", cache=cache)
    assert not r.error and r.version == "1.0" and r.label == "toyengine 1.0"
    assert r.where == str(cache / "toyengine-1.0-py3-none-any.whl")


def test_failed_download_is_unreadable_and_leaves_no_temp(tmp_path, monkeypatch):
    cache = tmp_path / "cache"

    class Proc:
        returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found for toyengine==9\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Proc())
    r = open_release("toyengine==9", cache=cache)
    assert "pip download toyengine==9 failed" in r.error and "No matching distribution" in r.error
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("spec,why", [("not a spec ==", "neither a wheel file"),
                                      ("/nonexistent/x.whl", "no such file")])
def test_bad_specs_say_why(spec, why):
    assert why in open_release(spec).error


def test_engine_and_import_together_are_refused(tmp_path, gate):
    r = gate(make_wheel(tmp_path, "1.0", ENGINE_V1), extra=["--import", "--json"])
    assert r.exit_code == 1 and "--import" in json.loads(r.stdout)["problems"][0]["message"]


# ------------------------------------------------------------------ hostile releases
def raw_zip(path, members):
    """A zip archive written byte by byte: ``members`` is a list of ``(name, data, method, crc,
    size, flags)`` with ``data`` already compressed (what zipfile would refuse to write: a lying
    size, a bad CRC, an unknown method, the encryption flag)."""
    local, central = bytearray(), bytearray()
    for name, data, method, crc, size, flags in members:
        raw = name.encode()
        offset = len(local)
        local += struct.pack("<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, flags, method, 0, 0x21,
                             crc, len(data), size, len(raw), 0) + raw + data
        central += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, flags, method, 0,
                               0x21, crc, len(data), size, len(raw), 0, 0, 0, 0, 0, offset) + raw
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central),
                      len(local), 0)
    path.write_bytes(bytes(local + central) + end)
    return path


def deflated(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zeros_bomb(mib: int) -> bytes:
    """Raw deflate data that decompresses to ``mib`` MiB of zero bytes, about 1 KB per MiB: the
    stream of one MiB after a full flush is the same every time, so it is built once and
    repeated (no test ever compresses a GiB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    one = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return one * mib + c.flush(zlib.Z_FINISH)


META = b"Metadata-Version: 2.1\nName: toyengine\nVersion: 1.0\n\n"
CORE = textwrap.dedent(ENGINE_V1).encode()


def member(name, data, *, method=8, crc=None, size=None, flags=0, packed=None):
    body = packed if packed is not None else (deflated(data) if method == 8 else data)
    return (name, body, method, zlib.crc32(data) if crc is None else crc,
            len(data) if size is None else size, flags)


def hostile_wheel(where, *, core=None, meta=None):
    """A toyengine 1.0 wheel whose ``core`` / ``meta`` member is replaced (a ``member`` tuple)."""
    return raw_zip(where / "toyengine-1.0-py3-none-any.whl", [
        member("toyengine/__init__.py", b""),
        core or member("toyengine/core.py", CORE),
        meta or member("toyengine-1.0.dist-info/METADATA", META)])


GIB = 1024
HOSTILE_WHEELS = {
    # a 1 MB wheel whose METADATA unzips to 1 GiB: its header block never ends within the cap
    "metadata bomb": (dict(meta=member("toyengine-1.0.dist-info/METADATA", b"", packed=zeros_bomb(GIB),
                                       size=GIB << 20)), "header block"),
    "metadata bomb, size lied": (dict(meta=member("toyengine-1.0.dist-info/METADATA", b"",
                                                  packed=zeros_bomb(GIB), size=60)), "CRC|decompresses"),
    # a target that unzips to 3 GiB: refused by its declared size, or at the cap when it lies
    "target bomb": (dict(core=member("toyengine/core.py", b"", packed=zeros_bomb(3 * GIB),
                                     size=3 * GIB << 20)), "over the limit"),
    "target bomb, size lied": (dict(core=member("toyengine/core.py", b"", packed=zeros_bomb(3 * GIB),
                                                size=len(CORE))), "CRC|decompresses"),
    "encrypted member": (dict(core=member("toyengine/core.py", CORE, flags=1)), "encrypted"),
    "compression method 99": (dict(core=member("toyengine/core.py", CORE, method=99, packed=CORE)),
                              "NotImplementedError"),
    "corrupt deflate data": (dict(core=member("toyengine/core.py", CORE, packed=b"\xff" * 40)),
                             "error"),
    "bad CRC": (dict(core=member("toyengine/core.py", CORE, crc=1234)), "CRC"),
    "METADATA not deflate": (dict(meta=member("toyengine-1.0.dist-info/METADATA", META,
                                              packed=b"\x07" * 9)), "cannot be read"),
    "additions 300k terms": (dict(core=member("toyengine/core.py", b"x = " + b"1+" * 300_000 + b"1\n")),
                             "tokens: not parsed"),
    "negations 200k": (dict(core=member("toyengine/core.py", b"x = " + b"-" * 200_000 + b"1\n")),
                       "cannot be"),
    "statements 250k": (dict(core=member("toyengine/core.py", b"a\n" * 250_000)), "tokens: not parsed"),
    "additions 100k terms": (dict(core=member("toyengine/core.py", b"x = " + b"1+" * 100_000 + b"1\n")),
                             "RecursionError|MemoryError"),
    "nested brackets": (dict(core=member("toyengine/core.py", b"x = " + b"[" * 5000 + b"]" * 5000)),
                        "cannot be"),
    "latin-1 bytes, no coding line": (dict(core=member("toyengine/core.py", b"class Runner:\n  n = '\xe9'\n")),
                                      "cannot be"),
    "null bytes": (dict(core=member("toyengine/core.py", b"class Runner:\x00\n")), "cannot be"),
    "no METADATA": (dict(meta=member("toyengine-1.0.dist-info/RECORD", b"")), "no *.dist-info/METADATA"),
    "METADATA version not a version": (dict(meta=member("toyengine-1.0.dist-info/METADATA",
                                                        b"Name: toyengine\nVersion: [red]one\n\n")),
                                       "not a version"),
    "METADATA without a version": (dict(meta=member("toyengine-1.0.dist-info/METADATA",
                                                    b"Name: toyengine\n\n")), "no Version"),
    "METADATA version 100k long": (dict(meta=member("toyengine-1.0.dist-info/METADATA",
                                                    b"Name: toyengine\nVersion: 1" + b".0" * 50_000 + b"\n\n")),
                                   "not a version"),
    "METADATA name not a name": (dict(meta=member("toyengine-1.0.dist-info/METADATA",
                                                  b"Name: [bold]toy engine\nVersion: 1.0\n\n")),
                                 "not a distribution name"),
    # every directory of every member is listed: a name 30,000 levels deep must not be walked
    "member 30k levels deep": (dict(core=member("toyengine/" + "a/" * 30_000 + "core.py", CORE)),
                               "levels"),
}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
@pytest.mark.parametrize("kind", sorted(HOSTILE_WHEELS))
def test_a_hostile_wheel_is_an_unreadable_cell_with_the_reason(tmp_path, gate, kind, as_json):
    replaced, reason = HOSTILE_WHEELS[kind]
    wheel = hostile_wheel(tmp_path, **replaced)
    assert wheel.stat().st_size < 4 << 20
    tracemalloc.start()
    try:
        r = gate(wheel, extra=["--json"] if as_json else [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 1, r.output
    assert peak < 96 << 20, f"{peak / 2**20:.0f} MiB allocated"   # never the decompressed GiB
    if not as_json:
        assert "unreadable" in r.stdout and "Traceback" not in r.output
        return
    data = json.loads(r.stdout)
    (cell,) = data["features"][0]["cells"]
    assert not data["ok"] and cell["state"] == "unreadable", cell
    assert any(r in cell["detail"] for r in reason.split("|")), cell["detail"]


def test_a_sound_raw_wheel_is_read(tmp_path, gate):
    """The byte-by-byte writer of the hostile wheels makes a readable wheel when nothing is wrong."""
    (cell,) = json.loads(gate(hostile_wheel(tmp_path), extra=["--json"]).stdout)["features"][0]["cells"]
    assert cell["state"] == "ok", cell


def test_a_central_directory_over_the_cap_is_refused_before_it_is_parsed(tmp_path):
    from dsv41_flags.upgrade_gate.releases import CENTRAL_DIRECTORY_MAX_BYTES

    wheel = hostile_wheel(tmp_path)
    data = bytearray(wheel.read_bytes())
    struct.pack_into("<L", data, len(data) - 22 + 12, CENTRAL_DIRECTORY_MAX_BYTES + 1)
    wheel.write_bytes(bytes(data))
    r = open_release(str(wheel))
    assert "central directory" in r.error and "over the limit" in r.error, r.error


def _tree(root, core: bytes = CORE):
    pkg = root / "toyengine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_bytes(core)
    (root / "toyengine-1.0.dist-info").mkdir()
    return pkg


@pytest.mark.parametrize("link", ["core.py", "toyengine", "_version.py"])
def test_a_tree_never_reads_through_a_symlink_out_of_it(tmp_path, gate, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "core.py").write_bytes(CORE)
    (outside / "_version.py").write_text("__version__ = '1.0'\n")
    root = tmp_path / "tree"
    pkg = _tree(root)
    if link == "toyengine":  # the whole package directory points out of the tree
        import shutil

        shutil.rmtree(pkg)
        pkg.symlink_to(outside, target_is_directory=True)
    elif link == "core.py":
        (pkg / "core.py").unlink()
        (pkg / "core.py").symlink_to(outside / "core.py")
    else:
        shutil_free = root / "toyengine-1.0.dist-info"
        shutil_free.rmdir()
        (pkg / "_version.py").symlink_to(outside / "_version.py")
    r = gate(root, extra=["--json"])
    data = json.loads(r.stdout)
    (cell,) = data["features"][0]["cells"]
    if link == "_version.py":  # the version file is not read: no version, nothing else wrong
        assert cell["version"] == "" and cell["state"] == "out-of-range", cell
        return
    assert r.exit_code == 1 and cell["state"] == "unreadable", cell
    assert "outside" in cell["detail"], cell["detail"]


@pytest.mark.parametrize("kind", ["fifo", "device", "over the cap"])
def test_a_tree_target_that_is_not_a_small_regular_file_is_never_read(tmp_path, gate, kind):
    """A FIFO or a device is no module (the import system skips it too: the module is missing,
    and nothing blocks); a source over the cap is unreadable before it is read."""
    import os

    from dsv41_flags.upgrade_gate.sources import SOURCE_MAX_BYTES

    root = tmp_path / "tree"
    pkg = _tree(root)
    core = pkg / "core.py"
    if kind == "fifo":
        core.unlink()
        os.mkfifo(core)
    elif kind == "device":
        core.unlink()
        core.symlink_to("/dev/zero")
    else:
        core.write_bytes(CORE + b"#" * SOURCE_MAX_BYTES)
    r = gate(root, extra=["--json"])
    (cell,) = json.loads(r.stdout)["features"][0]["cells"]
    assert r.exit_code == 1, cell
    if kind == "over the cap":
        assert cell["state"] == "unreadable" and "over the limit" in cell["detail"], cell
    else:
        assert cell["state"] == "drifted" and cell["missing"] == ["module toyengine.core"], cell


@pytest.mark.parametrize("kind", ["fifo", "huge version file"])
def test_a_spec_or_version_file_that_is_no_release_file_is_not_read(tmp_path, gate, kind):
    import os

    if kind == "fifo":
        spec = tmp_path / "engine.whl"
        os.mkfifo(spec)
        assert "neither a regular file" in open_release(str(spec)).error   # never blocks
        return
    root = tmp_path / "tree"
    pkg = _tree(root)
    (root / "toyengine-1.0.dist-info").rmdir()
    (pkg / "_version.py").write_bytes(b"__version__ = '1.0'\n" + b"a\n" * 400_000)
    tracemalloc.start()
    try:
        r = gate(root, extra=["--json"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (cell,) = json.loads(r.stdout)["features"][0]["cells"]
    assert cell["version"] == "" and peak < 96 << 20, (cell, peak)


@pytest.mark.parametrize("spec", ["", " "])
def test_an_empty_engine_spec_is_a_usage_error_and_reads_nothing(tmp_path, gate, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)   # the current directory holds a readable release: it must not be read
    for extra in (["--json"], []):
        r = gate(spec, extra=extra)
        assert r.exit_code == 2, r.output
        assert "--engine" in r.output and "empty" in r.output
        assert "toyengine" not in r.stdout
    assert "empty" in open_release(spec).error


# ------------------------------------------------------------------ a release that is not the engine
def _wheel_file(where, file_name, meta_name, version="1.0"):
    """A wheel ``file_name`` holding a readable toyengine target, whose METADATA says
    ``meta_name`` ``version``."""
    path = where / file_name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("toyengine/__init__.py", "")
        z.writestr("toyengine/core.py", textwrap.dedent(ENGINE_V1))
        z.writestr(f"{meta_name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {meta_name}\nVersion: {version}\n")
    return path


@pytest.mark.parametrize("file_name,meta_name,says", [
    # the instance of the issue: another file name, another METADATA Name
    ("toyengine_othername-1.0-py3-none-any.whl", "evil-pkg", ["'evil-pkg'", "'toyengine'"]),
    ("toyengine-1.0-py3-none-any.whl", "evil-pkg", ["'evil-pkg'", "'toyengine'"]),
    ("evil_pkg-1.0-py3-none-any.whl", "evil-pkg", ["'evil-pkg'", "'toyengine'"]),
    # METADATA is the engine, the file name is not: not one release
    ("toyengine_othername-1.0-py3-none-any.whl", "toyengine", ["toyengine-othername", "toyengine 1.0"]),
    ("toyengine-1.1-py3-none-any.whl", "toyengine", ["toyengine 1.1", "toyengine 1.0"]),
    ("engine.whl", "toyengine", ["not a wheel's", "PEP 427"]),
])
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_a_wheel_that_is_not_the_engine_never_passes(tmp_path, gate, file_name, meta_name, says,
                                                     as_json):
    wheel = _wheel_file(tmp_path, file_name, meta_name)
    r = gate(wheel, extra=["--json"] if as_json else [])
    assert r.exit_code == 1, r.output
    if not as_json:
        assert "unreadable" in r.stdout and "Traceback" not in r.output
        return
    data = json.loads(r.stdout)
    (cell,) = data["features"][0]["cells"]
    assert not data["ok"] and cell["state"] == "unreadable", cell
    assert str(wheel) in cell["detail"] and all(s in cell["detail"] for s in says), cell["detail"]
    assert data["releases"][0]["error"] == cell["detail"]


def test_the_engine_name_is_compared_canonically(tmp_path, gate):
    """``ToyEngine`` (file name and METADATA) is the distribution ``toyengine``."""
    wheel = _wheel_file(tmp_path, "ToyEngine-1.0-py3-none-any.whl", "ToyEngine")
    (cell,) = json.loads(gate(wheel, extra=["--json"]).stdout)["features"][0]["cells"]
    assert cell["state"] == "ok" and cell["release"] == "toyengine 1.0", cell


def test_a_requirement_of_another_distribution_is_refused_before_any_fetch(tmp_path, monkeypatch):
    def no_pip(*a, **k):
        raise AssertionError("pip must not run for another distribution")
    monkeypatch.setattr(subprocess, "run", no_pip)
    r = open_release("evil-pkg==1.0", engines=("toyengine",), cache=tmp_path / "cache")
    assert "'evil-pkg'" in r.error and "'toyengine'" in r.error, r.error
    assert not (tmp_path / "cache").exists()


def test_a_cached_wheel_of_another_name_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    make_wheel(cache, "1.0", ENGINE_V1, name="evil_pkg")
    r = open_release("evil_pkg==1.0", engines=("toyengine", "other"), cache=cache)
    assert "'evil_pkg'" in r.error and "'toyengine' or 'other'" in r.error, r.error


@pytest.mark.parametrize("declares", ["pyproject", "PKG-INFO", "python/pyproject"])
def test_a_source_tree_of_another_project_never_passes(tmp_path, gate, declares):
    root = tmp_path / "co"
    base = root / "python" if declares.startswith("python/") else root
    _tree(base)
    if declares == "PKG-INFO":
        (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evil-pkg\nVersion: 1.0\n\n")
        file = root / "PKG-INFO"
    else:
        file = base / "pyproject.toml"
        file.write_text('[project]\nname = "evil-pkg"\nversion = "1.0"\n')
    r = gate(root, extra=["--json"])
    data = json.loads(r.stdout)
    (cell,) = data["features"][0]["cells"]
    assert r.exit_code == 1 and cell["state"] == "unreadable", cell
    assert str(file) in cell["detail"] and "'evil-pkg'" in cell["detail"] and \
        "'toyengine'" in cell["detail"], cell["detail"]


def test_a_source_tree_that_declares_the_engine_is_read(tmp_path, gate):
    _tree(tmp_path / "co")
    (tmp_path / "co" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: ToyEngine\nVersion: 1.0\n\n")
    (cell,) = json.loads(gate(tmp_path / "co", extra=["--json"]).stdout)["features"][0]["cells"]
    assert cell["state"] == "ok", cell


def test_a_column_of_nothing_but_n_a_is_not_ok(tmp_path, monkeypatch):
    """Every checked feature targets no engine (``engine=""``): nothing is checked on the
    release, so the column does not pass."""
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "own.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='own', target='toyengine.core', install=lambda m, c: None,\n"
        "    summary='s', requires=('Runner.step',), engine='')\n")
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nown = true\n")
    wheel = make_wheel(tmp_path, "1.0", ENGINE_V1)
    r = CliRunner().invoke(app, ["check", "-s", str(settings), "--engine", str(wheel), "--json"])
    data = json.loads(r.stdout)
    (cell,) = data["features"][0]["cells"]
    assert r.exit_code == 1 and not data["ok"], r.output
    assert cell["state"] == "unreadable" and "nothing was checked" in cell["detail"], cell
    assert "every feature is n/a" in cell["detail"] and "declares no engine" in cell["detail"]
    r = CliRunner().invoke(app, ["check", "-s", str(settings), "--engine", str(wheel)])
    assert r.exit_code == 1 and "unreadable" in r.stdout, r.stdout
