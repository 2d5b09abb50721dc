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
from dsv41_flags._files import FileRefused, read_regular
from dsv41_flags._values import CastError, cast

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
def test_items_4_5_6_bad_settings_files_are_settings_errors_not_hangs(tmp_path, make, reason):
    from dsv41_flags._settings import find_settings_files

    make(tmp_path)
    with pytest.raises(SettingsError, match=reason) as exc:
        _no_block(find_settings_files, None, {"DSV41_SETTINGS": str(tmp_path / "f.toml")})
    assert str(tmp_path / "f.toml") in str(exc.value)


def test_item4_fifo_local_companion_is_refused(tmp_path):
    from dsv41_flags._settings import find_settings_files

    (tmp_path / "settings.toml").write_text("[default]\n")
    os.mkfifo(tmp_path / "settings.local.toml")
    with pytest.raises(SettingsError, match=r"settings.local.toml \(named by beside .*\) is a FIFO"):
        _no_block(find_settings_files, [tmp_path / "settings.toml"], {})


def test_item4_fifo_feature_file_is_a_declaration_error_not_a_hang(demo):
    from dsv41_flags import DeclarationError

    os.mkfifo(demo.feats / "zz.py")
    with pytest.raises(DeclarationError, match=r"zz.py is a FIFO, not a regular file"):
        _no_block(parent, demo)


def test_item7_feature_file_symlink_is_refused(demo, tmp_path):
    from dsv41_flags import DeclarationError

    other = tmp_path / "elsewhere.py"
    other.write_text((demo.feats / "demo_patch.py").read_text())
    (demo.feats / "demo_patch.py").unlink()
    (demo.feats / "demo_patch.py").symlink_to(other)
    with pytest.raises(DeclarationError, match="symbolic link, which is not followed"):
        parent(demo)


def test_item4_6_snapshot_spill_fifo_and_directory_are_snapshot_errors(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((fifo, "is a FIFO, not a regular file"),
                         (tmp_path, "is a directory, not a regular file")):
        with pytest.raises(SnapshotError, match=reason):
            _no_block(child, f"file:{path}#sha256={'0' * 64}")


# ------------------------------------------------------------ kind: exceptions escaping the checks
def test_item6_casters_are_total():
    with pytest.raises(CastError, match="too long: 5000 digits"):
        cast("int", "9" * 5000)
    with pytest.raises(CastError):
        cast("float", "9" * 5000)  # inf: not finite
    with pytest.raises(CastError):
        cast("list", [["nested"]])


def test_item6_huge_int_variable_is_a_settings_error(demo):
    with pytest.raises(SettingsError, match=r"DEMO_PATCH_N=.*too long: 5000 digits"):
        parent(demo, DSV41_DEMO_PATCH_N="9" * 5000)


def test_item6_huge_int_in_snapshot_is_a_snapshot_error(demo):
    data = json.loads(parent(demo).snapshot())
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = "9" * 5000
    with pytest.raises(SnapshotError, match="too long"):
        child(json.dumps(data))


def test_item6_any_exception_reading_the_snapshot_is_a_snapshot_error(demo, monkeypatch):
    from dsv41_flags import _launch

    def boom(*a, **k):
        raise RecursionError("deep")

    monkeypatch.setattr(_launch, "materialize", boom)
    with pytest.raises(SnapshotError, match="RecursionError: deep"):
        child(parent(demo).snapshot())


def test_item6_non_strict_falls_back_on_an_unexpected_snapshot_failure(demo):
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
def test_item7_fingerprint_digest_is_recomputed(demo):
    data = json.loads(parent(demo).snapshot())
    data["fingerprint"]["payload"]["argv"] = ["forged"]
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))
    data = json.loads(parent(demo).snapshot())
    data["fingerprint"]["digest"] = "a" * 64
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))
