"""A lean child (issue 11): the public names load their module on first use, and a feature file's
compiled code is cached (PEP 552 checked-hash pyc) against exactly the bytes that were verified."""
import importlib.util
import json
import marshal
import os
import subprocess
import sys

import pytest

import dsv41_flags
from dsv41_flags._bytecode import cache_path, code_of


# ------------------------------------------------------------------------ lazy public names
def test_import_dsv41_flags_loads_no_room_and_every_public_name_resolves():
    code = ("import json, sys\nimport dsv41_flags\n"
            "before = sorted(m for m in sys.modules if m.startswith('dsv41_flags.'))\n"
            "names = {n: type(getattr(dsv41_flags, n)).__name__ for n in dsv41_flags.__all__}\n"
            "print(json.dumps({'before': before, 'names': names, 'dir': dir(dsv41_flags)}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["before"] == []
    assert set(data["names"]) == set(dsv41_flags.__all__) and set(dsv41_flags.__all__) <= set(data["dir"])
    assert data["names"]["Feature"] == "type" and data["names"]["activate"] == "function"


def test_unknown_public_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Featur'"):
        dsv41_flags.Featur  # noqa: B018
    with pytest.raises(ImportError):
        exec("from dsv41_flags import nothing_like_this", {})


def test_lazy_name_is_the_object_of_its_room():
    from dsv41_flags import _declare, _sidecar

    assert dsv41_flags.Feature is _declare.Feature
    assert dsv41_flags.sidecar_matches is _sidecar.matches and dsv41_flags.payload_diff is _sidecar.diff


# ------------------------------------------------------------------------ feature code cache
def _module(path, source: bytes) -> dict:
    ns: dict = {}
    exec(code_of(str(path), source), ns)
    return ns


def _pyc(path):
    return cache_path(str(path))


def test_code_is_cached_as_a_checked_hash_pyc_and_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    f = tmp_path / "feat.py"
    src = b"X = 1\n"
    f.write_bytes(src)
    assert _module(f, src)["X"] == 1
    data = open(_pyc(f), "rb").read()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[4:8], "little") == 0b11  # PEP 552: hash-based, checked
    assert data[8:16] == importlib.util.source_hash(src)
    # reused: a pyc whose code differs but whose header names these bytes is what runs (as the
    # interpreter would run it), proving the cache is read rather than the source recompiled
    forged = data[:16] + marshal.dumps(compile("X = 'from cache'", str(f), "exec"))
    open(_pyc(f), "wb").write(forged)
    assert _module(f, src)["X"] == "from cache"


def test_a_pyc_of_other_bytes_is_never_run(tmp_path, monkeypatch):
    """The verified bytes decide: a pyc compiled from another source (the file edited since, or a
    pyc planted for different bytes) is ignored and replaced."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    f = tmp_path / "feat.py"
    f.write_bytes(b"X = 'old'\n")
    assert _module(f, b"X = 'old'\n")["X"] == "old"
    assert _module(f, b"X = 'new'\n")["X"] == "new"
    assert open(_pyc(f), "rb").read()[8:16] == importlib.util.source_hash(b"X = 'new'\n")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "timestamp", "not_code", "symlink", "dir"])
def test_a_damaged_or_foreign_pyc_is_ignored(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    f = tmp_path / "feat.py"
    src = b"X = 2\n"
    f.write_bytes(src)
    pyc = _pyc(f)
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little") + importlib.util.source_hash(src)
    if damage == "truncated":
        open(pyc, "wb").write(header + marshal.dumps(compile(src, str(f), "exec"))[:5])
    elif damage == "garbage":
        open(pyc, "wb").write(os.urandom(64))
    elif damage == "timestamp":  # the interpreter's default pyc: validated by mtime, not by bytes
        open(pyc, "wb").write(importlib.util.MAGIC_NUMBER + b"\0" * 12
                              + marshal.dumps(compile("X = 'stale'", str(f), "exec")))
    elif damage == "not_code":
        open(pyc, "wb").write(header + marshal.dumps({"X": "dict"}))
    elif damage == "symlink":
        target = tmp_path / "elsewhere.pyc"
        planted = header + marshal.dumps(compile("X = 'via link'", str(f), "exec"))
        target.write_bytes(planted)
        os.symlink(target, pyc)
    elif damage == "dir":
        os.mkdir(pyc)
    assert _module(f, src)["X"] == 2
    if damage == "symlink":
        # the link is replaced by a real pyc; what it pointed to is untouched
        assert not os.path.islink(pyc) and (tmp_path / "elsewhere.pyc").read_bytes() == planted


def test_read_only_directory_and_no_bytecode_mode_mean_no_cache_and_no_error(tmp_path, monkeypatch):
    f = tmp_path / "feat.py"
    src = b"X = 3\n"
    f.write_bytes(src)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE
    assert _module(f, src)["X"] == 3 and not os.path.exists(_pyc(f))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (tmp_path / "__pycache__").mkdir()
    os.chmod(tmp_path / "__pycache__", 0o555)
    try:
        assert _module(f, src)["X"] == 3
        if os.geteuid() != 0:  # root writes anyway
            assert not os.path.exists(_pyc(f))
        assert not [p for p in os.listdir(tmp_path / "__pycache__") if p.endswith(".tmp")]
    finally:
        os.chmod(tmp_path / "__pycache__", 0o755)


def test_feature_code_does_not_inherit_the_framework_future_flags(tmp_path):
    f = tmp_path / "feat.py"
    src = b"def f(x: int) -> int: return x\nANN = f.__annotations__\n"
    assert _module(f, src)["ANN"] == {"x": int, "return": int}  # not strings
