"""Benchmark 5: the static drift check against importing the engine.

``dsv41-flags check --all`` parses each feature's target source and looks the required names up
without importing the engine. Timed:
  - in process: ``dsv41_flags.upgrade_gate.static_check.check_feature`` on both features in a fresh interpreter
    (cold: nothing parsed yet), perf_counter around the two calls;
  - the CLI as a subprocess (``dsv41-flags check --all --settings settings.toml``), CPU time
    (user + system, ``getrusage`` of children: the goal row) and wall time;
baseline: a fresh interpreter importing both targets (``flashinfer_autotune`` and
``dspark_verify``), in process, CPU and wall. Goal: at most 2 s.
"""
from __future__ import annotations

import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CLI, SETTINGS, clean_env, command, main, med, python, row, spread  # noqa: E402

GOAL_S = 2.0
IMPORT_TIMEOUT_S = 1200

CHECK = """
import time, json
from pathlib import Path
from dsv41_flags.discovery import discover
from dsv41_flags.upgrade_gate.static_check import check_feature
features = discover(None)   # the shipped seed features
t0 = time.perf_counter()
results = [check_feature(f) for f in features]
t1 = time.perf_counter()
print(json.dumps({{"check": t1 - t0, "ok": all(r.ok for r in results),
                  "targets": [f.target for f in features]}}))
"""

IMPORT = """
import time, json
t0 = time.perf_counter()
import importlib
for target in {targets!r}:
    importlib.import_module(target)
t1 = time.perf_counter()
print(json.dumps({{"import": t1 - t0}}))
"""


def run(quick: bool = False) -> dict:
    reps, import_reps = (3, 1) if quick else (7, 2)
    env = clean_env()
    check_code = CHECK.format()
    _, first = python(check_code, env)
    assert first["ok"], "static check reports drift"
    targets = first["targets"]
    cli = [CLI, "check", "--all", "--settings", str(SETTINGS)]
    command(cli, env)  # warm-up
    checks = [python(check_code, env)[1]["check"] for _ in range(reps)]
    clis, cli_cpus = [], []
    for _ in range(reps):
        before = children_cpu()
        clis.append(command(cli, env)[0])
        cli_cpus.append(children_cpu() - before)
    import_code = IMPORT.format(targets=targets)
    # importing the engine takes 10 s on 2 quiet cores and minutes on a loaded machine
    python(import_code, env, timeout=IMPORT_TIMEOUT_S)  # warm-up: page cache
    imports, import_cpus = [], []
    for _ in range(import_reps):
        before = children_cpu()
        imports.append(python(import_code, env, timeout=IMPORT_TIMEOUT_S))
        import_cpus.append(children_cpu() - before)
    imp_wall, imp_in = med([w for w, _ in imports]), med([d["import"] for _, d in imports])
    cli_s, check_s, cli_cpu = med(clis), med(checks), med(cli_cpus)
    rows = [
        row("5", "dsv41-flags check --all (CLI subprocess, CPU time)", cli_cpu * 1e3, "ms",
            "fresh interpreter importing both targets (CPU time)", med(import_cpus) * 1e3,
            goal=f"<= {GOAL_S:g} s", met=cli_cpu <= GOAL_S, n=reps,
            note=f"user + system time of the process (getrusage of children): a loaded machine "
                 f"stretches wall time, not this; range {spread(cli_cpus, 1e3, 0)} ms"),
        row("5", "dsv41-flags check --all (CLI subprocess, wall)", cli_s * 1e3, "ms",
            "fresh interpreter importing both targets (wall)", imp_wall * 1e3,
            goal=f"<= {GOAL_S:g} s (wall, info)", n=reps,
            note=f"range {spread(clis, 1e3, 0)} ms; baseline {import_reps} runs "
                 f"{spread([w for w, _ in imports], 1e3, 0)} ms"),
        row("5", "check_feature() on both features (in process, cold)", check_s * 1e3, "ms",
            "importing both targets (in process)", imp_in * 1e3, goal=f"<= {GOAL_S:g} s",
            met=check_s <= GOAL_S, n=reps, note=f"range {spread(checks, 1e3, 2)} ms"),
    ]
    return {"rows": rows, "details": {"targets": targets}}


def children_cpu() -> float:
    """User + system seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main(run)
