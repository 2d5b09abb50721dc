"""Engine tier: a live switch reaches every scheduler rank through sglang's own
collective RPC path and takes effect on all ranks at the same step; a rank that cannot apply it
makes every rank keep the old value.

Two spawned gloo ranks (see _live_rank.py for what is real): the entry rank reads
``RpcReqInput`` from sglang's RPC channel, sglang's ``broadcast_pyobj`` hands the control requests
to both ranks over the TP CPU group, both run sglang's ``Scheduler.handle_rpc_request`` (with
dsv41_flags' methods and reply wrapper), then a verify step of the real folded_fence target.
What needs a GPU (a full server: model, CUDA graphs, the HTTP process) is not run here; the
README names it.
"""
from __future__ import annotations

import multiprocessing
import queue as queue_mod
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

pytest.importorskip("torch.distributed")
if not __import__("importlib").util.find_spec("sglang"):
    pytest.skip("sglang not installed", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from _live_rank import FAULT_STEP, run_rank  # noqa: E402

DEADLINE_S = 240  # each rank imports sglang's scheduler (~8 s alone, more on 2 shared cores)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run both ranks; ``{rank: report}``. A rank that fails, hangs or dies fails the module with
    its traceback; every spawned process is killed at the end."""
    work = tmp_path_factory.mktemp("live")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    ipc = f"ipc://{work / 'rpc'}"
    procs = [ctx.Process(target=run_rank, name=f"rank{r}",
                         args=(r, str(work / "pg-init"), ipc, str(REPO), str(HERE), q))
             for r in range(2)]
    for p in procs:
        p.start()
    reports, errors = {}, {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(reports) + len(errors) < 2:
            try:
                rank, kind, payload = q.get(timeout=1.0)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    errors["timeout"] = f"no report from every rank within {DEADLINE_S} s"
                    break
                dead = [p for r, p in enumerate(procs) if r not in reports and not p.is_alive()]
                if dead:
                    try:
                        rank, kind, payload = q.get(timeout=2.0)
                    except queue_mod.Empty:
                        errors.update({p.name: f"died with exit code {p.exitcode}" for p in dead})
                        break
                else:
                    continue
            (reports if kind == "done" else errors)[rank] = payload
            if kind == "error":
                break
    finally:
        for p in procs:
            p.join(timeout=0 if errors else 30)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        q.close()
    if errors:
        pytest.fail("rank failure(s):\n" + "\n".join(f"--- {w}:\n{e}" for w, e in errors.items()),
                    pytrace=False)
    assert not reports[0]["client_error"], reports[0]["client_error"][0]
    return reports


def _replies(ranks):
    return dict(ranks[0]["replies"])


def _first(steps, key):
    return next(s["step"] for s in steps if s[key])


def test_boot_installs_folded_fence_bypassed_on_both_ranks(ranks):
    assert ranks[0]["boot_state"] == ranks[1]["boot_state"] == "bypassed"
    for r in (0, 1):
        first = ranks[r]["steps"][0]
        assert first["gate"] is False and first["generation"] == 0 and first["fenced"] is False


def test_a_switch_mid_stream_takes_effect_on_both_ranks_at_the_same_step(ranks):
    on = [_first(ranks[r]["steps"], "gate") for r in (0, 1)]
    assert on[0] == on[1] and 4 <= on[0] < FAULT_STEP, on
    step = on[0]
    for r in (0, 1):
        steps = ranks[r]["steps"]
        # the real folded read: aliases the verify buffers before, detached from the switch on
        assert all(not s["fenced"] for s in steps if s["step"] < step)
        assert all(s["fenced"] for s in steps if step <= s["step"] < FAULT_STEP)
        assert all(s["generation"] == (1 if s["step"] >= step else 0) for s in steps)
        toggled = [e for e in ranks[r]["events"] if e["event"] == "feature.toggled"]
        assert len(toggled) == 1
        ev = toggled[0]
        assert (ev["feature"], ev["old"], ev["new"], ev["generation"]) == ("folded_fence", False, True, 1)
        assert ev["step"] == step and ev["requested_by"] == "test-operator"
        assert ev["tp_rank"] == r and ev["role"] == "scheduler" and ev["pid"] > 0
    assert toggled[0]["request_id"] == [e for e in ranks[0]["events"]
                                        if e["event"] == "feature.toggled"][0]["request_id"]
    reply = _replies(ranks)["set_on"]
    assert reply["ok"] is True and reply["generation"] == 1 and reply["step"] == step
    assert [(x["tp_rank"], x["step"], x["generation"], x["new"]) for x in reply["ranks"]] == \
        [(0, step, 1, True), (1, step, 1, True)]


def test_status_reports_every_rank_with_its_generation_and_live_value(ranks):
    status = _replies(ranks)["status_1"]
    assert status["ok"] is True and [x["tp_rank"] for x in status["ranks"]] == [0, 1]
    for entry in status["ranks"]:
        assert entry["generation"] == 1 and entry["role"] == "scheduler"
        ff = {f["name"]: f for f in entry["features"]}["folded_fence"]
        assert ff["state"] == "installed" and ff["value"] is True and ff["live"] is True
        assert ff["source"].startswith("live switch generation 1 by test-operator")
        assert {f["name"]: f for f in entry["features"]}["autotune_keep"]["live"] is False
        assert [s["generation"] for s in entry["switches"]] == [1]
        assert {"profile", "settings_files", "fingerprint", "warnings", "notes"} <= set(entry)
    assert status["ranks"][0]["step"] == status["ranks"][1]["step"]


def test_a_rank_that_cannot_apply_makes_every_rank_keep_the_old_value(ranks):
    reply = _replies(ranks)["set_off"]
    assert reply["ok"] is False
    assert "refused, every rank keeps its value and generation 1" in reply["error"]
    assert "tp1" in reply["error"] and "'folded_fence' is uninstalled" in reply["error"]
    assert [v["ok"] for v in reply["ranks"]] == [True, False]
    for r in (0, 1):
        after = [s for s in ranks[r]["steps"] if s["step"] > FAULT_STEP]
        assert after and all(s["gate"] is True and s["generation"] == 1 for s in after)
        assert ranks[r]["generation"] == 1 and [t["generation"] for t in ranks[r]["history"]] == [1]
        refused = [e for e in ranks[r]["events"] if e["event"] == "feature.toggle_refused"]
        assert [e["feature"] for e in refused] == ["folded_fence", "autotune_keep"]
        assert refused[0]["generation"] == 1 and refused[0]["tp_rank"] == r
    # rank 0 still fences (its patch is on); rank 1's patch is gone
    assert all(s["fenced"] for s in ranks[0]["steps"] if s["step"] > FAULT_STEP)
    status = _replies(ranks)["status_2"]
    states = [{f["name"]: f["state"] for f in e["features"]}["folded_fence"] for e in status["ranks"]]
    assert states == ["installed", "uninstalled"]
    assert [e["generation"] for e in status["ranks"]] == [1, 1]


def test_switching_a_feature_that_is_not_live_is_refused_on_every_rank(ranks):
    reply = _replies(ranks)["not_live"]
    assert reply["ok"] is False and "'autotune_keep' is not live-safe" in reply["error"]
    assert "relaunch" in reply["error"]
