"""``dsv41_flags.cache_keeping``: reading a sidecar is total (any content or file kind gives a
``Sidecar`` or an error saying why, never an exception, never a block) and ``diff`` never raises."""

import json
import os
import time

import pytest
from hypothesis import given, settings, strategies as st

import dsv41_flags.fingerprint
from dsv41_flags.cache_keeping import Sidecar, payload_problem, read_sidecar, sidecar_path, write_sidecar

from ._hostile import HEX, HOSTILE_SIDECARS


@pytest.mark.parametrize("name", sorted(HOSTILE_SIDECARS))
def test_read_sidecar_is_total_on_hostile_content(tmp_path, name):
    side = tmp_path / "c.launch"
    data = HOSTILE_SIDECARS[name]
    side.write_bytes(data if isinstance(data, bytes) else data.encode())
    got = read_sidecar(side)
    assert got.payload is None and got.digest == "" and str(side) in got.error and "not a sidecar" in got.error
    assert dsv41_flags.cache_keeping.diff(got.payload or {}, {"argv": [], "env": {}, "settings": {}}) is not None


def test_read_sidecar_never_blocks_never_follows_never_loads_too_much(tmp_path):
    fifo = tmp_path / "fifo.launch"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.launch"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "good.json"
    fp = dsv41_flags.fingerprint.Fingerprint(HEX, {"argv": ["x"], "env": {}, "settings": {"K": [1, "a"]}}, {})
    write_sidecar(sidecar_path(good), fp)
    link = tmp_path / "link.launch"
    link.symlink_to(sidecar_path(good))
    big = tmp_path / "big.launch"
    big.write_bytes(b" " * (dsv41_flags.cache_keeping.SIDECAR_MAX_BYTES + 1))
    start = time.monotonic()
    results = {p.name: read_sidecar(p) for p in (fifo, zero, link, big, tmp_path / "missing.launch", tmp_path)}
    assert time.monotonic() - start < 5
    assert all(r.payload is None and r.error for r in results.values()), results
    assert "symbolic link" in results["link.launch"].error
    assert read_sidecar(sidecar_path(good)) == Sidecar(HEX, fp.payload)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                           max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(payload=json_values | st.fixed_dictionaries({}, optional={"argv": json_values, "env": json_values,
                                                                  "settings": json_values}),
       digest=st.sampled_from([HEX, "x" * 64, 5, None]))
def test_read_sidecar_accepts_only_valid_payloads_and_diff_never_raises(tmp_path_factory, payload, digest):
    side = tmp_path_factory.mktemp("s") / "c.launch"
    side.write_text(json.dumps({"fingerprint": digest, "payload": payload}))
    got = read_sidecar(side)
    assert isinstance(got, Sidecar)
    if got.payload is not None:
        assert payload_problem(got.payload) is None and got.digest == HEX
        dsv41_flags.cache_keeping.diff(got.payload, {"argv": ["a"], "env": {"B": "1"}, "settings": {"K": 1}})
    else:
        assert got.error
    dsv41_flags.cache_keeping.diff(payload, payload)  # even unvalidated: never raises


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"[1, 2]", b'{"payload": {}}', b"", b"null"])
def test_any_sidecar_content_reads_as_a_mismatch_never_raises(tmp_path, content):
    (tmp_path / "x.launch").write_bytes(content)
    side = read_sidecar(tmp_path / "x.launch")
    assert side.payload is None and "not a sidecar" in side.error
