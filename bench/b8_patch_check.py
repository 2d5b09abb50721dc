"""Benchmark 8: what checking the patches costs, and where it is paid.

``Runtime.check_patches`` (the bounded part of the audit: is each installed patch still what the
engine would call?) runs by itself in ``states()`` (every status answer, the metrics, the serving
report), before each live switch and after a reload of a target. It is never on a call of a
patched function: the forward step runs the patches, not the check. Measured in one process
(``timeit``, GC off, median of rounds, variants alternating):
  - ``check_patches()`` with the two seed-sized features (one patch each) and with 20 features of
    3 patches each (one class per feature, reached from the target module by its name);
  - ``states()`` with the check against ``states()`` with the check replaced by nothing (the
    record loop alone, what a status answer paid before);
  - a patched call of a method the class defines (the replacement wraps what it captured)
    against a patched call of a method the class inherits (the replacement calls through to the
    base's attribute of call time: ``patch.through``), and against the unpatched call.
Goal: ``check_patches`` at most 50 us for the seed-sized case (a status answer takes
milliseconds). The inherited patched call is information: one ``super()`` lookup per call, paid
only by a patch of an attribute its class inherits (the shipped features patch attributes their
classes define).
"""
from __future__ import annotations

import gc
import importlib
import sys
import tempfile
import textwrap
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, main, med, row, spread  # noqa: E402

sys.path.insert(0, str(REPO / "src"))


def _project(root: Path, features: int, patches: int) -> tuple[Path, Path, str]:
    """A target module with ``features`` classes of ``patches`` methods each and a subclass of
    each, and one feature per class patching every method on the class."""
    target = f"dsv41_bench_check_{features}x{patches}"
    body = []
    for i in range(features):
        methods = "".join(f"    def m{j}(self, x):\n        return x\n" for j in range(patches))
        body.append(f"class C{i}:\n{methods}\nclass S{i}(C{i}):\n    pass\n")
    (root / f"{target}.py").write_text("\n".join(body))
    fdir = root / f"feats_{features}x{patches}"
    fdir.mkdir()
    for i in range(features):
        (fdir / f"check_{i}.py").write_text(textwrap.dedent(f"""
            from dsv41_flags import Feature
            def install(module, ctx):
                for j in range({patches}):
                    ctx.patch(module.C{i}, f"m{{j}}", lambda original: (lambda self, x: original(self, x)))
            FEATURE = Feature(name="check_{i}", target={target!r}, install=install, summary="bench",
                              engine="")
        """))
    settings = root / f"settings_{features}x{patches}.toml"
    settings.write_text("[default]\n" + "".join(f"check_{i} = true\n" for i in range(features)))
    return fdir, settings, target


def _runtime(root: Path, features: int, patches: int):
    from dsv41_flags.assembly import build
    fdir, settings, target = _project(root, features, patches)
    rt = build([settings], environ={}, argv=[], features_dir=fdir, use_snapshot=False,
               configure_logging=False)
    rt.arm()
    module = importlib.import_module(target)
    assert all(s.state == "installed" for s in rt.states() if s.name.startswith("check_"))
    return rt, module


def _per_call(fn, number: int, rounds: int) -> list[float]:
    gc.disable()
    try:
        return [min(timeit.repeat(fn, number=number, repeat=3)) / number for _ in range(rounds)]
    finally:
        gc.enable()


def run(quick: bool = False) -> dict:
    import structlog
    structlog.configure(processors=[lambda *a: (_ for _ in ()).throw(structlog.DropEvent)])
    rounds, number = (3, 2_000) if quick else (9, 20_000)
    rows, details = [], {}
    with tempfile.TemporaryDirectory(prefix="dsv41-bench-") as tmp:
        sys.path.insert(0, tmp)
        small, _ = _runtime(Path(tmp), 2, 1)
        large, _ = _runtime(Path(tmp), 20, 3)
        check_small = _per_call(small.check_patches, number, rounds)
        check_large = _per_call(large.check_patches, number // 10, rounds)
        with_check, without = [], []
        for i in range(rounds):
            for which in ("with", "without") if i % 2 == 0 else ("without", "with"):
                if which == "with":
                    with_check += _per_call(small.states, number, 1)
                else:
                    small.check_patches = lambda features=None: None
                    without += _per_call(small.states, number, 1)
                    del small.check_patches
        # a patched call: own method (captured) against inherited (calls through)
        from dsv41_flags.patch import Ledger
        ledger = Ledger()

        def m(self, x):
            return x

        plain_cls, own_cls, base_cls = (type(n, (), {"m": m}) for n in ("Plain", "Own", "Base"))
        sub_cls = type("Sub", (base_cls,), {})
        make = lambda original: (lambda self, x: original(self, x))  # noqa: E731
        ledger.patch("own", own_cls, "m", make)
        ledger.patch("inherited", sub_cls, "m", make)
        plain, own_obj, sub_obj = plain_cls(), own_cls(), sub_cls()
        calls = {"unpatched": lambda: plain.m(1), "own": lambda: own_obj.m(1),
                 "inherited": lambda: sub_obj.m(1)}
        timings: dict[str, list[float]] = {k: [] for k in calls}
        for i in range(rounds):
            for name in (list(calls) if i % 2 == 0 else list(reversed(calls))):
                timings[name] += _per_call(calls[name], number * 10, 1)
        ledger.uninstall("inherited")
        ledger.uninstall("own")
        small.uninstall()
        large.uninstall()
        sys.path.remove(tmp)
    us = lambda v: med(v) * 1e6  # noqa: E731
    ns = lambda v: med(v) * 1e9  # noqa: E731
    rows.append(row("8a", "check_patches(): 2 features x 1 patch (seed-sized)", us(check_small), "us",
                    goal="<= 50 us", met=us(check_small) <= 50, n=rounds,
                    note=f"range {spread(check_small, 1e6, 2)} us"))
    rows.append(row("8b", "check_patches(): 20 features x 3 patches", us(check_large), "us",
                    n=rounds, note=f"per patch {us(check_large) / 60:.2f} us"))
    rows.append(row("8c", "states() with the check (2 features)", us(with_check), "us",
                    "states() without it", us(without), n=rounds,
                    note=f"ranges {spread(with_check, 1e6, 2)} vs {spread(without, 1e6, 2)} us"))
    inherited, own = ns(timings["inherited"]), ns(timings["own"])
    rows.append(row("8d", "patched call of an inherited method (calls through)", inherited, "ns",
                    "patched call of an own method", own, n=rounds,
                    note=f"information: one super() lookup per call, paid only by a patch of an "
                         f"attribute its class inherits; unpatched call "
                         f"{ns(timings['unpatched']):.0f} ns"))
    details["per_call_ns"] = {k: round(ns(v), 1) for k, v in timings.items()}
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    main(run)
