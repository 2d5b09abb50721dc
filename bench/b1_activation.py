"""Benchmark 1: what activating costs, each figure next to its floor measured in the same run.

(a) Child: a ``spawn`` child that has imported what a real sglang scheduler imports before
    ``load_plugins()`` (asyncio, inspect, typing, logging, importlib.metadata, rich.console,
    attr, pygments, hashlib: each checked against a real scheduler by tests/engine) runs ``import dsv41_flags; activate()`` from the parent's ``DSV41_SNAPSHOT``
    (both seed features armed). Floor: the same child importing only the libraries a child
    activation must use (structlog, with what it pulls, and wrapt). Goal: floor + 5 ms. The same
    child without either is reported too (in-child perf_counter and whole-process wall).
(b) The child's activation in a bare interpreter (``python -c``), split into the standard-library
    modules the framework pulls in, its third-party dependencies, the framework's own modules and
    ``activate()``; plus whole-process wall time (information).
(c) Parent: ``import dsv41_flags; activate()`` in a bare interpreter resolving from settings (repo
    ``settings.toml``, no snapshot). Floor: a bare interpreter importing dynaconf, structlog and
    wrapt (dynaconf pulls jinja2). Goal: floor + 30 ms.
(d) CLI: ``dsv41-flags status --json`` (wall). Floor: a bare interpreter importing dynaconf,
    structlog, wrapt and typer (wall). Goal: floor + 60 ms.
Diagnostics: where ``activate()`` spends its time (the framework's functions timed by wrapping
them in the child) and ``-X importtime`` self time per top-level package.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BENCH, CLI, FEATURES_DIR, PY, SETTINGS, TIMED_SRC, clean_env, command,  # noqa: E402
                     main, med, python, row, spread)
from _activation_child import ENGINE_BASE  # noqa: E402

#: the engine base as one import statement, for the diagnostics' child scripts
BASE_IMPORT = "import " + ", ".join(ENGINE_BASE)

ARMED = {"DSV41_FOLDED_FENCE": "1", "DSV41_AUTOTUNE_KEEP": "1"}
LAUNCH_ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "/models/x", "--tp", "4",
               "--port", "30000"]
GOAL_MS = 10.0          # (b), information only
GOAL_CHILD_MS = 5.0     # (a) above its floor
GOAL_PARENT_MS = 30.0   # (c) above its floor
GOAL_CLI_MS = 60.0      # (d) above its floor


def make_snapshot() -> str:
    """The launch's snapshot, as the launching process hands it to its children."""
    from dsv41_flags.assembly import build

    rt = build([SETTINGS], None, environ=clean_env(**ARMED), argv=LAUNCH_ARGV,
               features_dir=FEATURES_DIR, use_snapshot=False, configure_logging=False)
    return rt.snapshot()


# ------------------------------------------------------------------------------ (a) spawn
def spawn(env: dict, reps: int) -> tuple[list[dict], dict]:
    code = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); import _activation_child as c; "
            f"c.spawn_parent({reps})")
    _, data = python(code, env)
    on, floor, off = data["on"], data["floor"], data["off"]
    ms = lambda runs, k: med([r[k] for r in runs]) * 1e3  # noqa: E731
    assert all(r["from_snapshot"] for r in on), "children did not activate from the snapshot"
    measured, floor_ms = ms(on, "measured"), ms(floor, "measured")
    wall_on, wall_floor, wall_off = ms(on, "wall"), ms(floor, "wall"), ms(off, "wall")
    extra = sorted(set(on[0]["new_modules"]) - set(floor[0]["new_modules"]))
    foreign = [m for m in extra if not m.startswith("dsv41_flags")]
    rows = [
        row("1a", "child (scheduler base): import dsv41_flags + activate() from the snapshot",
            measured, "ms", "same child importing structlog + wrapt (floor)", floor_ms,
            goal=f"<= floor + {GOAL_CHILD_MS:g} ms", met=measured - floor_ms <= GOAL_CHILD_MS,
            n=len(on),
            note=f"{_lowest([r['measured'] for r in on], [r['measured'] for r in floor])}; "
                 f"import {ms(on, 'import'):.1f} ms + activate() {ms(on, 'activate'):.1f} ms; "
                 f"engine base imports before it {ms(on, 'base'):.1f} ms (not counted); ranges "
                 f"{spread([r['measured'] for r in on], 1e3)} vs "
                 f"{spread([r['measured'] for r in floor], 1e3)} ms; modules beyond the floor's: "
                 f"{len(extra)} ({len(foreign)} not the framework's: {', '.join(foreign[:12]) or '-'})"),
        row("1a", "  child: whole-process wall (start..join)", wall_on, "ms",
            "same child importing structlog + wrapt (floor)", wall_floor,
            goal=f"<= floor + {GOAL_CHILD_MS:g} ms (info)", met=wall_on - wall_floor <= GOAL_CHILD_MS,
            n=len(on),
            note=f"ranges {spread([r['wall'] for r in on], 1e3)} vs "
                 f"{spread([r['wall'] for r in floor], 1e3)} ms; includes interpreter teardown"),
        row("1a", "  child: activation vs a child that activates nothing", measured, "ms",
            "same child, nothing imported", ms(off, "measured"), n=len(on),
            note=f"whole-process wall {wall_on:.1f} vs {wall_off:.1f} ms"),
    ]
    details = {"armed": on[0]["armed"], "states": on[0]["states"],
               "base_ms": ms(on, "base"), "import_ms": ms(on, "import"),
               "activate_ms": ms(on, "activate"), "floor_ms": floor_ms,
               "modules_beyond_floor": extra}
    return rows, details


# ----------------------------------------------------------------------- (c) parent, (d) CLI
PARENT_ON = """
import sys, os, time
sys.stderr = open(os.devnull, "w")
t0 = time.perf_counter()
import dsv41_flags
rt = dsv41_flags.activate()
t1 = time.perf_counter()
import json
print(json.dumps({"t": t1 - t0, "from_snapshot": rt.from_snapshot, "armed": [f.name for f in rt.armed()]}))
"""
PARENT_FLOOR = """
import sys, os, time
sys.stderr = open(os.devnull, "w")
t0 = time.perf_counter()
import dynaconf, structlog, wrapt
t1 = time.perf_counter()
import json
print(json.dumps({"t": t1 - t0}))
"""
CLI_FLOOR = "import dynaconf, structlog, wrapt, typer"
#: where the parent's time above its floor goes: the framework's functions wrapped with timers
PARENT_PARTS = """
import sys, os, time, json
sys.stderr = open(os.devnull, "w")
import dynaconf, structlog, wrapt
t0 = time.perf_counter()
import dsv41_flags
import dsv41_flags.runtime as R, dsv41_flags.discovery as D, dsv41_flags.settings as S
import dsv41_flags.fingerprint as F
t1 = time.perf_counter()
spent = {}
""" + TIMED_SRC + """
timed(S, "find_settings_files", "activate: settings search (+ TOML check)")
timed(S, "load", "activate: Dynaconf load (+ profiles scan)")
timed(S, "reserved_settings", "activate: reserved settings")
timed(S, "resolve", "activate: resolution with provenance")
timed(D, "discover", "activate: discovery")
timed(D, "installed_entry_points", "  discovery: entry-point scan")
timed(D, "_import_file", "  discovery: feature modules (features/*.py)")
timed(F, "compute", "activate: fingerprint")
timed(R.Runtime, "arm", "activate: arm (post-import hooks)")
t2 = time.perf_counter()
dsv41_flags.activate()
spent["activate() total"] = time.perf_counter() - t2
spent["import dsv41_flags (framework modules)"] = t1 - t0
spent["packaging imported"] = float(any(m.startswith("packaging") for m in sys.modules))
print(json.dumps(spent))
"""


def _lowest(on: list[float], floor: list[float]) -> str:
    """The lowest of each side (seconds in, text in ms): what the code costs when nothing else
    interferes (the ``timeit`` rule); the goal row keeps the median, this says how much of the
    margin is the VM's jitter."""
    return f"lowest {min(on) * 1e3:.1f} vs {min(floor) * 1e3:.1f} ms (+{(min(on) - min(floor)) * 1e3:.1f})"


def alternate(a, b, reps: int) -> tuple[list, list]:
    """``reps`` results of ``a()`` and of ``b()`` in ABBA order after one unmeasured warm-up each."""
    a(), b()
    out_a, out_b = [], []
    for i in range(reps):
        for first in ((True, False) if i % 2 == 0 else (False, True)):
            (out_a if first else out_b).append(a() if first else b())
    return out_a, out_b


def parent(reps: int) -> tuple[list[dict], dict]:
    env = clean_env(DSV41_SETTINGS=str(SETTINGS), **ARMED)
    on, floor = alternate(lambda: python(PARENT_ON, env), lambda: python(PARENT_FLOOR, env), reps)
    assert not any(p["from_snapshot"] for _, p in on), "the parent must resolve from settings"
    t_on, t_floor = med([p["t"] for _, p in on]) * 1e3, med([p["t"] for _, p in floor]) * 1e3
    w_on, w_floor = med([w for w, _ in on]) * 1e3, med([w for w, _ in floor]) * 1e3
    rows = [
        row("1c", "parent (bare python -c): import dsv41_flags + activate() resolving from settings",
            t_on, "ms", "bare interpreter importing dynaconf, structlog, wrapt (floor)", t_floor,
            goal=f"<= floor + {GOAL_PARENT_MS:g} ms", met=t_on - t_floor <= GOAL_PARENT_MS, n=reps,
            note=f"in process; {_lowest([p['t'] for _, p in on], [p['t'] for _, p in floor])}; "
                 f"ranges {spread([p['t'] for _, p in on], 1e3)} vs "
                 f"{spread([p['t'] for _, p in floor], 1e3)} ms; armed {on[0][1]['armed']}"),
        row("1c", "  parent: whole-process wall", w_on, "ms", "floor, whole-process wall", w_floor,
            goal=f"<= floor + {GOAL_PARENT_MS:g} ms (info)", met=w_on - w_floor <= GOAL_PARENT_MS,
            n=reps, note=f"ranges {spread([w for w, _ in on], 1e3)} vs {spread([w for w, _ in floor], 1e3)} ms"),
    ]
    parts = [python(PARENT_PARTS, env)[1] for _ in range(max(3, reps // 2))]
    breakdown = {k: round(med([p.get(k, 0.0) for p in parts]) * (1 if k == "packaging imported" else 1e3), 2)
                 for k in parts[0]}
    return rows, {"parent_ms": t_on, "floor_ms": t_floor, **breakdown}


def cli(reps: int) -> tuple[list[dict], dict]:
    env = clean_env(**ARMED)
    cmd = [CLI, "status", "--json", "--settings", str(SETTINGS)]
    on, floor = alternate(lambda: command(cmd, env, ok_codes=(0, 1))[0],
                          lambda: command([PY, "-c", CLI_FLOOR], env)[0], reps)
    w_on, w_floor = med(on) * 1e3, med(floor) * 1e3
    rows = [row("1d", "CLI: dsv41-flags status --json (wall)", w_on, "ms",
                "bare interpreter importing dynaconf, structlog, wrapt, typer (floor, wall)", w_floor,
                goal=f"<= floor + {GOAL_CLI_MS:g} ms", met=w_on - w_floor <= GOAL_CLI_MS, n=reps,
                note=f"{_lowest(on, floor)}; ranges {spread(on, 1e3)} vs {spread(floor, 1e3)} ms")]
    return rows, {"cli_ms": w_on, "floor_ms": w_floor}


# ------------------------------------------------------------------------------- (b) bare
PROBE = """
import sys, os
sys.stderr = open(os.devnull, "w")
before = set(sys.modules)
import dsv41_flags
dsv41_flags.activate()
import json
new = [m for m in sys.modules if m not in before and not m.startswith(("dsv41_flags", "__"))]
std = [m for m in new if m.split(".")[0] in sys.stdlib_module_names]
third = [m for m in new if m.split(".")[0] not in sys.stdlib_module_names]
print(json.dumps({"std": std, "third": third}))
"""

SPLIT = """
import sys, os, time, importlib
sys.stderr = open(os.devnull, "w")
STD, THIRD = {std!r}, {third!r}
def load(names):
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            pass
t0 = time.perf_counter()
load(STD)
t1 = time.perf_counter()
load(THIRD)
t2 = time.perf_counter()
import dsv41_flags
t3 = time.perf_counter()
rt = dsv41_flags.activate()
t4 = time.perf_counter()
import json
print(json.dumps({{"std": t1 - t0, "third": t2 - t1, "own_import": t3 - t2, "activate": t4 - t3,
                  "total": t4 - t0, "from_snapshot": rt.from_snapshot}}))
"""

WALL_ON = ("import sys, os; sys.stderr = open(os.devnull, 'w'); import dsv41_flags; "
           "dsv41_flags.activate()")
WALL_OFF = "import sys, os; sys.stderr = open(os.devnull, 'w')"


def bare(env: dict, reps: int) -> tuple[list[dict], dict]:
    _, mods = python(PROBE, env)
    code = SPLIT.format(std=mods["std"], third=mods["third"])
    python(code, env)  # warm-up
    splits = [python(code, env)[1] for _ in range(reps)]
    assert all(s["from_snapshot"] for s in splits)
    walls_on, walls_off = [], []
    python(WALL_ON, env), python(WALL_OFF, env)
    for i in range(reps):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            (walls_on if on else walls_off).append(python(WALL_ON if on else WALL_OFF, env)[0])
    ms = lambda k: med([s[k] for s in splits]) * 1e3  # noqa: E731
    tops = sorted({m.split(".")[0] for m in mods["third"]})
    std_tops = list(dict.fromkeys(m.split(".")[0].lstrip("_") for m in mods["std"]))
    total = ms("total")
    rows = [
        row("1b", "bare python -c: import dsv41_flags + activate() (in process)", total, "ms",
            "same interpreter, nothing activated", 0.0, goal=f"<= {GOAL_MS:g} ms added (info)",
            met=total <= GOAL_MS, n=reps,
            note=f"stdlib {ms('std'):.1f} + deps {ms('third'):.1f} + framework modules "
                 f"{ms('own_import'):.1f} + activate() {ms('activate'):.1f} ms"),
        row("1b", "  of which: stdlib modules a bare interpreter lacks", ms("std"), "ms", n=reps,
            note=f"{len(mods['std'])} modules: {', '.join(std_tops[:12])}, ..."),
        row("1b", "  of which: third-party dependency imports", ms("third"), "ms", n=reps,
            note=f"{len(mods['third'])} modules from {', '.join(tops)}"),
        row("1b", "  of which: framework's own modules (import dsv41_flags)", ms("own_import"), "ms",
            n=reps),
        row("1b", "  of which: framework's own activate() (snapshot)", ms("activate"), "ms", n=reps),
        row("1b", "bare python -c: whole-process wall", med(walls_on) * 1e3, "ms",
            "python -c without the framework", med(walls_off) * 1e3,
            goal=f"<= {GOAL_MS:g} ms added (info)",
            met=(med(walls_on) - med(walls_off)) * 1e3 <= GOAL_MS, n=reps,
            note=f"ranges {spread(walls_on, 1e3)} vs {spread(walls_off, 1e3)} ms"),
    ]
    details = {"stdlib_modules": mods["std"], "third_party_packages": tops,
               "third_party_modules": mods["third"]}
    return rows, details


# ---------------------------------------------------------------------------- diagnostics
BREAKDOWN = """
import sys, os, time, json
sys.stderr = open(os.devnull, "w")
""" + BASE_IMPORT + """
t0 = time.perf_counter()
import dsv41_flags
import dsv41_flags.runtime as R, dsv41_flags.discovery as D
t1 = time.perf_counter()
spent = {}  # in the order wrapped below (0.0 when a part did not run)
""" + TIMED_SRC + """
timed(R, "read_snapshot", "snapshot read (decode, verify, materialize)")
timed(R, "configure", "structlog configure")
timed(D, "discover", "  snapshot read: discover (the launch's feature files)")
timed(D, "installed_entry_points", "  discover: entry-point scan (importlib.metadata)")
timed(D, "_import_file", "  discover: feature modules (features/*.py)")
timed(R.Runtime, "report", "flags.resolved payload (report)")
timed(R.Runtime, "arm", "arm (post-import hooks)")
t2 = time.perf_counter()
dsv41_flags.activate()
t3 = time.perf_counter()
spent["activate() total"] = t3 - t2
spent["import dsv41_flags (after the engine base)"] = t1 - t0
print(json.dumps(spent))
"""

IMPORTTIME = """
import sys, os
sys.stderr = open(os.devnull, "w")
""" + BASE_IMPORT + """
os.write(2, b"--- dsv41_flags ---\\n")
import dsv41_flags
"""

ALONE_CODE = """
import sys, os, time, json, importlib
""" + BASE_IMPORT + """
t0 = time.perf_counter()
for name in {names!r}:
    importlib.import_module(name)
print(json.dumps({{"t": time.perf_counter() - t0}}))
"""

WHATIF = """
import sys, os, time, json
sys.stderr = open(os.devnull, "w")
""" + BASE_IMPORT + """
for name in {hide!r}:
    sys.modules[name] = None
t0 = time.perf_counter()
import dsv41_flags
dsv41_flags.activate()
print(json.dumps({{"t": time.perf_counter() - t0}}))
"""

#: the framework's direct dependencies (pyproject), imported alone in the child context
DIRECT_DEPS = ("structlog", "wrapt", "packaging", "dynaconf")


def importtime_by_package(env: dict) -> dict:
    """``-X importtime`` self time of what ``import dsv41_flags`` imports after the engine base,
    summed per top-level package (stdlib packages named ``stdlib:<name>``); median of 3 runs.
    importtime's own overhead inflates the absolute figures a little."""
    import subprocess

    per_pkg: dict[str, list[float]] = {}
    for _ in range(3):
        proc = subprocess.run([PY, "-X", "importtime", "-c", IMPORTTIME], env=env,
                              capture_output=True, text=True, check=True)
        sums: dict[str, float] = {}
        for line in proc.stderr.split("--- dsv41_flags ---", 1)[1].splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            parts = line[len("import time:"):].split("|")
            try:
                self_us = int(parts[0])
            except ValueError:
                continue
            top = parts[2].strip().split(".")[0]
            # "org" is pickle's probe for Jython's org.python.core (a failed stdlib import)
            top = "pickle" if top == "org" else top
            key = f"stdlib:{top}" if top in sys.stdlib_module_names else top
            sums[key] = sums.get(key, 0.0) + self_us / 1e3
        for k, v in sums.items():
            per_pkg.setdefault(k, []).append(v)
    return {k: round(med(v), 1) for k, v in sorted(per_pkg.items(), key=lambda kv: -med(kv[1]))
            if med(v) >= 0.5}


def diagnostics(env: dict, reps: int, third_party: list[str]) -> dict:
    runs = [python(BREAKDOWN, env)[1] for _ in range(reps)]
    activate = {k: round(med([r.get(k, 0.0) for r in runs]) * 1e3, 2) for k in runs[0]}
    inner = sum(v for k, v in activate.items() if not k.startswith(("  ", "activate()", "import ")))
    activate["rest: Runtime(), rendering flags.resolved, role"] = round(
        activate["activate() total"] - inner, 2)
    # each direct dependency alone after the engine base, with what the framework imports of it
    alone = {}
    for dep in DIRECT_DEPS:
        names = [m for m in third_party if m.split(".")[0] == dep] or [dep]
        label = dep + (" (launcher only: children do not import it)" if dep == "dynaconf" else "")
        if dep == "structlog":
            label += " (imports rich, pygments, attrs when installed)"
        code = ALONE_CODE.format(names=names)
        alone[label] = round(med([python(code, env)[1]["t"] for _ in range(3)]) * 1e3, 1)
    whatif = {label: round(med([python(WHATIF.format(hide=hide), env)[1]["t"]
                                for _ in range(reps)]) * 1e3, 1)
              for hide, label in (((), "as installed"),
                                  (("rich",), "rich hidden from structlog (sys.modules['rich'] = None)"))}
    return {"activate_breakdown_ms": activate,
            "importtime_self_ms_by_package": importtime_by_package(env),
            "direct_dependency_alone_after_engine_base_ms": alone,
            "what_if_child_import_and_activate_ms": whatif}


def run(quick: bool = False) -> dict:
    reps = 4 if quick else 12
    env = clean_env(DSV41_SNAPSHOT=make_snapshot(), **ARMED)
    rows_a, det_a = spawn(env, 2 * reps)  # cheap (a child is ~0.2 s): more runs, a steadier median
    rows_b, det_b = bare(env, reps)
    rows_c, det_c = parent(reps)
    rows_d, det_d = cli(reps)
    diag = diagnostics(env, 3 if quick else 6, det_b["third_party_modules"])
    return {"rows": rows_a + rows_b + rows_c + rows_d,
            "details": {"spawn": det_a, "bare": det_b, "parent": det_c, "cli": det_d, **diag}}


if __name__ == "__main__":
    main(run)
