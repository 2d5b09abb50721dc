"""Other shapes of a launch on this machine: data parallel (``--dp-size 2 --tp 1``: a DP
controller and two schedulers, two TP groups), data parallel attention (``--dp-size 2 --tp 2
--enable-dp-attention``: a DP controller and two schedulers, one TP group spanning both DP ranks)
and two nodes (one launch per node, ``--nnodes 2 --node-rank 0|1 --dist-init-addr 127.0.0.1:D
--tp 2``: node 1 runs a scheduler only; the TP group spans both).

- data parallel, with and without DP attention: a switch applies on both schedulers with one
  generation, and ``status --url`` lists both (two control groups without DP attention, one with
  it: one lockstep request, one step);
- two nodes: a switch through node 0 reaches the ranks of both nodes, and every process of both
  nodes reports ONE fingerprint, although each node binds its scheduler to another CPU
  (``SGLANG_CPU_OMP_THREADS_BIND`` "0" and "1": per-node placement, volatile).
"""
from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass, field

import pytest

from ._server import Launch, free_port_block

pytestmark = pytest.mark.server

DP_SWITCH_TIMEOUT = 30.0  # seconds for dsv41-flags set on the dp launch (a switch takes ~1 s)


@dataclass(frozen=True)
class DpShape:
    """One data-parallel launch and what it must show: ``schedulers`` = sorted ``(dp_rank,
    tp_rank)`` of its scheduler processes, ``groups`` = how many TP groups a control request
    reaches."""

    tp: int
    extra_args: tuple
    schedulers: tuple
    groups: int
    env_extra: dict = field(default_factory=dict)


DP_SHAPES = {
    "dp": DpShape(tp=1, extra_args=("--dp-size", "2"), schedulers=((0, 0), (1, 0)), groups=2),
    # DP attention boots on this CPU but no forward runs: every forward pads the batch for the
    # MLP sync and asks the torch_native backend for get_cuda_graph_seq_len_fill_value, which
    # raises NotImplementedError (docs/live-switches.md, Limits). So GET /health must not
    # generate, and this launch serves no request: the switch path runs between steps anyway.
    "dp_attention": DpShape(tp=2, extra_args=("--dp-size", "2", "--enable-dp-attention"),
                            schedulers=((0, 0), (1, 1)), groups=1,
                            env_extra={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}),
}


@pytest.fixture(scope="class", params=sorted(DP_SHAPES))
def dp(kit, tmp_path_factory, request):
    """``(shape, launch)``: one data-parallel launch per parameter, booted once for the class."""
    shape = DP_SHAPES[request.param]
    launch = Launch.server(kit, request.param, tmp_path_factory.mktemp(request.param),
                           tp=shape.tp, bind="0|1", extra_args=shape.extra_args,
                           env_extra=shape.env_extra)
    launch.start()
    try:
        yield shape, launch.wait_healthy()
    finally:
        launch.stop()


class TestDataParallel:
    """``--dp-size 2 --tp 1`` (two TP groups) and ``--dp-size 2 --tp 2 --enable-dp-attention``
    (one TP group over both DP ranks): a DP controller and two schedulers (dp ranks 0 and 1)."""

    def test_a_dp_launch_activates_the_controller_and_both_schedulers(self, dp):
        shape, dp = dp
        resolved = dp.events("flags.resolved")
        roles = Counter(e["role"] for e in resolved)
        assert roles == Counter({"launcher": 1, "data_parallel_controller": 1, "scheduler": 2,
                                 "detokenizer": 1}), roles
        schedulers = [e for e in resolved if e["role"] == "scheduler"]
        assert sorted((e["dp_rank"], e["tp_rank"]) for e in schedulers) == list(shape.schedulers)
        assert len({e["fingerprint"] for e in resolved}) == 1

    def test_a_dp_switch_applies_on_both_schedulers_with_one_generation(self, kit, dp):
        shape, dp = dp
        try:
            code, answer = kit.cli_json("set", "folded_fence=on", "--url", dp.url,
                                        timeout=DP_SWITCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"dsv41-flags set did not answer within {DP_SWITCH_TIMEOUT:.0f} s")
        assert code == 0 and answer["ok"] is True, answer
        assert sorted((r["dp_rank"], r["tp_rank"]) for r in answer["ranks"]) == list(shape.schedulers)
        assert {r["generation"] for r in answer["ranks"]} == {answer["generation"]} == {1}
        if shape.groups == 1:  # one TP group: one lockstep request, so one step on every rank
            assert len({r["step"] for r in answer["ranks"]}) == 1, answer["ranks"]
        code, status = kit.cli_json("status", "--url", dp.url, timeout=DP_SWITCH_TIMEOUT)
        assert code == 0 and status["generations_agree"] is True, status
        assert status["groups"] == shape.groups, status
        assert sorted((r["dp_rank"], r["tp_rank"]) for r in status["ranks"]) == list(shape.schedulers)
        assert {r["generation"] for r in status["ranks"]} == {1}
        fence = [f for r in status["ranks"] for f in r["features"] if f["name"] == "folded_fence"]
        assert [(f["value"], f["source"].startswith("live switch generation 1")) for f in fence] \
            == [(True, True)] * 2, fence
        toggled = dp.wait_events("feature.toggled", 2, role="scheduler")
        assert sorted((e["dp_rank"], e["tp_rank"], e["generation"], e["new"]) for e in toggled) == \
            [(dp_rank, tp_rank, 1, True) for dp_rank, tp_rank in shape.schedulers]


@pytest.fixture(scope="class")
def two_nodes(kit, tmp_path_factory):
    """Node 0 and node 1 of one tp 2 launch, on this machine (ports far apart)."""
    work = tmp_path_factory.mktemp("two_nodes")
    dist_init = f"127.0.0.1:{free_port_block(5)}"
    nodes = [Launch.server(kit, f"node{rank}", work / f"node{rank}", tp=2, bind=str(rank),
                           extra_args=("--nnodes", "2", "--node-rank", str(rank),
                                       "--dist-init-addr", dist_init))
             for rank in (0, 1)]
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_healthy()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


class TestTwoNodes:
    """Node 0 and node 1 of one tp 2 launch on this machine."""

    def test_a_switch_through_node_0_reaches_the_ranks_of_both_nodes(self, kit, two_nodes):
        node0, node1 = two_nodes
        pid_of = {e["tp_rank"]: (e["pid"], node) for node in two_nodes
                  for e in node.events("flags.resolved") if e["role"] == "scheduler"}
        assert {rank: node.name for rank, (_, node) in pid_of.items()} == {0: "node0", 1: "node1"}
        code, answer = kit.cli_json("set", "folded_fence=on", "--url", node0.url,
                                    "--by", "server-tier")
        assert code == 0 and answer["ok"] is True, answer
        assert sorted((r["tp_rank"], r["pid"]) for r in answer["ranks"]) == \
            [(0, pid_of[0][0]), (1, pid_of[1][0])]
        assert {(r["generation"], r["step"]) for r in answer["ranks"]} == \
            {(answer["generation"], answer["step"])}
        # node 1's scheduler logged the switch itself
        (toggled,) = node1.wait_events("feature.toggled", 1, role="scheduler")
        assert (toggled["tp_rank"], toggled["generation"], toggled["new"]) == \
            (1, answer["generation"], True)
        code, status = kit.cli_json("status", "--url", node0.url)
        assert code == 0 and status["generations_agree"] is True, status
        assert sorted(r["tp_rank"] for r in status["ranks"]) == [0, 1]

    def test_every_process_of_both_nodes_reports_one_fingerprint(self, two_nodes):
        roles = [Counter(e["role"] for e in node.events("flags.resolved")) for node in two_nodes]
        assert roles == [Counter({"launcher": 1, "scheduler": 1, "detokenizer": 1}),
                         Counter({"launcher": 1, "scheduler": 1})], roles
        fingerprints = {(node.name, e["role"], e["fingerprint"]) for node in two_nodes
                        for e in node.events("flags.resolved")}
        assert len({f for _, _, f in fingerprints}) == 1, sorted(fingerprints)
