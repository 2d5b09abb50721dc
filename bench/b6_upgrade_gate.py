"""Benchmark 6: the upgrade gate, reading a local engine wheel (issue 14).

Timed (CPU time: the goal; and wall), per release, in a fresh interpreter each run (framework already imported, nothing parsed
yet): ``open_release(wheel)`` (zipfile, METADATA) plus ``matrix()`` for both seed features (the
static check of every requirement from the wheel's members). Baseline: unzipping the same wheel
(``zipfile.ZipFile(...).extractall`` into a temporary directory), the step an install or a
"look at the source" by hand starts with. Goal: at most 1 s per release.

The wheels come from the upgrade gate's own cache (``sglang==0.5.23`` and ``sglang==0.5.15``;
fetched with pip on first use, as ``dsv41-flags check --engine sglang==X`` does).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_env, main, med, python, row, spread  # noqa: E402

GOAL_S = 1.0
RELEASES = ("0.5.23", "0.5.15")

GATE = """
import json, time
from pathlib import Path
from dsv41_flags.discovery import discover
from dsv41_flags.upgrade_gate.matrix import matrix
from dsv41_flags.upgrade_gate.releases import open_release
features = discover(None)   # the shipped seed features
t0, c0 = time.perf_counter(), time.process_time()
release = open_release({wheel!r})
t1 = time.perf_counter()
rows = matrix(features, [release])
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({{"open": t1 - t0, "check": t2 - t1, "total": t2 - t0, "cpu": c2 - c0,
                  "states": [r["cells"][0]["state"] for r in rows]}}))
"""

UNZIP = """
import json, tempfile, time, zipfile
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    zipfile.ZipFile({wheel!r}).extractall(tmp)
    t1 = time.perf_counter()
print(json.dumps({{"unzip": t1 - t0}}))
"""

FETCH = """
import json
from dsv41_flags.upgrade_gate.releases import open_release
r = open_release({spec!r})
print(json.dumps({{"where": r.where, "error": r.error}}))
"""


def run(quick: bool = False) -> dict:
    reps, unzip_reps = (3, 1) if quick else (7, 3)   # an unzip takes seconds: fewer runs
    env = clean_env()
    rows, details = [], {}
    for version in RELEASES:
        _, fetched = python(FETCH.format(spec=f"sglang=={version}"), env, timeout=1800)
        if fetched["error"]:
            raise RuntimeError(fetched["error"])
        wheel = fetched["where"]
        gate_code = GATE.format(wheel=wheel)
        unzip_code = UNZIP.format(wheel=wheel)
        python(gate_code, env)      # warm-up: page cache
        gates, unzips = [], []
        for i in range(reps):       # alternate, so drift of a shared machine hits both
            gates.append(python(gate_code, env)[1])
            if i < unzip_reps:
                unzips.append(python(unzip_code, env)[1]["unzip"])
        total, cpu = med([g["total"] for g in gates]), med([g["cpu"] for g in gates])
        rows.append(row("6", f"check --engine: read wheel sglang {version} + both seed features "
                             f"({', '.join(gates[0]['states'])}), CPU time", cpu * 1e3, "ms",
                        "unzipping the same wheel (wall)", med(unzips) * 1e3, goal=f"<= {GOAL_S:g} s",
                        met=cpu <= GOAL_S, n=reps,
                        note=f"wall {total * 1e3:.1f} ms: open {med([g['open'] for g in gates]) * 1e3:.1f} ms, check "
                             f"{med([g['check'] for g in gates]) * 1e3:.1f} ms; range "
                             f"{spread([g['total'] for g in gates], 1e3, 1)} ms; unzip "
                             f"{spread(unzips, 1e3, 0)} ms; wheel {Path(wheel).stat().st_size / 1e6:.1f} MB"))
        details[f"sglang {version}"] = {"wheel": wheel}
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    main(run)
