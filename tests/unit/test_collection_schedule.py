"""Activation leaves the engine's garbage-collection schedule as it found it: in a fresh process
(no full collection yet, default thresholds) it runs one full collection while the heap is small,
so the generation counters the framework's own imports advanced start again from zero; in a
process that already had a full collection, or that set its own thresholds, it runs none."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from ..conftest import REPO
from ._child import clean_env, run_cmd

PROBE = """
import gc, json, sys
{before}
full = gc.get_stats()[2]["collections"]
import dsv41_flags
dsv41_flags.activate([{settings!r}])
print(json.dumps({{"full_by_activate": gc.get_stats()[2]["collections"] - full,
                   "gen2_count": gc.get_count()[2]}}))
"""


def _probe(tmp_path, before: str) -> dict:
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nstrict = true\n")
    env = clean_env(PYTHONPATH=str(REPO / "src"), DSV41_LOG_FORMAT="json")
    code = PROBE.format(before=textwrap.dedent(before), settings=str(settings))
    proc = run_cmd([sys.executable, "-c", code], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_fresh_process_gets_one_full_collection_and_its_counters_reset(tmp_path):
    out = _probe(tmp_path, "")
    assert out["full_by_activate"] == 1
    assert out["gen2_count"] == 0


@pytest.mark.parametrize("before", [
    "gc.collect()",                      # the process already had its first full collection
    "gc.set_threshold(50_000, 20, 20)",  # the process keeps its own schedule
    "gc.disable()",                      # no collection at all
], ids=["after-a-full-collection", "own-thresholds", "collector-disabled"])
def test_a_process_with_its_own_schedule_is_left_alone(tmp_path, before):
    assert _probe(tmp_path, before)["full_by_activate"] == 0
