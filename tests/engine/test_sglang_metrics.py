"""Engine tier: the flag gauges of a scheduler rank, written in prometheus_client's multiprocess
mode (as a rank of a ``--enable-metrics`` launch writes them) and read back by the
``MultiProcessCollector`` sglang's ``/metrics`` uses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]

RANK = r"""
import json, sys
from pathlib import Path
from dsv41_flags.assembly import build
from dsv41_flags.engines.sglang.metrics import update

repo = Path(sys.argv[1])
rt = build([repo / "settings.toml"], None, environ={}, argv=[], features_dir=repo / "features",
           use_snapshot=False, configure_logging=False)
rt.context.update(role="scheduler", tp_rank=1, pp_rank=0)
rt.arm()
assert update(rt, force=True)
rt.switch("folded_fence", True, requested_by="metrics-test")
assert update(rt, force=True)
print(json.dumps({s.name: s.state for s in rt.states()}))
"""


def test_each_feature_state_and_the_generation_per_rank_reach_the_collector(tmp_path):
    pytest.importorskip("prometheus_client")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env = {k: v for k, v in env.items() if not k.startswith("DSV41_")}
    proc = subprocess.run([sys.executable, "-c", RANK, str(REPO)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    states = json.loads(proc.stdout.strip().splitlines()[-1])

    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    samples = {}
    for family in registry.collect():
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    rank = (("dp_rank", "0"), ("pp_rank", "0"), ("tp_rank", "1"))
    for name, state in states.items():
        key = ("dsv41_flags_feature_state", tuple(sorted(
            (("feature", name), ("state", state), *rank))))
        assert samples[key] == 1, (name, state, samples)
    current = {dict(k[1])["feature"]: dict(k[1])["state"] for k, v in samples.items()
               if k[0] == "dsv41_flags_feature_state" and v == 1}
    assert current == states
    assert samples[("dsv41_flags_generation", rank)] == 1
    assert b"dsv41_flags_feature_state" in generate_latest(registry)
