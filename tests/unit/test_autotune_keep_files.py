"""autotune_keep's file handling (no engine): moved aside, never deleted beyond keep_old; safe on
shared, read-only and hostile directories; hostile cache and sidecar files are set aside
without raising or blocking."""
import errno
import json
import multiprocessing
import os
import queue as queue_mod
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

import dsv41_flags
import dsv41_flags.cache_keeping
import dsv41_flags.fingerprint
from dsv41_flags.cache_keeping import SymlinkRefused, sidecar_path, write_sidecar

from ..conftest import FEATURES_DIR
from ._hostile import HOSTILE_SIDECARS


def test_set_aside_keeps_distinct_bounded_copies(make_runtime, tmp_path):
    make_runtime(None)  # discovers features/ (module dsv41_flags_features.autotune_keep)
    set_aside = sys.modules["dsv41_flags_features.autotune_keep"].set_aside
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    log = structlog.get_logger("test")
    moved = []
    with capture_logs() as logs:
        for i in range(5):
            cache.write_text(f'{{"v": {i}}}')
            cache.with_suffix(".launch").write_text(f"side {i}")
            moved.append(set_aside(cache, 3, f"reason {i}", log))
    assert not cache.exists() and len(set(moved)) == 5
    copies = sorted(tmp_path.glob("rank_tp0_pp0_dp0.json.stale-*"))
    assert len(copies) == 3                               # keep_old = 3
    assert {c.read_text() for c in copies} == {'{"v": 2}', '{"v": 3}', '{"v": 4}'}
    assert len(list(tmp_path.glob("rank_tp0_pp0_dp0.launch.stale-*"))) == 3
    assert [e["reason"] for e in logs if e["event"] == "autotune_keep.set_aside"] == \
        [f"reason {i}" for i in range(5)]


HERE = Path(__file__).resolve().parent


class Captured:
    """A structlog logger whose events are captured (``structlog.testing.capture_logs``)."""

    def __init__(self, logs):
        self.logger, self.logs = structlog.get_logger("test"), logs

    def __getattr__(self, name):
        return getattr(self.logger, name)

    def names(self):
        return [e["event"] for e in self.logs]


@pytest.fixture
def log():
    with capture_logs() as logs:
        yield Captured(logs)


@pytest.fixture
def feature(make_runtime):
    rt = make_runtime(None, env={"DSV41_AUTOTUNE_KEEP": "1"})
    mod = sys.modules["dsv41_flags_features.autotune_keep"]
    return mod, rt.fingerprint


def _cache(tmp_path, fingerprint=None, content='{"_metadata": {"gpu": "x"}, "k": 1}'):
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    cache.write_text(content)
    if fingerprint is not None:
        write_sidecar(dsv41_flags.cache_keeping.sidecar_path(cache), fingerprint)
    return cache


def _other_fingerprint(fp):
    return dsv41_flags.fingerprint.Fingerprint("0" * 64, {**fp.payload, "env": {"SGLANG_KNOB": "other"}}, {})


def test_feature_uses_only_the_public_api():
    """Shipped features import nothing private of dsv41_flags."""
    text = (FEATURES_DIR / "autotune_keep.py").read_text()
    assert "dsv41_flags._" not in text and "from dsv41_flags import" in text


def test_race_engines_sharing_one_cache_directory(tmp_path):
    """Four engines (processes) with differing launches boot against one cache path,
    40 rounds each: no exception, and no cache lost outright (every saved entry is in the cache
    or in a set-aside copy)."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    workers, rounds = 4, 40
    procs = [ctx.Process(target=__import__("tests.unit._autotune_race", fromlist=["run"]).run,
                         args=(w, rounds, str(tmp_path), str(FEATURES_DIR), q)) for w in range(workers)]
    for p in procs:
        p.start()
    reports, errors = {}, {}
    deadline = time.monotonic() + 120
    try:
        while len(reports) + len(errors) < workers and time.monotonic() < deadline:
            try:
                w, kind, payload = q.get(timeout=1)
            except queue_mod.Empty:
                continue
            (reports if kind == "done" else errors)[w] = payload
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert not errors, "\n".join(errors.values())
    assert len(reports) == workers, "a worker hung or died"
    saved = {e for r in reports.values() for e in r["saved"]}
    assert len(saved) == workers * rounds
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    found = set()
    for path in [cache, *tmp_path.glob("rank_tp0_pp0_dp0.json.stale-*")]:
        found |= set(json.loads(path.read_text())) - {"_metadata"}
    assert saved <= found, f"lost outright: {sorted(saved - found)[:10]}"
    set_asides = sum(r["events"].count("autotune_keep.set_aside") for r in reports.values())
    assert set_asides > 0  # the launches really differed
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_boot_digest_tolerates_a_cache_vanishing_under_it(feature, tmp_path, monkeypatch, log):
    """Every step between deciding and moving may find the file gone."""
    mod, fp = feature
    cache = _cache(tmp_path, _other_fingerprint(fp))
    real = os.replace

    def gone(src, dst, *a, **k):  # another engine moved it an instant earlier
        if Path(src) == cache:
            real(src, str(cache) + ".elsewhere")
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(src))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", gone)
    assert mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: "stock") == ""
    assert mod.set_aside(cache, 3, "x", log) is None
    assert (tmp_path / (cache.name + ".elsewhere")).exists()


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_read_only_directory_stale_cache_reported_and_left(feature, tmp_path, monkeypatch, err, log):
    """A read-only directory (image-baked caches). Faults root cannot produce are
    injected at the os call. A stale cache is reported (autotune_keep.read_only), stays in place,
    and the stock digest decides as without the feature; nothing raises."""
    mod, fp = feature
    cache = _cache(tmp_path, _other_fingerprint(fp))
    before = sorted(p.name for p in tmp_path.iterdir())

    def ro(*a, **k):
        raise OSError(err, os.strerror(err))

    real_open = os.open

    def ro_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "replace", ro)
    monkeypatch.setattr(os, "rename", ro)
    monkeypatch.setattr(os, "unlink", ro)
    monkeypatch.setattr(os, "open", ro_open)
    assert mod.boot_digest(cache, {"e": 1}, fp, 3, log, lambda p, e: "stock-digest") == "stock-digest"
    assert "autotune_keep.read_only" in log.names()
    assert mod.after_tuning(cache, fp, log) is False          # the sidecar is not written there
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_read_only_directory_matching_cache_is_kept(feature, tmp_path, monkeypatch, log):
    """A matching pre-tuned cache in a read-only directory is used: a non-empty digest,
    no write, no event."""
    mod, fp = feature
    cache = _cache(tmp_path, fp)

    def ro(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, f, *a, **k: ro() if f & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
                        else real_open(p, f, *a, **k))
    monkeypatch.setattr(os, "replace", ro)
    digest = mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: "stock")
    assert len(digest) == 64 and log.names() == []
    assert cache.exists()


def test_full_disk_sidecar_reported_not_raised(feature, tmp_path, monkeypatch, log):
    """ENOSPC at the write: the old sidecar is untouched, no temporary left, an event."""
    mod, fp = feature
    cache = _cache(tmp_path, _other_fingerprint(fp))
    side = dsv41_flags.cache_keeping.sidecar_path(cache)
    before = side.read_bytes()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    assert mod.after_tuning(cache, fp, log) is False
    assert log.names() == ["autotune_keep.sidecar_failed"]
    assert side.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_symlinked_sidecar_is_refused_not_written_through(feature, tmp_path, log):
    """The link's target is never replaced."""
    mod, fp = feature
    cache = _cache(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    side = dsv41_flags.cache_keeping.sidecar_path(cache)
    side.symlink_to(victim)
    with pytest.raises(SymlinkRefused) as exc:
        write_sidecar(side, fp)
    assert exc.value.errno == errno.ELOOP
    assert mod.after_tuning(cache, fp, log) is False
    assert log.names() == ["autotune_keep.sidecar_refused"]
    assert victim.read_text() == "precious" and side.is_symlink()


def test_symlinked_cache_is_moved_as_a_link(feature, tmp_path, log):
    """Moving a stale cache that is a link moves the link, not its target."""
    mod, fp = feature
    real = tmp_path / "elsewhere.json"
    real.write_text('{"k": 1}')
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    cache.symlink_to(real)
    moved = mod.set_aside(cache, 3, "test", log)
    assert moved.is_symlink() and real.read_text() == '{"k": 1}' and not os.path.lexists(cache)


def test_sidecar_created_with_the_kernel_mode_never_touching_umask(feature, tmp_path, monkeypatch):
    """No umask(0)/umask(old) window: os.umask is never called, and files created by
    other threads meanwhile keep the umask's mode."""
    mod, fp = feature
    old = os.umask(0o022)
    try:
        monkeypatch.setattr(os, "umask", lambda *a: (_ for _ in ()).throw(AssertionError("umask called")))
        stop = threading.Event()
        made = []

        def other_thread():
            i = 0
            while not stop.is_set() and i < 400:
                p = tmp_path / f"other{i}"
                p.touch()
                made.append(p)
                i += 1

        t = threading.Thread(target=other_thread)
        t.start()
        try:
            for i in range(100):
                write_sidecar(tmp_path / f"s{i}.launch", fp)
        finally:
            stop.set()
            t.join()
        modes = {oct(p.stat().st_mode & 0o777) for p in made} | \
            {oct((tmp_path / f"s{i}.launch").stat().st_mode & 0o777) for i in range(100)}
        assert modes == {oct(0o644)}
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_stale_temporaries_cleaned_live_ones_kept(feature, tmp_path, log):
    """Temporaries of crashed writes (a dead pid, or older than a launch) are removed at
    boot; a live writer's fresh one is kept."""
    mod, fp = feature
    cache = _cache(tmp_path, fp)
    from dsv41_flags.files import host_tag as _host
    host = _host()
    proc = subprocess.Popen(["true"])
    proc.wait()
    side = dsv41_flags.cache_keeping.sidecar_path(cache).name
    dead = tmp_path / f".{side}.dsv41-{host}-{proc.pid}-dead.tmp"
    live = tmp_path / f".{side}.dsv41-{host}-{os.getppid()}-live.tmp"
    other_host_old = tmp_path / f".{side}.dsv41-otherhost-1-old.tmp"
    engine_old = tmp_path / ".autotuner_abc123.tmp"
    engine_fresh = tmp_path / ".autotuner_def456.tmp"
    for p in (dead, live, other_host_old, engine_old, engine_fresh):
        p.write_text("half")
    day_ago = time.time() - 86400
    for p in (other_host_old, engine_old):
        os.utime(p, (day_ago, day_ago))
    mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: "stock")
    left = {p.name for p in tmp_path.iterdir()}
    assert dead.name not in left and other_host_old.name not in left and engine_old.name not in left
    assert live.name in left and engine_fresh.name in left


def test_crashed_sidecar_write_leaves_nothing(feature, tmp_path, monkeypatch):
    """A write that fails leaves no temporary (and a killed one is cleaned next boot)."""
    mod, fp = feature

    def crash(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        write_sidecar(tmp_path / "x.launch", fp)
    assert list(tmp_path.iterdir()) == []


def test_before_save_drops_another_launchs_sidecar(feature, tmp_path, log):
    """A sidecar written by another engine while this one tuned would pair
    the cache this launch saves with a fingerprint it does not belong to: dropped first (a
    missing sidecar only makes a concurrent boot set the cache aside); this launch's is kept."""
    mod, fp = feature
    cache = _cache(tmp_path, _other_fingerprint(fp))
    assert mod.before_save(cache, fp, log) is True
    assert not dsv41_flags.cache_keeping.sidecar_path(cache).exists() and cache.exists()
    assert log.names() == ["autotune_keep.sidecar_dropped"]
    write_sidecar(dsv41_flags.cache_keeping.sidecar_path(cache), fp)
    assert mod.before_save(cache, fp, log) is False
    assert dsv41_flags.cache_keeping.sidecar_path(cache).exists()


class _Log:
    def __init__(self):
        self.events = []

    def __getattr__(self, level):
        return lambda event, **kw: self.events.append(event)


@pytest.mark.parametrize("kind", ["cache_deep", "cache_fifo", "cache_dev_zero", "sidecar_fifo",
                                  "sidecar_dev_zero", "sidecar_argv_int", "sidecar_env_list"])
def test_boot_digest_sets_hostile_files_aside_without_raising_or_blocking(feature, tmp_path, kind):
    mod, fp = feature
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    side = sidecar_path(cache)
    if kind == "cache_deep":
        cache.write_text("[" * 100000)
    elif kind == "cache_fifo":
        os.mkfifo(cache)
    elif kind == "cache_dev_zero":
        cache.symlink_to("/dev/zero")
    else:
        cache.write_text('{"_metadata": {}, "k": 1}')
        if kind == "sidecar_fifo":
            os.mkfifo(side)
        elif kind == "sidecar_dev_zero":
            side.symlink_to("/dev/zero")
        else:
            side.write_text(HOSTILE_SIDECARS[kind.split("_", 1)[1]])
    log = _Log()
    start = time.monotonic()
    assert mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: pytest.fail("stock digest called")) == ""
    assert time.monotonic() - start < 5
    assert "autotune_keep.set_aside" in log.events and not os.path.lexists(cache)


def test_unmovable_fifo_cache_is_no_cache_not_a_hang(feature, tmp_path, monkeypatch):
    """A FIFO cache in a directory where it cannot be moved: the stock digest would read it
    forever; it is treated as no cache, with an event."""
    mod, fp = feature
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    os.mkfifo(cache)
    monkeypatch.setattr(os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, "ro")))
    log = _Log()
    assert mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: pytest.fail("stock digest called")) == ""
    assert "autotune_keep.unreadable" in log.events
