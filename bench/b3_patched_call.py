"""Benchmark 3: the cost of calling a patched method.

A trivial method (``def meth(self, x): return x``) called a million times (``timeit``, GC off):
  - unpatched;
  - patched through the framework's ledger (``dsv41_flags.patch.Ledger().patch("f", Cls, "meth",
    make)``) with a plain pass-through closure shaped like features/folded_fence.py's;
  - patched as the seeds do (a plain closure assigned to the class directly);
  - wrapped by sglang's own ``HookRegistry`` as an AROUND hook (register + ``apply_hooks()``);
  - a live feature patched through ``InstallContext.patch`` with its gate: bypassed
    (switched off: one attribute read, then the original) and switched on (bypass wrapper, then
    the same pass-through closure).
Each variant has its own class compiled from the same source. Rounds rotate the order of the
variants; every ratio is the median of per-round ratios (paired, robust to drift).
Goals: the framework's wrapper is no slower than the seed's closure; a bypassed live patch is no
slower than the seed's closure either.
"""
from __future__ import annotations

import sys
import timeit
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import main, med, row, spread  # noqa: E402

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


def run(quick: bool = False) -> dict:
    rounds = 3 if quick else 9
    module = make_module()
    patch_framework(module.Framework)
    patch_seed(module.Seed)
    patch_hook_registry(module.Hooked)
    patch_live(module.LiveOff, False)
    patch_live(module.LiveOn, True)
    patch_live(module.Live2Off, False, ("meth", "other"))
    patch_live(module.Live2On, True, ("meth", "other"))
    variants = {
        "unpatched": module.Unpatched(),
        "framework (Ledger.patch, pass-through closure)": module.Framework(),
        "seed (closure assigned directly)": module.Seed(),
        "sglang HookRegistry AROUND hook": module.Hooked(),
        "live feature bypassed (gate off)": module.LiveOff(),
        "live feature switched on (gate on)": module.LiveOn(),
        "live feature with two patches, bypassed (gate off)": module.Live2Off(),
        "live feature with two patches, switched on (gate on)": module.Live2On(),
    }
    for obj in variants.values():
        assert obj.meth(7) == 7
    names = list(variants)
    timers = {n: timeit.Timer("o.meth(1)", globals={"o": o}) for n, o in variants.items()}
    for t in timers.values():  # warm-up (specialising interpreter, caches)
        t.timeit(CALLS // 10)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(timeit.Timer.timeit(timers[n], CALLS))
    base = names[0]
    ns = {n: med(v) / CALLS * 1e9 for n, v in times.items()}
    paired = {n: [a / b for a, b in zip(times[n], times[base])] for n in names}
    fw, seed, hook, off, on, off2, on2 = names[1:8]
    fw_vs_seed = [a / b for a, b in zip(times[fw], times[seed])]
    off_vs_seed = [a / b for a, b in zip(times[off], times[seed])]
    on_vs_fw = [a / b for a, b in zip(times[on], times[fw])]
    rows = [row("3", f"call: {base} ({CALLS:,} calls)", ns[base], "ns/call", base, ns[base],
                ratio=1.0, n=rounds, note=f"range {spread(times[base], 1e9 / CALLS)} ns")]
    for n in (fw, seed, hook, off, on, off2, on2):
        rows.append(row("3", f"call: {n}", ns[n], "ns/call", base, ns[base], ratio=med(paired[n]),
                        n=rounds, note=f"paired ratios {spread(paired[n], 1, 3)}"))
    rows.append(row("3", "call: framework vs seed closure", ns[fw], "ns/call", "seed closure",
                    ns[seed], ratio=med(fw_vs_seed), goal=f"ratio <= 1.00 (+{TOLERANCE:.0%} noise)",
                    met=med(fw_vs_seed) <= 1 + TOLERANCE, n=rounds,
                    note=f"paired ratios {spread(fw_vs_seed, 1, 3)}; HookRegistry/framework "
                         f"{med([a / b for a, b in zip(times[hook], times[fw])]):.2f}"))
    rows.append(row("3", "call: live bypassed vs seed closure", ns[off], "ns/call", "seed closure",
                    ns[seed], ratio=med(off_vs_seed), goal=f"ratio <= 1.00 (+{TOLERANCE:.0%} noise)",
                    met=med(off_vs_seed) <= 1 + TOLERANCE, n=rounds,
                    note=f"paired ratios {spread(off_vs_seed, 1, 3)}"))
    rows.append(row("3", "call: live switched on vs framework (non-live)", ns[on], "ns/call",
                    "framework", ns[fw], ratio=med(on_vs_fw), n=rounds,
                    note=f"one more call level while on; paired ratios {spread(on_vs_fw, 1, 3)}"))
    off2_vs_seed = [a / b for a, b in zip(times[off2], times[seed])]
    on2_vs_seed = [a / b for a, b in zip(times[on2], times[seed])]
    rows.append(row("3", "call: live, two patches, bypassed vs seed closure", ns[off2], "ns/call",
                    "seed closure", ns[seed], ratio=med(off2_vs_seed),
                    goal=f"ratio <= 1.00 (+{TOLERANCE:.0%} noise)",
                    met=med(off2_vs_seed) <= 1 + TOLERANCE, n=rounds,
                    note=f"the outermost call reads the gate and pins it (ContextVar set + reset) "
                         f"for the feature's other patch; paired ratios {spread(off2_vs_seed, 1, 3)}"))
    rows.append(row("3", "call: live, two patches, switched on vs seed closure", ns[on2], "ns/call",
                    "seed closure", ns[seed], ratio=med(on2_vs_seed),
                    goal=f"ratio <= 1.00 (+{TOLERANCE:.0%} noise)",
                    met=med(on2_vs_seed) <= 1 + TOLERANCE, n=rounds,
                    note=f"bypass wrapper with the pin, then the pass-through closure (what a "
                         f"switched-on two-patch feature costs against the seed's closure); "
                         f"paired ratios {spread(on2_vs_seed, 1, 3)}"))
    details = {"ns_per_call": {n: round(v, 1) for n, v in ns.items()},
               "ratio_to_unpatched": {n: round(med(paired[n]), 3) for n in names}}
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    main(run)
