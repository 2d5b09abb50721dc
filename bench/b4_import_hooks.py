"""Benchmark 4: what the framework costs the engine's imports, and why (garbage collection).

Importing the real scheduler module (``sglang.srt.managers.scheduler``, about 6,500 modules, which
imports ``flashinfer_autotune``: autotune_keep installs during the import; folded_fence's target is
not imported and stays armed) in a fresh interpreter per run (``PYTHONHASHSEED=0``, so the
allocation pattern, and with it the collection schedule, repeats run to run):
  - ``before``: ``DSV41_FOLDED_FENCE=1 DSV41_AUTOTUNE_KEEP=1``, ``import dsv41_flags;
    activate()`` (a launching process: resolution from settings.toml), then the import;
  - ``none``: the import alone;
  - ``unremedied``: as ``before``, with the framework's reset of the collection schedule
    (``activation._keep_collection_schedule``: one full collection at the end of the first
    activation in a process that had none) replaced by nothing: what the remedy is worth;
  - ``unremedied_snapshot``: as ``unremedied``, activating from ``DSV41_SNAPSHOT`` (a child:
    no Dynaconf, no TOML, half the objects): whether fewer imports alone would keep the
    engine's collections (they do not: the schedule, not the heap, moves them);
  - ``after_snapshot``: the import first, then ``gc.collect()``, then ``import dsv41_flags;
    activate()`` from ``DSV41_SNAPSHOT`` as an engine child does (its install included);
  - ``after``: the same, resolving from settings as a launcher does.
Timed inside the process: wall (``perf_counter``) and CPU (``process_time``: a machine shared with
other jobs delays a process, CPU time stays with the work); every garbage collection through
``gc.callbacks`` (time, and how many were full, generation 2, ones).

Rows:
  - the import with the framework first against the import alone (wall; a few percent of
    run-to-run spread, reported as within noise when it is);
  - the child's marginal cost as a SHARE of the scheduler import, both measured in the same
    process (``after_snapshot``: the framework's CPU time + the post-import finder's cost for each
    module imported after arming, over the import's CPU time). Goal: at most 0.5%. The launcher's
    share (``after``) is reported beside it;
  - full collections during the import: framework first against none (a stable count, goal: no
    more than without), and with the remedy.
A probe process (no engine import) counts the garbage-collector-tracked objects ``import
dsv41_flags; activate()`` adds (by type and by top-level package of the modules it imports) and
the collections the framework's import itself runs.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SETTINGS, clean_env, main, med, python, row, spread  # noqa: E402

TARGET = "sglang.srt.managers.scheduler"
SHARE_GOAL_PCT = 0.5

CODE = """
import sys, os, time, json, gc
mode = {mode!r}   # before | none | unremedied | unremedied_snapshot | after | after_snapshot
gc_spent = [0.0, 0.0, 0, 0]   # seconds, start of the running collection, full collections, all
def on_gc(phase, info):
    if phase == "start":
        gc_spent[1] = time.perf_counter()
    else:
        gc_spent[0] += time.perf_counter() - gc_spent[1]
        gc_spent[2] += info["generation"] == 2
        gc_spent[3] += 1
gc.callbacks.append(on_gc)
t0, c0 = time.perf_counter(), time.process_time()
collect_s = None
def activate():
    g = gc_spent[0]
    s, cs = time.perf_counter(), time.process_time()
    import dsv41_flags
    import dsv41_flags.activation as activation
    m = time.perf_counter()
    keep = activation._keep_collection_schedule
    if mode.startswith("unremedied"):  # the framework without its reset of the collection schedule
        activation._keep_collection_schedule = lambda: None
    else:                       # timed: the one full collection it may run
        def timed_keep():
            global collect_s
            k = time.process_time()
            keep()
            collect_s = time.process_time() - k
        activation._keep_collection_schedule = timed_keep
    rt = dsv41_flags.activate()
    return rt, m - s, time.perf_counter() - m, time.process_time() - cs, gc_spent[0] - g
if mode in ("before", "unremedied", "unremedied_snapshot"):
    rt, t_import, t_activate, cpu_fw, gc_fw = activate()
counts_fw = list(gc.get_count())   # what the engine's import starts from (gen 0, 1, 2 counters)
full0, gc0 = gc_spent[2], gc_spent[0]
n0 = len(sys.modules)
ti, ci = time.perf_counter(), time.process_time()
import {target}
ti, ci = time.perf_counter() - ti, time.process_time() - ci
n1 = len(sys.modules)
full_import, gc_import = gc_spent[2] - full0, gc_spent[0] - gc0
if mode.startswith("after"):
    # the engine's heap is large: a full collection that happens to trip during the framework's
    # allocations would cost ~0.4 s and belongs to the engine's heap, not to the framework
    gc.collect()
    rt, t_import, t_activate, cpu_fw, gc_fw = activate()
t1, c1 = time.perf_counter(), time.process_time()
out = {{"total": t1 - t0, "cpu": c1 - c0, "import": ti, "import_cpu": ci, "modules": n1,
        "gc": gc_import, "full_gc": full_import, "objects": len(gc.get_objects()),
        "collect": collect_s, "counts_before_import": counts_fw}}
if mode != "none":
    states = rt.audit()
    out.update(states={{s.name: s.state for s in states}}, import_fw=t_import, activate=t_activate,
               cpu_fw=cpu_fw, install_ms=sum(s.duration_ms or 0.0 for s in states), gc_fw=gc_fw)
if mode == "before":  # cost of the post-import hook finder for each module imported after arming
    import timeit
    finder = next(f for f in sys.meta_path if type(f).__module__.startswith("wrapt"))
    n = 20000
    per = timeit.timeit(lambda: finder.find_spec("bench.not.hooked"), number=n) / n
    out["finder_ms"] = per * (n1 - n0) * 1e3
    out["imported_after_arming"] = n1 - n0
print(json.dumps(out))
"""

#: what ``import dsv41_flags; activate()`` adds to the collector's view (no engine import)
OBJECTS = """
import collections, gc, json, sys
def census():
    return collections.Counter(type(o).__name__ for o in gc.get_objects())
stats0, mods0, c0 = [s["collections"] for s in gc.get_stats()], set(sys.modules), census()
import dsv41_flags
stats1, mods1, c1 = [s["collections"] for s in gc.get_stats()], set(sys.modules), census()
dsv41_flags.activate()
stats2, mods2, c2 = [s["collections"] for s in gc.get_stats()], set(sys.modules), census()
tops = lambda ms: dict(collections.Counter(m.split(".")[0] for m in ms).most_common(12))
print(json.dumps({{
    "tracked_start": sum(c0.values()), "tracked_after_import": sum(c1.values()),
    "tracked_after_activate": sum(c2.values()),
    "by_type": dict((c2 - c0).most_common(10)),
    "modules_by_import": len(mods1 - mods0), "modules_by_activate": len(mods2 - mods1),
    "packages_by_import": tops(mods1 - mods0), "packages_by_activate": tops(mods2 - mods1),
    "collections_by_import": [b - a for a, b in zip(stats0, stats1)],
    "collections_by_activate": [b - a for a, b in zip(stats1, stats2)],
    "generation_counts_after": list(gc.get_count())}}))
"""


def run(quick: bool = False) -> dict:
    reps = 1 if quick else 2
    env_on = clean_env(DSV41_FOLDED_FENCE="1", DSV41_AUTOTUNE_KEEP="1", DSV41_SETTINGS=str(SETTINGS),
                       DSV41_LOG_FORMAT="json", PYTHONHASHSEED="0")
    env_snap = dict(env_on, DSV41_SNAPSHOT=make_snapshot(env_on))
    env_off = clean_env(PYTHONHASHSEED="0")
    modes = ("before", "none", "unremedied", "after_snapshot", "unremedied_snapshot") + (
        () if quick else ("after",))
    env = {"before": env_on, "none": env_off, "unremedied": env_on, "after": env_on,
           "after_snapshot": env_snap, "unremedied_snapshot": env_snap}
    counts = {"before": reps, "none": reps, "unremedied": 1, "after_snapshot": reps, "after": 1,
              "unremedied_snapshot": 1}
    code = {m: CODE.format(mode=m, target=TARGET) for m in modes}
    _, objects = python(OBJECTS.format(), env_on)
    python(code["none"], env_off, timeout=900)  # warm-up: page cache
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for i in range(reps):
        order = [m for m in modes if i < counts[m]]
        for m in (order if i % 2 == 0 else order[::-1]):
            wall, data = python(code[m], env[m], timeout=900)
            data["wall"] = wall
            runs[m].append(data)
    on, off, bare, snap = runs["before"], runs["none"], runs["unremedied"], runs["after_snapshot"]
    for rs in (on, bare, snap) + ((runs["unremedied_snapshot"],) if "unremedied_snapshot" in runs else ()):
        assert rs[0]["states"].get("autotune_keep") == "installed", rs[0]["states"]
    ms = lambda rs, k: med([r[k] for r in rs]) * 1e3  # noqa: E731
    t_on, t_off = ms(on, "import") + ms(on, "import_fw") + ms(on, "activate"), ms(off, "import")
    pct = lambda x: x / t_off * 100  # noqa: E731
    added = pct(t_on - t_off)
    noise = max(max(r["import"] for r in rs) / min(r["import"] for r in rs) - 1 for rs in (on, off)) * 100
    within = reps < 2 or abs(added) < noise
    finder = med([r["finder_ms"] for r in on])

    def share(rs):  # the framework's CPU time over the same process's import CPU time, per run
        return med([(r["cpu_fw"] * 1e3 + finder) / (r["import_cpu"] * 1e3) * 100 for r in rs])

    full = lambda rs: med([r["full_gc"] for r in rs])  # noqa: E731
    gc_note = lambda rs: (f"{full(rs):g} full of {med([r['gc'] for r in rs]) * 1e3:.0f} ms "  # noqa: E731
                          f"collecting, import CPU {ms(rs, 'import_cpu'):.0f} ms")
    rows = [
        row("4", f"import {TARGET}, 2 features armed before it (in process)", t_on, "ms",
            "same import, no framework", t_off,
            goal="info (wall; within noise: see the share rows)" if within else "info (wall)",
            n=reps, note=f"added {added:+.2f}%, run-to-run spread up to {noise:.1f}% (ranges "
                         f"{spread([r['import'] for r in on], 1e3, 0)} vs "
                         f"{spread([r['import'] for r in off], 1e3, 0)} ms); CPU of the import "
                         f"{ms(on, 'import_cpu'):.0f} vs {ms(off, 'import_cpu'):.0f} ms; garbage "
                         f"collection {ms(on, 'gc'):.0f} vs {ms(off, 'gc'):.0f} ms"),
        row("4", "  child's marginal cost (from snapshot), share of the scheduler import", share(snap),
            "%", f"the same process's import CPU time ({ms(snap, 'import_cpu'):.0f} ms)", None,
            goal=f"share <= {SHARE_GOAL_PCT:g}%", met=share(snap) <= SHARE_GOAL_PCT, n=len(snap),
            note=f"CPU: import dsv41_flags + activate() from DSV41_SNAPSHOT with install "
                 f"{ms(snap, 'cpu_fw'):.1f} ms (wall {ms(snap, 'import_fw') + ms(snap, 'activate'):.1f}"
                 f" ms) + wrapt finder miss x {on[0]['imported_after_arming']} imports "
                 f"{finder:.1f} ms, over the import's {ms(snap, 'import_cpu'):.0f} ms CPU; per run "
                 + ", ".join(f"{(r['cpu_fw'] * 1e3 + finder) / (r['import_cpu'] * 1e3) * 100:.2f}%"
                             for r in snap)),
    ]
    if "after" in runs:
        after = runs["after"]
        rows.append(row("4", "  launcher's marginal cost (resolving), share of the scheduler import",
                        share(after), "%", f"the same process's import CPU time "
                        f"({ms(after, 'import_cpu'):.0f} ms)", None, n=len(after),
                        note=f"CPU: import dsv41_flags + activate() with resolution and install "
                             f"{ms(after, 'cpu_fw'):.1f} ms + finder {finder:.1f} ms (info: the "
                             f"goal is the child's)"))
    rows += [
        row("4", "  full (gen 2) collections during the import: framework first", full(on),
            "collections", "same import, no framework", full(off), goal="no more than without",
            met=full(on) <= full(off), n=len(on),
            note=f"framework: {gc_note(on)}; without: {gc_note(off)}; per run "
                 f"{[r['full_gc'] for r in on]} vs {[r['full_gc'] for r in off]}; the framework's "
                 f"one full collection at the end of activate() (schedule reset): "
                 f"{med([r['collect'] or 0.0 for r in on]) * 1e3:.1f} ms CPU over "
                 f"{objects['tracked_after_activate']} tracked objects"),
        row("4", "  full collections during the import: framework first, schedule reset disabled",
            full(bare), "collections", "same import, no framework", full(off), n=len(bare),
            note=f"what the reset is worth: {gc_note(bare)}; the import starts from the "
                 f"collector's counters (gen 0, 1, 2) {bare[0]['counts_before_import']} against "
                 f"{off[0]['counts_before_import']} without the framework"),
    ]
    if "unremedied_snapshot" in runs:
        us = runs["unremedied_snapshot"]
        rows.append(row("4", "  full collections: framework first from the snapshot (a child's "
                        "imports: no Dynaconf), reset disabled", full(us), "collections",
                        "same import, no framework", full(off), n=len(us),
                        note=f"fewer imports alone: {gc_note(us)}; counters at the import "
                             f"{us[0]['counts_before_import']}; objects at the end "
                             f"{us[0]['objects']} vs {off[0]['objects']} without"))
    details = {"states_armed_before": on[0]["states"], "modules_after_import": on[0]["modules"],
               "import_ms": {m: [round(r["import"] * 1e3) for r in rs] for m, rs in runs.items()},
               "import_cpu_ms": {m: [round(r["import_cpu"] * 1e3) for r in rs] for m, rs in runs.items()},
               "gc_during_import_ms": {m: [round(r["gc"] * 1e3) for r in rs] for m, rs in runs.items()},
               "full_gc_during_import": {m: [r["full_gc"] for r in rs] for m, rs in runs.items()},
               "gc_tracked_objects_at_end": {m: rs[0]["objects"] for m, rs in runs.items()},
               "framework_cpu_ms": {m: [round(r["cpu_fw"] * 1e3, 1) for r in rs]
                                    for m, rs in runs.items() if m != "none"},
               "objects_added_by_import_and_activate": {
                   k: objects[k] for k in ("tracked_start", "tracked_after_import",
                                           "tracked_after_activate", "modules_by_import",
                                           "modules_by_activate")},
               "collections_run_by_framework (gen 0, 1, 2)": {
                   "import dsv41_flags": objects["collections_by_import"],
                   "activate()": objects["collections_by_activate"],
                   "generation counts after": objects["generation_counts_after"]},
               "tracked_objects_added_by_type": objects["by_type"],
               "modules_imported_by_package (import)": objects["packages_by_import"],
               "modules_imported_by_package (activate)": objects["packages_by_activate"]}
    return {"rows": rows, "details": details}


def make_snapshot(environ: dict) -> str:
    """The snapshot a launching process hands to the engine's children, built by this tree's
    framework in a fresh interpreter (``environ``: its environment)."""
    _, out = python("import json, dsv41_flags\nrt = dsv41_flags.activate()\n"
                    "import os\nprint(json.dumps({'snapshot': os.environ['DSV41_SNAPSHOT']}))",
                    dict(environ, DSV41_LOG_FORMAT="json"))
    return out["snapshot"]


if __name__ == "__main__":
    main(run)
