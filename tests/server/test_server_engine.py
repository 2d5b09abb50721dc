"""An offline ``sglang.Engine`` (the server's arguments, tp 2) in a child process, switched and
read through the public ``dsv41_flags.engines.sglang.switch_engine`` / ``engine_status``
(docs/live-switches.md: through the Engine's own RPC socket). The child writes what it saw as JSON; the
test reads that and the processes' event lines.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from ._server import BOOT_TIMEOUT, GENERATE_BODY, TINY_LLAMA, Launch

pytestmark = pytest.mark.server

ENGINE_TIMEOUT = BOOT_TIMEOUT + 120.0  # boot, then a few calls (each bounded by its own timeout)

SCRIPT = '''
"""Boot an offline sglang.Engine with the server tier's arguments and drive its live switches
through the public API only (dsv41_flags.engines.sglang: switch_engine, engine_status)."""
import json
import sys


def main():
    out_path, model, tp = sys.argv[1], sys.argv[2], int(sys.argv[3])
    body = json.loads(sys.argv[4])
    import sglang
    from dsv41_flags.engines.sglang import engine_status, switch_engine
    from dsv41_flags.live import SwitchError

    engine = sglang.Engine(
        model_path=model, load_format="dummy", skip_tokenizer_init=True, device="cpu",
        tp_size=tp, attention_backend="torch_native", disable_cuda_graph=True,
        sampling_backend="pytorch", max_total_tokens=4096, disable_overlap_schedule=True,
        dtype="float32", skip_server_warmup=True, sleep_on_idle=True)
    result = {}
    try:
        result["status_before"] = engine_status(engine, timeout_s=60)
        result["on"] = switch_engine(engine, "folded_fence", True,
                                                 requested_by="server-tier", timeout_s=60)
        result["generate"] = engine.generate(input_ids=body["input_ids"],
                                             sampling_params=body["sampling_params"])
        result["status_on"] = engine_status(engine, timeout_s=60)
        try:
            switch_engine(engine, "autotune_keep", True, timeout_s=60)
            result["not_live"] = None
        except SwitchError as exc:
            result["not_live"] = {"type": type(exc).__name__, "message": str(exc)}
        result["off"] = switch_engine(engine, "folded_fence", "off",
                                                  requested_by="server-tier", timeout_s=60)
        result["status_off"] = engine_status(engine, timeout_s=60)
    except BaseException as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with open(out_path, "w") as f:
            json.dump(result, f, default=str)
        engine.shutdown()


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def engine_run(kit, tmp_path_factory):
    """Run the Engine script once; ``(launch, result dict)``."""
    work = tmp_path_factory.mktemp("engine")
    (work / "engine_script.py").write_text(SCRIPT)
    out = work / "result.json"
    command = ["python", str(work / "engine_script.py"), str(out), str(kit.model_dir), "2",
               json.dumps(GENERATE_BODY)]
    launch = Launch(kit, "engine", work, command, kit.env("0|1")).start()
    try:
        status = launch.wait_exit(ENGINE_TIMEOUT)
        assert status is not None, f"the Engine script still runs after {ENGINE_TIMEOUT:.0f} s\n" \
                                   f"{launch.tail()}"
        result = json.loads(out.read_text()) if out.is_file() else {}
        assert status == 0 and "error" not in result, \
            f"exit {status}: {result.get('error')}\n{launch.tail()}"
        yield launch, result
    finally:
        launch.stop()


def test_every_engine_process_activates_with_its_role(engine_run):
    launch, _ = engine_run
    resolved = launch.events("flags.resolved")
    assert Counter(e["role"] for e in resolved) == Counter(
        {"engine": 1, "scheduler": 2, "detokenizer": 1}), launch.tail()
    assert len({e["pid"] for e in resolved}) == 4
    assert sorted(e["tp_rank"] for e in resolved if e["role"] == "scheduler") == [0, 1]
    (engine,) = [e for e in resolved if e["role"] == "engine"]
    assert engine["pid"] == launch.proc.pid and engine["from_snapshot"] is False
    assert len({e["fingerprint"] for e in resolved}) == 1
    assert not launch.events("flags.error")


def test_switch_engine_applies_on_both_ranks_in_lockstep(engine_run):
    launch, result = engine_run
    before = result["status_before"]
    assert before["ok"] is True
    assert sorted((r["tp_rank"], r["generation"]) for r in before["ranks"]) == [(0, 0), (1, 0)]
    scheduler_pids = sorted(r["pid"] for r in before["ranks"])

    for key, old, new, generation in (("on", False, True, 1), ("off", True, False, 2)):
        answer = result[key]
        assert (answer["ok"], answer["feature"], answer["old"], answer["new"], answer["generation"]) \
            == (True, "folded_fence", old, new, generation)
        assert sorted(r["pid"] for r in answer["ranks"]) == scheduler_pids
        assert {(r["generation"], r["step"]) for r in answer["ranks"]} == {(generation, answer["step"])}
    assert len(result["generate"]["output_ids"]) == GENERATE_BODY["sampling_params"]["max_new_tokens"]
    assert all(i < TINY_LLAMA["vocab_size"] for i in result["generate"]["output_ids"])

    for key, value, generation in (("status_on", True, 1), ("status_off", False, 2)):
        status = result[key]
        assert status["ok"] is True and len(status["ranks"]) == 2
        for r in status["ranks"]:
            ff = {f["name"]: f for f in r["features"]}["folded_fence"]
            assert (r["generation"], ff["value"]) == (generation, value)
            assert ff["source"].startswith(f"live switch generation {generation} by server-tier")

    # the Engine's own process and its detokenizer applied each switch too (peers)
    others = [e for e in launch.events("feature.toggled") if e["role"] != "scheduler"]
    assert sorted((e["role"], e["generation"], e["new"]) for e in others) == [
        ("detokenizer", 1, True), ("detokenizer", 2, False), ("engine", 1, True),
        ("engine", 2, False)], others
    assert sorted(p["role"] for p in result["on"]["processes"]) == ["detokenizer", "engine"]
    toggled = [e for e in launch.events("feature.toggled") if e["role"] == "scheduler"]
    assert sorted((e["generation"], e["tp_rank"], e["new"]) for e in toggled) == \
        [(1, 0, True), (1, 1, True), (2, 0, False), (2, 1, False)]
    assert sorted(e["pid"] for e in toggled if e["generation"] == 1) == scheduler_pids


def test_switch_engine_refuses_a_feature_that_is_not_live_safe_on_every_rank(engine_run):
    launch, result = engine_run
    refused = result["not_live"]
    assert refused is not None and refused["type"] == "SwitchError"
    assert "'autotune_keep' is not live-safe" in refused["message"]
    assert "every rank keeps its value and generation 1" in refused["message"]
    events = launch.events("feature.toggle_refused")
    assert sorted(e["tp_rank"] for e in events) == [0, 1]
    assert {e["generation"] for e in events} == {1}
