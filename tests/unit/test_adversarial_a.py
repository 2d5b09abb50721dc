"""Adversarial review A (issue: fork during activation, BaseException latch, half-imported targets,
blocking/unbounded file reads, escaping exceptions, a self-vouching snapshot, plugin guard and
strict failures at a later import). Each test is one instance of a kind the fix closes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dsv41_flags import SettingsError, SnapshotError
from dsv41_flags.files import FileRefused, read_regular
from dsv41_flags.values import CastError, cast

from .test_trust import FEATURE, child, demo, events, parent, run_py  # noqa: F401  (fixture)


def _no_block(fn, *args, **kwargs):
    """Run ``fn`` in a subprocess-free way but fail fast instead of hanging: an alarm."""
    import signal

    def boom(*_):
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(10)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------ kind: files read before checked
def test_read_regular_refuses_fifo_device_dir_symlink_and_oversize(tmp_path):
    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="is a FIFO, not a regular file"):
        _no_block(read_regular, fifo, 100)
    with pytest.raises(FileRefused, match="is a character device, not a regular file"):
        read_regular("/dev/zero", 100)
    with pytest.raises(FileRefused, match="is a directory, not a regular file"):
        read_regular(tmp_path, 100)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(FileRefused, match="101 bytes, over the limit of 100 bytes"):
        read_regular(big, 100)
    link = tmp_path / "link"
    link.symlink_to(big)
    assert read_regular(link, 200) == b"x" * 101
    with pytest.raises(FileRefused, match="symbolic link, which is not followed"):
        read_regular(link, 200, follow_symlinks=False)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(FileRefused, match="symbolic link loop"):
        read_regular(loop, 200)


@pytest.mark.parametrize("make, reason", [
    (lambda d: os.mkfifo(d / "f.toml"), "is a FIFO, not a regular file"),
    (lambda d: (d / "f.toml").symlink_to("/dev/zero"), "is a character device, not a regular file"),
    (lambda d: (d / "f.toml").symlink_to(d / "f.toml"), "symbolic link loop"),
    (lambda d: (d / "f.toml").write_text("[default]\nx = " + "[" * 20000 + "]" * 20000 + "\n"),
     "nested too deep"),
    (lambda d: (d / "f.toml").write_text("[default]\nx = " + "9" * 5000 + "\n"), "is not valid TOML"),
])
def test_bad_settings_files_are_settings_errors_not_hangs(tmp_path, make, reason):
    from dsv41_flags.settings import find_settings_files

    make(tmp_path)
    with pytest.raises(SettingsError, match=reason) as exc:
        _no_block(find_settings_files, None, {"DSV41_SETTINGS": str(tmp_path / "f.toml")})
    assert str(tmp_path / "f.toml") in str(exc.value)


def test_fifo_local_companion_is_refused(tmp_path):
    from dsv41_flags.settings import find_settings_files

    (tmp_path / "settings.toml").write_text("[default]\n")
    os.mkfifo(tmp_path / "settings.local.toml")
    with pytest.raises(SettingsError, match=r"settings.local.toml \(named by beside .*\) is a FIFO"):
        _no_block(find_settings_files, [tmp_path / "settings.toml"], {})


def test_fifo_feature_file_is_a_declaration_error_not_a_hang(demo):
    from dsv41_flags import DeclarationError

    os.mkfifo(demo.feats / "zz.py")
    with pytest.raises(DeclarationError, match=r"zz.py is a FIFO, not a regular file"):
        _no_block(parent, demo)


def test_feature_file_symlink_is_refused(demo, tmp_path):
    from dsv41_flags import DeclarationError

    other = tmp_path / "elsewhere.py"
    other.write_text((demo.feats / "demo_patch.py").read_text())
    (demo.feats / "demo_patch.py").unlink()
    (demo.feats / "demo_patch.py").symlink_to(other)
    with pytest.raises(DeclarationError, match="symbolic link, which is not followed"):
        parent(demo)


def test_snapshot_spill_fifo_and_directory_are_snapshot_errors(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((fifo, "is a FIFO, not a regular file"),
                         (tmp_path, "is a directory, not a regular file")):
        with pytest.raises(SnapshotError, match=reason):
            _no_block(child, f"file:{path}#sha256={'0' * 64}")


# ------------------------------------------------------------ kind: exceptions escaping the checks
def test_casters_are_total():
    with pytest.raises(CastError, match="too long: 5000 digits"):
        cast("int", "9" * 5000)
    with pytest.raises(CastError):
        cast("float", "9" * 5000)  # inf: not finite
    with pytest.raises(CastError):
        cast("list", [["nested"]])


def test_huge_int_variable_is_a_settings_error(demo):
    with pytest.raises(SettingsError, match=r"DEMO_PATCH_N=.*too long: 5000 digits"):
        parent(demo, DSV41_DEMO_PATCH_N="9" * 5000)


def test_huge_int_in_snapshot_is_a_snapshot_error(demo):
    data = json.loads(parent(demo).snapshot())
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = "9" * 5000
    with pytest.raises(SnapshotError, match="too long"):
        child(json.dumps(data))


def test_any_exception_reading_the_snapshot_is_a_snapshot_error(demo, monkeypatch):
    import dsv41_flags.snapshot as _launch

    def boom(*a, **k):
        raise RecursionError("deep")

    monkeypatch.setattr(_launch, "materialize", boom)
    with pytest.raises(SnapshotError, match="RecursionError: deep"):
        child(parent(demo).snapshot())


def test_non_strict_falls_back_on_an_unexpected_snapshot_failure(demo):
    """The fallback keys on SnapshotError, which now covers every failure of the codec."""
    proc = run_py(demo, """
        import dsv41_flags
        rt = dsv41_flags.activate()
        print(rt.from_snapshot, bool(rt.snapshot_refused))
    """, DSV41_SNAPSHOT=f"file:{demo.dir}#sha256={'0' * 64}", DSV41_STRICT="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
    refused = [e for e in events(proc.stderr) if e["event"] == "snapshot.refused"]
    assert refused and "is a directory, not a regular file" in refused[0]["reason"]


# ------------------------------------------------------------ kind: the snapshot vouches for itself
def test_fingerprint_digest_is_recomputed(demo):
    data = json.loads(parent(demo).snapshot())
    data["fingerprint"]["payload"]["argv"] = ["forged"]
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))
    data = json.loads(parent(demo).snapshot())
    data["fingerprint"]["digest"] = "a" * 64
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))


# ------------------------------------------------------------ kind: activation published half done
def test_fork_during_activation_fails_the_child_with_an_event(demo):
    """Another thread is activating (its flags.resolved write sleeps 0.4 s) when the process
    forks: the child never gets the half-built runtime as 'armed'; activate() raises
    ActivationError with a flags.error event naming the cause."""
    proc = run_py(demo, f"""
        import os, sys, time, json, threading, dsv41_flags
        class Slow:
            def __init__(self, inner): self.inner = inner
            def write(self, text): time.sleep(0.4); return self.inner.write(text)
            def flush(self): return self.inner.flush()
            def __getattr__(self, name): return getattr(self.inner, name)
        sys.stderr = Slow(sys.stderr)
        t = threading.Thread(target=dsv41_flags.activate); t.start()
        time.sleep(0.25)
        pid = os.fork()
        if pid == 0:
            try:
                dsv41_flags.activate(); out = "returned"
            except dsv41_flags.FlagsError as exc:
                out = type(exc).__name__
            import {demo.target} as m
            print(json.dumps({{"child": os.getpid(), "out": out, "call": m.Worker().forward()}}),
                  flush=True)
            os._exit(0)
        os.waitpid(pid, 0); t.join()
        import {demo.target} as m
        print(json.dumps({{"parent": m.Worker().forward()}}), flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    c, p = [json.loads(line) for line in proc.stdout.splitlines()]
    assert c["out"] == "ActivationError" and c["call"] == "stock"
    assert p["parent"] == "patched n=5"
    errors = [e for e in events(proc.stderr) if e["event"] == "flags.error" and e["pid"] == c["child"]]
    assert errors and "forked while another thread" in errors[0]["cause"]


def test_armed_means_a_hook_is_registered(demo):
    rt = parent(demo)  # built, never armed
    assert {s.name: s.state for s in rt.states()}["demo_patch"] == "not-armed"


def test_audit_reports_an_imported_but_never_installed_target_as_missed(demo):
    from dsv41_flags.runtime import FeatureState

    rt = parent(demo)
    rt.arm()
    import importlib

    sys.path.insert(0, str(demo.dir))
    try:
        # the hook is registered; pretend it never fired: the target imported, state still armed
        rt._disarmed.add("x")  # unrelated name: our feature is not disarmed
        rt._states["demo_patch"] = FeatureState("demo_patch", "armed", True, "env", demo.target)
        import wrapt
        wrapt.importer._post_import_hooks.pop(demo.target, None)
        importlib.import_module(demo.target)
        states = {s.name: s for s in rt.audit()}
        assert states["demo_patch"].state == "missed" and "NOT on" in states["demo_patch"].detail
    finally:
        sys.path.remove(str(demo.dir))


# ------------------------------------------------------------ kind: BaseException during activation
def test_keyboard_interrupt_during_activation_is_latched_and_reported(demo):
    (demo.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(demo.target)).replace(
        '    n = ctx.options["n"]', '    raise KeyboardInterrupt'))
    proc = run_py(demo, f"""
        import {demo.target}, dsv41_flags
        for attempt in (1, 2):
            try:
                dsv41_flags.activate(); print("RETURNED", attempt)
            except KeyboardInterrupt:
                print("INTERRUPTED", attempt)
            except dsv41_flags.FlagsError as exc:
                print("RAISED", attempt, type(exc).__name__)
        print(dsv41_flags.current_runtime())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["INTERRUPTED 1", "RAISED 2 ActivationError", "None"]
    errors = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert errors[0]["error_type"] == "KeyboardInterrupt" and errors[0]["outcome"].startswith("interrupted")
    assert len(errors) == 2


# ------------------------------------------------------------ kind: half-imported target
def test_target_still_importing_in_another_thread_installs_when_the_import_completes(demo):
    (demo.dir / f"{demo.target}.py").write_text(
        "class Worker:\n    def forward(self):\n        return 'stock'\n"
        "import time\ntime.sleep(3)\n"
        "class Worker:\n    def forward(self):\n        return 'stock'\n")
    proc = run_py(demo, f"""
        import sys, threading, time, dsv41_flags
        t = threading.Thread(target=__import__, args=({demo.target!r},)); t.start()
        while {demo.target!r} not in sys.modules:  # its import has begun (it sleeps 3 s)
            time.sleep(0.01)
        rt = dsv41_flags.activate()
        print(next(s for s in rt.states() if s.name == "demo_patch").state)
        t.join()
        for _ in range(500):
            if next(s for s in rt.states() if s.name == "demo_patch").state != "pending":
                break
            time.sleep(0.01)
        import {demo.target} as m
        print(next(s for s in rt.states() if s.name == "demo_patch").state, m.Worker().forward())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["pending", "installed patched n=5"]
    pending = [e for e in events(proc.stderr) if e["event"] == "feature.pending"]
    assert pending and "is still being imported" in pending[0]["reason"]


# ------------------------------------------------------------ follow-ups (8a, 8b)
def test_failed_non_strict_plugin_activation_still_joins_the_rank_guard(demo):
    proc = run_py(demo, """
        import json
        import dsv41_flags.rank_guard as g
        calls = []
        g.register_guard = lambda rt, reason="", engine=None: calls.append([rt, reason]) or True
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print(json.dumps(calls))
    """, DSV41_STRICT="0", DSV41_DEMO_PATCH_N="abc")
    assert proc.returncode == 0, proc.stderr
    [[rt, reason]] = json.loads(proc.stdout)
    assert rt is None and "SettingsError" in reason and "DEMO_PATCH_N" in reason
    assert "flags.error" in [e["event"] for e in events(proc.stderr)]


def test_strict_drift_at_a_later_import_stops_with_exit_3_and_an_event(demo):
    (demo.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(demo.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    proc = run_py(demo, f"""
        import dsv41_flags
        dsv41_flags.activate()
        try:
            import {demo.target}
        except BaseException as exc:            # a host cannot swallow it and run unpatched
            print("CAUGHT", type(exc).__name__)
        print("RAN ON")
    """)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "RAN ON" not in proc.stdout and "CAUGHT" not in proc.stdout
    assert "Traceback" not in proc.stderr
    ev = events(proc.stderr)
    names = [e["event"] for e in ev]
    assert "feature.drifted" in names
    err = [e for e in ev if e["event"] == "flags.error"][-1]
    assert err["entry"] == "import of demo_patch's target" and "Worker.gone" in err["cause"]
    assert err["outcome"].startswith("stopped: exit status 3")


def test_strict_drift_found_when_another_threads_import_completes_stops_with_exit_3(demo):
    (demo.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(demo.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    (demo.dir / f"{demo.target}.py").write_text(
        "import time\ntime.sleep(3)\nclass Worker:\n    def forward(self):\n        return 'stock'\n")
    proc = run_py(demo, f"""
        import sys, threading, time, dsv41_flags
        t = threading.Thread(target=__import__, args=({demo.target!r},)); t.start()
        while {demo.target!r} not in sys.modules:  # its import has begun (it sleeps 3 s)
            time.sleep(0.01)
        dsv41_flags.activate()
        t.join()
        time.sleep(5)
        print("RAN ON")
    """)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "RAN ON" not in proc.stdout and "Traceback" not in proc.stderr
    err = [e for e in events(proc.stderr) if e["event"] == "flags.error"][-1]
    assert "Worker.gone" in err["cause"] and err["outcome"].startswith("stopped: exit status 3")


def test_features_dir_symlink_loop_is_a_settings_error(demo, tmp_path):
    loop = tmp_path / "loopdir"
    loop.symlink_to(loop)
    with pytest.raises(SettingsError, match=r"features_dir=.*cannot be resolved: RuntimeError"):
        build_from_env(demo, DSV41_FEATURES_DIR=str(loop))


def build_from_env(demo, **env):
    from dsv41_flags.runtime import build

    return build([demo.settings], None, environ=dict(env), argv=["prog"], use_snapshot=False,
                 configure_logging=False)
