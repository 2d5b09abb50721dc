"""Benchmark 3: the cost of calling a patched method.

A trivial method (``def meth(self, x): return x``) called a million times (``timeit``, GC off,
the thread's CPU time):
  - unpatched;
  - patched through the framework's ledger (``dsv41_flags.patch.Ledger().patch("f", Cls, "meth",
    make)``) with a plain pass-through closure shaped like features/folded_fence.py's;
  - patched as the seeds do (a plain closure assigned to the class directly);
  - wrapped by sglang's own ``HookRegistry`` as an AROUND hook (register + ``apply_hooks()``);
  - a live feature patched through ``InstallContext.patch`` with its gate: bypassed
    (switched off: one attribute read, then the original) and switched on (bypass wrapper, then
    the same pass-through closure);
  - a live feature with TWO patches (``meth`` and ``other``): each outermost call also pins the
    state it read (a ContextVar set and reset), bypassed and switched on.
Each variant has its own class compiled from the same source. Rounds rotate the order of the
variants; every time ratio is the median of per-round ratios (paired, robust to drift).
The comparisons are also counted in instructions (callgrind, one child, ``instructions()``):
repeatable where time is not on a shared machine; the goals are judged on them when valgrind is
installed, else on time with a 3% noise margin.
Goals: the framework's wrapper, a bypassed live patch and a live feature with two patches (off
and on) are each no slower than the seed's closure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import timeit
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, main, med, row, spread  # noqa: E402

CALLS = 1_000_000
MODULE = "dsv41_bench_target"
CLASS_SOURCE = '''
class {name}:
    def meth(self, x):
        """A trivial method."""
        return x

    def other(self, x):
        """A second method, for a live feature with two patches."""
        return x
'''
TOLERANCE = 0.03  # timing noise of a shared 2-core VM at this granularity
INSTR_CALLS, INSTR_CALLS_QUICK = 20_000, 5_000   # calls per variant counted by callgrind
INSTR_TOLERANCE = 0.005  # instruction counts repeat to about 0.1%
UNPATCHED = "unpatched"
FRAMEWORK = "framework (Ledger.patch, pass-through closure)"
SEED = "seed (closure assigned directly)"
HOOKED = "sglang HookRegistry AROUND hook"
LIVE_OFF = "live feature bypassed (gate off)"
LIVE_ON = "live feature switched on (gate on)"
LIVE2_OFF = "live feature with two patches, bypassed (gate off)"
LIVE2_ON = "live feature with two patches, switched on (gate on)"


def make_module() -> types.ModuleType:
    """A module with four identical classes, importable by name (HookRegistry resolves names)."""
    module = types.ModuleType(MODULE)
    for name in ("Unpatched", "Framework", "Seed", "Hooked", "LiveOff", "LiveOn", "Live2Off",
                 "Live2On"):
        exec(CLASS_SOURCE.format(name=name), module.__dict__)
    sys.modules[MODULE] = module
    return module


def make(original):  # as features/folded_fence.py: closure, *args/**kwargs, metadata copied
    def meth(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    meth.__wrapped__ = original
    meth.__doc__ = original.__doc__
    meth.__qualname__ = original.__qualname__
    return meth


def patch_live(cls, on: bool, patches: tuple[str, ...] = ("meth",)) -> None:
    """A live feature's install: ``ctx.patch`` of each of ``patches`` with the feature's gate
    (``live.gated``). With one patch a call reads the gate only; with two (``gate.alone`` False)
    the outermost call also pins the state it read for the feature's other patch (a ContextVar
    set and reset per call)."""
    import types as _t

    from dsv41_flags.live import Gate
    from dsv41_flags.patch import InstallContext, Ledger

    feature = _t.SimpleNamespace(name=f"live_{on}_{len(patches)}")
    ledger = Ledger()
    gate = Gate(feature.name, on)
    ctx = InstallContext(feature, {}, None, None, ledger, gate)
    for attr in patches:
        ctx.patch(cls, attr, make)
    assert getattr(cls.__dict__["meth"], "__dsv41_gate__").on is on
    assert gate.alone is (len(patches) == 1)
    setattr(patch_live, f"ledger_{feature.name}", ledger)


def patch_framework(cls) -> None:
    from dsv41_flags.patch import Ledger

    ledger = Ledger()
    ledger.patch("f", cls, "meth", make)
    patch_framework.ledger = ledger  # keep the ledger alive, as the runtime does


def patch_seed(cls) -> None:
    orig = cls.meth  # as seeds/folded_result_fence.py

    def meth(self, *a, **kw):
        return orig(self, *a, **kw)

    cls.meth = meth


def patch_hook_registry(cls) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def around(original_fn, *args, **kwargs):
        return original_fn(*args, **kwargs)

    HookRegistry.reset()
    HookRegistry.register(f"{MODULE}.{cls.__name__}.meth", around, HookType.AROUND)
    HookRegistry.apply_hooks()
    assert getattr(cls.meth, "__wrapped__", None) is not None, "AROUND hook was not applied"


def variants(hook_registry: bool = True) -> dict:
    """Name -> an instance whose ``meth`` is patched that way (``hook_registry=False`` leaves out
    sglang's HookRegistry variant, which imports sglang)."""
    module = make_module()
    patch_framework(module.Framework)
    patch_seed(module.Seed)
    if hook_registry:
        patch_hook_registry(module.Hooked)
    patch_live(module.LiveOff, False)
    patch_live(module.LiveOn, True)
    patch_live(module.Live2Off, False, ("meth", "other"))
    patch_live(module.Live2On, True, ("meth", "other"))
    out = {
        UNPATCHED: module.Unpatched(),
        FRAMEWORK: module.Framework(),
        SEED: module.Seed(),
        HOOKED: module.Hooked(),
        LIVE_OFF: module.LiveOff(),
        LIVE_ON: module.LiveOn(),
        LIVE2_OFF: module.Live2Off(),
        LIVE2_ON: module.Live2On(),
    }
    if not hook_registry:
        del out[HOOKED]
    for obj in out.values():
        assert obj.meth(7) == 7
    return out


def run(quick: bool = False) -> dict:
    rounds = 3 if quick else 9
    variants_ = variants()
    names = list(variants_)
    # CPU time of this thread: a machine shared with other jobs delays the process, and the time
    # it waits is not the call's (wall time was 3-10x noisier here)
    timers = {n: timeit.Timer("o.meth(1)", globals={"o": o}, timer=time.thread_time)
              for n, o in variants_.items()}
    for t in timers.values():  # warm-up (specialising interpreter, caches)
        t.timeit(CALLS // 10)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(timeit.Timer.timeit(timers[n], CALLS))
    base = names[0]
    ns = {n: med(v) / CALLS * 1e9 for n, v in times.items()}
    paired = {n: [a / b for a, b in zip(times[n], times[base])] for n in names}
    fw, seed, hook, off, on, off2, on2 = (FRAMEWORK, SEED, HOOKED, LIVE_OFF, LIVE_ON, LIVE2_OFF,
                                          LIVE2_ON)
    rows = [row("3", f"call: {base} ({CALLS:,} calls)", ns[base], "ns/call", base, ns[base],
                ratio=1.0, n=rounds, note=f"CPU time; range {spread(times[base], 1e9 / CALLS)} ns")]
    for n in (fw, seed, hook, off, on, off2, on2):
        rows.append(row("3", f"call: {n}", ns[n], "ns/call", base, ns[base], ratio=med(paired[n]),
                        n=rounds, note=f"CPU time; paired ratios {spread(paired[n], 1, 3)}"))
    try:
        counted = instructions(INSTR_CALLS_QUICK if quick else INSTR_CALLS)
        why_not = ""
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        counted, why_not = {}, f"{type(exc).__name__}: {str(exc)[:200]}"
    # (figure, variant, against, goal?, what it is)
    comparisons = [
        ("framework vs seed closure", fw, seed, True,
         f"HookRegistry/framework (time) "
         f"{med([a / b for a, b in zip(times[hook], times[fw])]):.2f}"),
        ("live bypassed vs seed closure", off, seed, True,
         "one patch: a call reads the gate, nothing pinned"),
        ("live switched on vs framework (non-live)", on, fw, False, "one more call level while on"),
        ("live, two patches, bypassed vs seed closure", off2, seed, True,
         "the outermost call reads the gate and pins it (ContextVar set + reset) for the "
         "feature's other patch"),
        ("live, two patches, switched on vs seed closure", on2, seed, True,
         "bypass wrapper with the pin, then the pass-through closure"),
    ]
    for figure, a, b, has_goal, what in comparisons:
        by_time = [x / y for x, y in zip(times[a], times[b])]
        time_note = f"CPU time x{med(by_time):.3f} (paired {spread(by_time, 1, 3)})"
        if counted:
            ratio = counted[a] / counted[b]
            rows.append(row("3", f"call: {figure}", counted[a], "instr/call", b, counted[b],
                            ratio=ratio, n=1, goal="ratio <= 1.00 (instructions)" if has_goal else "",
                            met=ratio <= 1 + INSTR_TOLERANCE if has_goal else None,
                            note=f"{what}; callgrind, {INSTR_CALLS_QUICK if quick else INSTR_CALLS:,}"
                                 f" calls; {time_note}"))
        else:
            ratio = med(by_time)
            rows.append(row("3", f"call: {figure}", ns[a], "ns/call", b, ns[b], ratio=ratio,
                            n=rounds, goal=f"ratio <= 1.00 (+{TOLERANCE:.0%} noise)" if has_goal else "",
                            met=ratio <= 1 + TOLERANCE if has_goal else None,
                            note=f"{what}; {time_note}; no instruction count ({why_not})"))
    details = {"ns_per_call": {n: round(v, 1) for n, v in ns.items()},
               "instructions_per_call": {n: round(v) for n, v in counted.items()},
               "ratio_to_unpatched": {n: round(med(paired[n]), 3) for n in names}}
    return {"rows": rows, "details": details}


#: the child counted by callgrind: every variant warmed up, then one loop per variant, each loop
#: preceded by ``os.getppid()`` (callgrind dumps its counters there: ``--dump-before=getppid``)
COUNTED = """
import json, os, sys
sys.path.insert(0, {bench!r})
import b3_patched_call as b
vs = b.variants(hook_registry=False)
for o in vs.values():
    for _ in range(2000):
        o.meth(1)
for o in vs.values():
    os.getppid()
    for _ in range({calls}):
        o.meth(1)
os.getppid()
print(json.dumps(list(vs)))
"""


def instructions(calls: int) -> dict[str, float]:
    """Instructions per call of each variant (HookRegistry left out), counted by callgrind in one
    child: a stable counter where wall and CPU time are noisy. A loop's count includes its own
    iteration (the same in every variant), as timeit's figures do. Raises RuntimeError when
    valgrind is missing or the dumps do not match the variants."""
    if not shutil.which("valgrind"):
        raise RuntimeError("valgrind is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(REPO / "src"))
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=getppid",
                               f"--callgrind-out-file={out}", sys.executable, "-c",
                               COUNTED.format(bench=str(Path(__file__).resolve().parent),
                                              calls=calls)],
                              capture_output=True, text=True, timeout=1800, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind child exited {proc.returncode}: {proc.stderr[-2000:]}")
        names = json.loads(proc.stdout.strip().splitlines()[-1])
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        totals = []
        for dump in dumps:
            for line in dump.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    totals.append(int(line.split()[1]))
                    break
        # dump 1: start-up and warm-up; dumps 2..: one loop each
        if len(totals) != len(names) + 1:
            raise RuntimeError(f"{len(totals)} callgrind dumps for {len(names)} variants")
        return {n: t / calls for n, t in zip(names, totals[1:])}


if __name__ == "__main__":
    main(run)
