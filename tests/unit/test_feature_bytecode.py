"""The feature modules' bytecode cache (issue 11, parent speed): used only for exactly the bytes
read, by this user, never blocking; what runs is always what was read and hashed."""
import importlib.util
import marshal
import os
import sys

import pytest

from dsv41_flags import _bytecode
from dsv41_flags._bytecode import CACHE_TAG, code_of as compiled
from dsv41_flags._discovery import discover

FEATURE = ("from dsv41_flags import Feature\n"
           "MARK = {mark!r}\n"
           "FEATURE = Feature(name='cached', target='json', install=lambda m, c: None, "
           "summary='s', engine='')\n")


@pytest.fixture
def writing(monkeypatch):
    """Bytecode writing on (the test environment may set PYTHONDONTWRITEBYTECODE)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


@pytest.fixture
def no_compile(monkeypatch):
    """Make ``compile`` in _bytecode fail: a call that returns proves the cache was used."""
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the cache matched")
    return lambda: monkeypatch.setattr(_bytecode, "compile", refuse, raising=False)


def _feature(tmp_path, mark="one"):
    path = tmp_path / "cached.py"
    path.write_text(FEATURE.format(mark=mark))
    return path.resolve(), path.read_bytes()


def _cache(path):
    return importlib.util.cache_from_source(str(path), optimization=CACHE_TAG)


def test_second_compile_comes_from_the_cache(tmp_path, writing, no_compile):
    path, source = _feature(tmp_path)
    first = compiled(path, source)
    assert os.path.isfile(_cache(path)) and _cache(path).endswith(f".opt-{CACHE_TAG}.pyc")
    assert not [n for n in os.listdir(os.path.dirname(_cache(path))) if n.endswith(".tmp")]
    no_compile()
    second = compiled(path, source)
    assert second == first and second.co_filename == str(path)


def test_changed_bytes_run_not_the_cached_code(tmp_path, writing):
    path, source = _feature(tmp_path, "one")
    compiled(path, source)
    path.write_text(FEATURE.format(mark="two"))
    assert discover(tmp_path, entry_points=False)[0].source_sha256  # discovered
    assert sys.modules["dsv41_flags_features.cached"].MARK == "two"
    # a snapshot's verified bytes win over both the file and the cache
    feature = discover(tmp_path, entry_points=False, sources={path: FEATURE.format(mark="three")
                                                              .encode()})[0]
    assert sys.modules["dsv41_flags_features.cached"].MARK == "three" and feature.name == "cached"


@pytest.mark.parametrize("spoil", ["other_path", "group_writable", "garbage", "fifo", "symlink",
                                   "truncated"])
def test_a_cache_that_does_not_fit_is_ignored(tmp_path, writing, spoil):
    path, source = _feature(tmp_path)
    compiled(path, source)
    cache = _cache(path)
    data = open(cache, "rb").read()
    header = data[:16]
    if spoil == "other_path":  # right hash, code compiled for another file
        other = compile(FEATURE.format(mark="evil"), "/elsewhere/cached.py", "exec")
        data = header + marshal.dumps(other)
    elif spoil == "garbage":
        data = header + b"\x00garbage"
    elif spoil == "truncated":
        data = data[:len(data) // 2]
    os.unlink(cache)
    if spoil == "fifo":
        os.mkfifo(cache)
    elif spoil == "symlink":
        target = tmp_path / "elsewhere.pyc"
        target.write_bytes(data)
        os.symlink(target, cache)
    else:
        with open(cache, "wb") as f:
            f.write(data)
        if spoil == "group_writable":
            os.chmod(cache, 0o664)
    code = compiled(path, source)  # never blocks, never raises
    namespace = {}
    exec(code, namespace)
    assert namespace["MARK"] == "one" and code.co_filename == str(path)


def test_nothing_written_when_bytecode_writing_is_off(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path, source = _feature(tmp_path)
    compiled(path, source)
    assert not os.path.exists(_cache(path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only directory anyway")
def test_read_only_directory_keeps_no_cache(tmp_path, writing):
    path, source = _feature(tmp_path)
    os.chmod(tmp_path, 0o555)
    try:
        exec(compiled(path, source), {})
        assert not os.path.exists(os.path.dirname(_cache(path)))
    finally:
        os.chmod(tmp_path, 0o755)


def test_unwritable_cache_directory_is_no_error(tmp_path, writing):
    path, source = _feature(tmp_path)
    (tmp_path / "__pycache__").write_text("a file where the cache directory would be")
    exec(compiled(path, source), {})
