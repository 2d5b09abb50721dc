"""With ``--enable-metrics`` (prometheus_client in multiprocess mode), ``GET /metrics`` carries,
per feature and scheduler rank, a gauge labelled ``feature``, ``tp_rank``, ``pp_rank``,
``dp_rank`` and ``state`` (1 for the rank's current state), and a gauge of the live generation per
rank. Metric names start with ``dsv41_flags``; the generation gauge's name holds ``generation``.
"""
from __future__ import annotations

import re

import pytest

from ._server import Launch, http

pytestmark = pytest.mark.server

RANK_LABELS = ("tp_rank", "pp_rank", "dp_rank")
_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> list[tuple[str, dict, float]]:
    """``(name, labels, value)`` of every sample in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group("labels") or ""))
            out.append((m.group("name"), labels, float(m.group("value"))))
    return out


@pytest.fixture(scope="module")
def metrics_server(kit, tmp_path_factory):
    launch = Launch.server(kit, "metrics", tmp_path_factory.mktemp("metrics"), tp=2,
                           extra_args=("--enable-metrics",))
    launch.start()
    try:
        yield launch.wait_healthy()
    finally:
        launch.stop()


def _rank_key(labels: dict) -> tuple:
    return tuple(str(labels.get(k)) for k in RANK_LABELS)


def test_metrics_carry_each_features_state_and_the_generation_per_rank(kit, metrics_server):
    code, answer = kit.cli_json("set", "folded_fence=on", "--url", metrics_server.url)
    assert code == 0, answer
    code, status = kit.cli_json("status", "--url", metrics_server.url)
    assert code == 0, status
    code, text = http("GET", metrics_server.url + "/metrics")
    assert code == 200
    ours = [s for s in samples(text) if s[0].startswith("dsv41_flags")]
    states = [s for s in ours if {"feature", "state", *RANK_LABELS} <= set(s[1])]
    generations = [s for s in ours if "generation" in s[0] and set(RANK_LABELS) <= set(s[1])]
    assert status["ranks"], status
    for rank in status["ranks"]:
        key = tuple(str(rank.get(k) if rank.get(k) is not None else 0) for k in RANK_LABELS)
        for feature in rank["features"]:
            current = [s for s in states if _rank_key(s[1]) == key
                       and s[1]["feature"] == feature["name"] and s[2] == 1]
            assert [s[1]["state"] for s in current] == [feature["state"]], (key, feature, current)
        assert [s[2] for s in generations if _rank_key(s[1]) == key] == [rank["generation"]], \
            (key, generations)
    assert rank["generation"] == answer["generation"]


def test_metrics_carry_every_process_outside_the_ranks(kit, metrics_server):
    """The HTTP server process and the detokenizer write their own feature states and generation
    (``dsv41_flags_process_feature_state{feature, role, pid, state}``), as status --url lists
    them."""
    code, status = kit.cli_json("status", "--url", metrics_server.url)
    assert code == 0, status
    code, text = http("GET", metrics_server.url + "/metrics")
    assert code == 200
    ours = samples(text)
    processes = [status["server"], *status["processes"]]
    assert {p["role"] for p in processes} >= {"detokenizer"}, processes
    for process in processes:
        pid = str(process["pid"])
        for feature in process["features"]:
            current = [s for s in ours if s[0] == "dsv41_flags_process_feature_state"
                       and s[1].get("pid") == pid and s[1].get("feature") == feature["name"]
                       and s[2] == 1]
            assert [s[1]["state"] for s in current] == [feature["state"]], (process["role"], current)
            assert current[0][1]["role"] == process["role"]
        generation = [s[2] for s in ours if s[0] == "dsv41_flags_process_generation"
                      and s[1].get("pid") == pid]
        assert generation == [process["generation"]], (process["role"], generation)
