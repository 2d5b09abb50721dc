"""autotune_keep's file handling (no engine): moved aside, never deleted beyond keep_old."""
import sys

from structlog.testing import capture_logs

import structlog


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
