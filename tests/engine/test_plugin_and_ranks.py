"""Engine tier, every process: sglang's real ``load_plugins()`` in a spawned process
installs the armed features on the real target modules; two gloo ranks on the CPU with different
settings fail the rank guard naming the differing key, and agree when equal."""
import multiprocessing as mp
import os
import sys
import traceback
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]


def _plugin_child(q, env):
    try:
        os.environ.update(env)
        from sglang.srt.plugins import load_plugins

        load_plugins()                         # sglang's own loader -> our entry point
        import dsv41_flags
        import sglang.srt.speculative.dspark_components.dspark_verify as dv

        rt = dsv41_flags.current_runtime()
        q.put({"ok": True, "states": {s.name: s.state for s in rt.states()},
               "wrapped": getattr(dv.TargetVerifyExecutor.accept_and_finalize, "__module__", ""),
               "guard": rt.guard_registered,  # HookRegistry.register accepted the rank guard
               "role": rt.context.fields.get("role"),
               "live_rpc": rt.live.transport.get("armed"),
               "folded_gate": rt.live.gates["folded_fence"].on})
    except BaseException:
        q.put({"ok": False, "error": traceback.format_exc()})


def _run(target, *args, n=1, timeout=240):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(q, *args, i) if n > 1 else (q, *args)) for i in range(n)]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(q.get(timeout=timeout))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    for r in results:
        assert r["ok"], r.get("error")
    return results


def test_sglang_load_plugins_installs_armed_features_in_spawned_process():
    env = {"DSV41_SETTINGS": str(REPO / "settings.toml"), "DSV41_FOLDED_FENCE": "1",
           "DSV41_LOG_FORMAT": "json"}
    (result,) = _run(_plugin_child, env)
    assert result["states"]["folded_fence"] == "installed"
    assert result["states"]["autotune_keep"] == "off"
    assert result["wrapped"] == "dsv41_flags_features.folded_fence"   # the real class is patched
    assert result["guard"] is True
    # a live feature exists: the plugin armed the live-switch RPC (methods on Scheduler, routes)
    assert result["live_rpc"] is True and result["folded_gate"] is True


def _serving_child(q, env):
    try:
        os.environ.update(env)
        from sglang.srt.plugins import load_plugins
        from structlog.testing import capture_logs

        def run_scheduler_process(tp_rank=0, pp_rank=0, dp_rank=None):  # sglang's frame shape
            load_plugins()

        run_scheduler_process()
        import dsv41_flags
        from sglang.srt.managers.scheduler import Scheduler

        rt = dsv41_flags.current_runtime()
        with capture_logs() as events:
            for _ in range(2):                 # the loop started twice: one event
                try:
                    Scheduler.run_event_loop(Scheduler.__new__(Scheduler))
                except Exception:              # a Scheduler without __init__ cannot serve
                    pass
        q.put({"ok": True, "serving": [e for e in events if e["event"] == "flags.serving"],
               "states": {s.name: s.state for s in rt.states()}})
    except BaseException:
        q.put({"ok": False, "error": traceback.format_exc()})


def test_a_scheduler_says_once_which_armed_features_are_in_effect_when_it_serves():
    env = {"DSV41_SETTINGS": str(REPO / "settings.toml"), "DSV41_FOLDED_FENCE": "1",
           "DSV41_LOG_FORMAT": "json"}
    (result,) = _run(_serving_child, env)
    (event,) = result["serving"]
    # the fence's target (speculative decoding) is never imported by a plain scheduler
    assert result["states"]["folded_fence"] in ("armed", "pending")
    assert event["pending"] == ["folded_fence"] and event["installed"] == [] and event["other"] == {}


def _rank(q, init_file, settings_text, tmp, rank):
    try:
        import torch.distributed as dist

        from dsv41_flags.rank_guard import RankMismatchError, check_ranks
        from dsv41_flags.assembly import build

        settings = Path(tmp) / f"rank{rank}.toml"
        settings.write_text(settings_text[rank])
        rt = build([settings], None, environ={}, argv=[], features_dir=REPO / "features",
                   use_snapshot=False, configure_logging=False)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
        try:
            check_ranks(rt, None, mode="raise")
            q.put({"ok": True, "rank": rank, "mismatch": None})
        except RankMismatchError as exc:
            q.put({"ok": True, "rank": rank, "mismatch": str(exc), "table": exc.table})
        finally:
            dist.destroy_process_group()
    except BaseException:
        q.put({"ok": False, "error": traceback.format_exc()})


@pytest.mark.parametrize("texts,differs", [
    (["[default]\nautotune_keep = true\n", "[default]\nautotune_keep = true\n"], None),
    (["[default]\nautotune_keep = true\n", "[default]\nautotune_keep = false\n"], "AUTOTUNE_KEEP"),
    # a volatile key may differ (keep_old); the armed set may not
    (["[default]\nautotune_keep_keep_old = 2\n", "[default]\nautotune_keep_keep_old = 9\n"], None),
])
def test_rank_guard_over_two_gloo_ranks(tmp_path, texts, differs):
    results = _run(_rank, str(tmp_path / "init"), texts, str(tmp_path), n=2)
    if differs is None:
        assert all(r["mismatch"] is None for r in results)
    else:
        for r in results:
            assert r["mismatch"] and "armed" in r["mismatch"]
            assert f"{differs}: rank 0: True, rank 1: False" in r["mismatch"]


def test_settings_error_stops_the_sglang_process_despite_load_plugins_catching():
    import subprocess

    code = ("from sglang.srt.plugins import load_plugins\n"
            "load_plugins()\n"
            "print('BOOTED')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(REPO / "settings.toml"), DSV41_FOLDED_FENCE="maybe")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    assert "DSV41_FOLDED_FENCE='maybe'" in proc.stderr
