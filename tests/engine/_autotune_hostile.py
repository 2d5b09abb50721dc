"""Run by test_autotune_keep_hostile.py in a fresh interpreter: autotune_keep installed on the
real ``flashinfer_autotune``; each hostile cache / sidecar is fed to the patched
``_autotune_cache_digest`` under ``signal.alarm`` (a hang becomes a report, not a stuck suite).
Prints one JSON object: case -> {"result" | "raised", "events", "seconds"}."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

TARGET = "sglang.srt.model_executor.runner.flashinfer_autotune"
HEX = "ab" * 32


def _cases(d: Path) -> dict:
    def cache(name, content='{"_metadata": {"gpu": "x"}, "k": 1}'):
        path = d / name / "rank_tp0_pp0_dp0.json"
        path.parent.mkdir()
        if content is not None:
            path.write_text(content)
        return path

    def with_side(name, side_text):
        path = cache(name)
        path.with_suffix(".launch").write_text(side_text)
        return path

    out = {
        "payload_argv_int": with_side("a", json.dumps({"fingerprint": "x" * 64, "payload": {"argv": 5}})),
        "payload_env_list": with_side("b", json.dumps({"fingerprint": HEX, "payload": {"env": [1]}})),
        "sidecar_deep": with_side("c", "[" * 100000),
        "cache_deep": cache("d", "[" * 100000),
    }
    fifo_cache = cache("e", None)
    os.mkfifo(fifo_cache)
    out["cache_fifo"] = fifo_cache
    fifo_side = cache("f")
    os.mkfifo(fifo_side.with_suffix(".launch"))
    out["sidecar_fifo"] = fifo_side
    zero_side = cache("g")
    zero_side.with_suffix(".launch").symlink_to("/dev/zero")
    out["sidecar_dev_zero"] = zero_side
    zero_cache = cache("h", None)
    zero_cache.symlink_to("/dev/zero")
    out["cache_dev_zero"] = zero_cache
    return out


def main(repo: str, workdir: str) -> None:
    import importlib

    from structlog.testing import capture_logs

    from dsv41_flags.assembly import build

    mod = importlib.import_module(TARGET)
    rt = build([Path(repo) / "settings.toml"], None, environ={"DSV41_AUTOTUNE_KEEP": "1"},
               argv=["python", "-m", "sglang.launch_server"], use_snapshot=False, configure_logging=False)
    rt.arm()
    report = {"state": {s.name: s.state for s in rt.states()}["autotune_keep"]}

    def alarm(*_):
        raise TimeoutError("hung for 10 s")

    signal.signal(signal.SIGALRM, alarm)
    for name, path in _cases(Path(workdir)).items():
        entry: dict = {}
        start = time.monotonic()
        with capture_logs() as logs:
            signal.alarm(10)
            try:
                entry["result"] = mod._autotune_cache_digest(path, {})
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                entry["raised"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            finally:
                signal.alarm(0)
        entry["seconds"] = round(time.monotonic() - start, 3)
        entry["events"] = [e["event"] for e in logs]
        entry["errors"] = [e.get("cause") for e in logs if e["event"] == "autotune_keep.error"]
        report[name] = entry
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
