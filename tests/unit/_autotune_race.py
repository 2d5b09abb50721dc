"""One engine of the shared-cache race (test_autotune_keep_files.py), run in a spawned process.

Each round does what one engine boot does to its cache path, with the real functions the patched
sglang functions call: ``boot_digest`` (decide, set a cache of another launch aside),
``before_save``, a tuning save as FlashInfer's ``AutoTuner.save_configs`` does it (re-read the
file on disk, merge, write a temporary, ``os.replace``), then ``after_tuning`` (the sidecar). Launches differ between engines
and rounds. Exceptions propagate to the parent as the process's report.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path


class _Log:
    """A structlog-like logger that keeps the events."""

    def __init__(self):
        self.events = []

    def _add(self, event, **kw):
        self.events.append(dict(kw, event=event))

    info = warning = error = debug = _add


def _fingerprint(launch: int):
    from dsv41_flags.fingerprint import Fingerprint
    from dsv41_flags.fingerprint import canonical

    payload = {"argv": ["sglang.launch_server", "--tp", "2"], "env": {"SGLANG_KNOB": str(launch)},
               "settings": {}}
    return Fingerprint(hashlib.sha256(canonical(payload)).hexdigest(), payload, {})


def _save(cache: Path, entry: str) -> None:
    """FlashInfer's save: merge with the file on disk, atomic replace (serialised among savers
    like one AutoTuner per file would be; the feature's own lock is not held here, as in sglang)."""
    with open(cache.with_name(".test-savers.lock"), "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            data = json.loads(cache.read_text())
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data.setdefault("_metadata", {"gpu": "cpu"})
        data[entry] = 1
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".autotuner_", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, cache)


def run(worker: int, rounds: int, cache_dir: str, features_dir: str, queue) -> None:
    try:
        from dsv41_flags.discovery import discover

        discover(Path(features_dir), entry_points=False)
        feature = sys.modules["dsv41_flags_features.autotune_keep"]
        cache = Path(cache_dir) / "rank_tp0_pp0_dp0.json"
        log = _Log()
        saved = []
        for r in range(rounds):
            fp = _fingerprint((worker + r) % 2)
            feature.boot_digest(cache, {}, fp, 10**6, log, lambda p, e: "stock")
            entry = f"w{worker}r{r}"
            feature.before_save(cache, fp, log)
            _save(cache, entry)
            saved.append(entry)
            feature.after_tuning(cache, fp, log)
        queue.put((worker, "done", {"saved": saved, "events": [e["event"] for e in log.events]}))
    except BaseException:  # noqa: BLE001 - the parent shows it
        queue.put((worker, "error", traceback.format_exc()))
