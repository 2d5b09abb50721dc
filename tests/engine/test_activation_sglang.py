"""Engine tier, activation's error policy on the real sglang 0.5.23:
sglang's own ``load_plugins()`` with a malformed snapshot or a settings error, and the real
``sglang.launch_server`` launch (tp 2 on CPU), plain and under ``dsv41-flags run --``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("dsv41-flags"))
LAUNCH_TIMEOUT = 240  # seconds; every process has reported after ~20 s on an idle 2-core CPU


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV41_", "SGLANG_"))}
    env.update(DSV41_SETTINGS=str(REPO / "settings.toml"), DSV41_LOG_FORMAT="json", **extra)
    return env


def _events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and "event" in e:
            out.append(e)
    return out


LOAD = "from sglang.srt.plugins import load_plugins\nload_plugins()\nprint('BOOTED')\n"


@pytest.mark.parametrize("extra,cause", [
    ({"DSV41_FOLDED_FENCE": "1", "DSV41_SNAPSHOT": '{"v":1}'}, "schema version"),     # a malformed snapshot
    ({"DSV41_FOLDED_FENCE": "maybe"}, "DSV41_FOLDED_FENCE='maybe'"),                  # a settings error
])
def test_real_load_plugins_stops_with_a_flags_error(extra, cause):
    proc = subprocess.run([sys.executable, "-c", LOAD], env=_env(**extra), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    assert "Failed to execute general plugin" not in proc.stderr
    (err,) = [e for e in _events(proc.stderr) if e["event"] == "flags.error"]
    assert cause in err["cause"] and err["entry"] == "sglang-plugin" and err["strict"] is True
    assert err["pid"] > 0 and "role" in err


def test_real_load_plugins_non_strict_runs_and_says_what_is_on():
    proc = subprocess.run([sys.executable, "-c", LOAD + "import dsv41_flags\n"
                           "print(dsv41_flags.current_runtime().from_snapshot)\n"],
                          env=_env(DSV41_FOLDED_FENCE="1", DSV41_SNAPSHOT='{"v":1}', DSV41_STRICT="0"),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["BOOTED", "False"]
    names = [e["event"] for e in _events(proc.stderr)]
    assert names[:2] == ["flags.resolved", "snapshot.refused"]
    resolved = [e for e in _events(proc.stderr) if e["event"] == "flags.resolved"][0]
    assert resolved["armed"] == ["folded_fence"]


def _launch(tmp_path: Path, wrap: list[str]):
    """Start the real ``sglang.launch_server`` launch (tp 2 on CPU, after ``wrap``) in its own process group; returns (Popen, stderr path)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6, "torch_dtype": "float32", "hidden_act": "silu"}))
    env = _env(SGLANG_CPU_OMP_THREADS_BIND="0|1", DSV41_FOLDED_FENCE="1", DSV41_AUTOTUNE_KEEP="1")
    err = tmp_path / "stderr.txt"
    with open(err, "w") as fh:
        proc = subprocess.Popen(wrap + [sys.executable, "-m", "sglang.launch_server", "--model-path",
                                        str(model), "--load-format", "dummy", "--device", "cpu",
                                        "--skip-tokenizer-init", "--tp", "2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=fh, cwd=tmp_path,
                                start_new_session=True)
    return proc, err


def _seen_all(events: list[dict]) -> bool:
    """Every process of the launch has said what it runs: four flags.resolved, and both
    schedulers' feature.installed."""
    resolved = {e["pid"]: e for e in events if e["event"] == "flags.resolved"}
    schedulers = {p for p, e in resolved.items() if e.get("role") == "scheduler"}
    installed = {e["pid"] for e in events if e["event"] == "feature.installed"}
    return len(resolved) >= 4 and len(schedulers) == 2 and schedulers <= installed


def _finish(proc: subprocess.Popen, err: Path, deadline: float) -> list[dict]:
    """Wait until sglang stops on its own or every process has reported (bounded by
    ``deadline``), then kill every process of its group; returns the launch's events."""
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if _seen_all(_events(err.read_text(errors="replace"))):
                time.sleep(1.0)  # trailing events of the same moment
                break
            time.sleep(0.5)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    return _events(err.read_text(errors="replace"))


def _check_roles_and_ranks(events: list[dict]) -> None:
    resolved = [e for e in events if e["event"] == "flags.resolved"]
    by_role = sorted((e["role"], e.get("tp_rank", -1)) for e in resolved)
    assert by_role == [("detokenizer", -1), ("launcher", -1), ("scheduler", 0), ("scheduler", 1)], \
        [(e["pid"], e["role"], e.get("process")) for e in resolved]
    assert len({e["pid"] for e in resolved}) == 4                     # once per process
    assert len({e["fingerprint"] for e in resolved}) == 1             # one launch
    assert all(e["armed"] == ["autotune_keep", "folded_fence"] for e in resolved)
    schedulers = {e["pid"]: e["tp_rank"] for e in resolved if e["role"] == "scheduler"}
    for e in events:                                                  # ranks from the first event on
        if e["pid"] in schedulers:
            assert e.get("tp_rank") == schedulers[e["pid"]] and e.get("pp_rank") == 0, e
            assert e["process"] != "MainProcess"
    installed = [e for e in events if e["event"] == "feature.installed" and e["pid"] in schedulers]
    assert {e["tp_rank"] for e in installed} == {0, 1}
    assert not [e for e in events if e["event"] == "flags.error"]


def test_real_launch_plain_and_under_run_every_process_reports_role_ranks_and_fingerprint(tmp_path):
    """Both launches side by side (one bounded wait): plain (sglang's plugin loader in every
    process) and under ``dsv41-flags run --``, where the bootstrap leaves sglang's spawned
    processes to the plugin (role and ranks known before the first event) and multiprocessing's
    resource tracker alone."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    started = [_launch(tmp_path / "plain", []), _launch(tmp_path / "run", [CLI, "run", "--"])]
    try:
        results = [_finish(proc, err, deadline) for proc, err in started]
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for events in results:
        _check_roles_and_ranks(events)
