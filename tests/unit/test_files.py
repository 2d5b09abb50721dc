"""``dsv41_flags.files``: the one bounded, non-blocking file reader refuses what is not a small
regular file (FIFO, device, directory, a link it must not follow, over its cap, a link loop),
naming the path and why, and never blocks; the owner check refuses a file others may read; the
one atomic write replaces a file whole, never through a link, and leaves nothing behind."""

import os

import pytest

from dsv41_flags.files import FileRefused, SymlinkRefused, owned_privately, read_regular, write_atomic

from ._bounded import no_block


def test_read_regular_refuses_fifo_device_dir_symlink_and_oversize(tmp_path):
    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="is a FIFO, not a regular file"):
        no_block(read_regular, fifo, 100)
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


def test_read_regular_refuses_what_is_not_a_small_regular_file(tmp_path):
    """The public reader features use (``files.read_regular``): never blocks, never follows a
    link it must not, never reads past its cap."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    cases = {"FIFO": (fifo, 10, True), "directory": (tmp_path, 10, True),
             "over the limit": (tmp_path / "x", 4, True), "symbolic link": (tmp_path / "l", 5, False)}
    (tmp_path / "x").write_bytes(b"12345")
    (tmp_path / "l").symlink_to(tmp_path / "x")
    for why, (path, cap, follow) in cases.items():
        with pytest.raises(OSError) as exc:
            read_regular(path, max_bytes=cap, follow_symlinks=follow)
        assert why in str(exc.value) and str(path) in str(exc.value)
    assert read_regular(tmp_path / "l", max_bytes=5) == b"12345"


def test_write_atomic_replaces_whole_keeps_or_sets_the_mode_and_refuses_links(tmp_path):
    path = tmp_path / "side.launch"
    assert write_atomic(path, b"one") == path and path.read_bytes() == b"one"
    os.chmod(path, 0o640)
    write_atomic(path, b"two")
    assert path.read_bytes() == b"two" and path.stat().st_mode & 0o777 == 0o640  # mode kept
    private = write_atomic(tmp_path / "spill.json", b"{}", mode=0o600)
    assert private.stat().st_mode & 0o777 == 0o600
    assert read_regular(private, 10, check=owned_privately(private)) == b"{}"
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(SymlinkRefused):
        write_atomic(link, b"through")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "side.launch", "spill.json"]


def test_write_atomic_failure_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    path.write_bytes(b"old")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_owned_privately_refuses_a_file_others_may_read(tmp_path):
    path = tmp_path / "spill.json"
    path.write_bytes(b"{}")
    os.chmod(path, 0o644)
    with pytest.raises(FileRefused, match=r"is not a private regular file of this user \(mode 0o644"):
        read_regular(path, 10, check=owned_privately(path))
