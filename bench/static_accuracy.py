"""Accuracy of the static check against live truth (issue 14).

    .venv/bin/python bench/static_accuracy.py [--per-category N] [--seed S] [--json FILE]

A child interpreter imports real sglang modules (the installed 0.5.23) and torch's (2.14.1, a
compiled package with a module ``__getattr__``), samples requirements in every category (up to
``--per-category`` per category and top-level package) from the live objects (present ones), makes as many absent ones (misspellings,
names taken from another class, parameters taken from another function, a parameter that only
``**kwargs`` would absorb), and decides each with live truth:

- a path is present when ``getattr`` succeeds at every step (a dataclass field without a class
  default counts as present: that is what a patch means by ``Cls.field``);
- a parameter is present when ``inspect.signature`` of the object lists it by name.

This parent never imports sglang: it runs the static check (``--checker``: ``ours``, the
``Checker`` over the installed source with its import probe for names the source leaves
undecided on a dependency, here torch; ``ours-no-probe``; or ``griffe``, the same walk over griffe,
``bench/griffe_checker.py``) on every sampled requirement and counts, per category:
false-ok = static "ok" for a requirement that is absent (the dangerous direction), over the
absent ones; false-missing = static "missing" for one that is present, over the present ones;
undecided = the static check said it cannot tell (never counted as ok).
Goals: false-ok <= 0.5 %, false-missing <= 1 %.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

MODULES = (
    "sglang.srt.server_args",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.io_struct",
    "sglang.srt.model_executor.runner.flashinfer_autotune",
    "sglang.srt.speculative.dspark_components.dspark_verify",
    "sglang.srt.utils.common",
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.configs.model_config",
    # a compiled package (``torch._C``) with a module ``__getattr__``: decided by the import probe
    "torch",
    "torch.nn.functional",
)

CHILD = r'''
import dataclasses, importlib, inspect, json, random, sys, types
from collections import defaultdict
modules, per, seed = json.loads(sys.argv[1])
rng = random.Random(seed)

def step(obj, part):
    try:
        return True, getattr(obj, part)
    except Exception:
        fields = getattr(obj, "__dataclass_fields__", None)
        if isinstance(obj, type) and isinstance(fields, dict) and part in fields:
            return True, fields[part]
        return False, None

def truth(module, text):
    path, _, params = text.partition("(")
    obj = module
    for part in path.split("."):
        ok, obj = step(obj, part)
        if not ok:
            return False
    if params:
        try:
            names = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return None
        return all(p.strip() in names for p in params.rstrip(")").split(","))
    return True

def misspell(name):
    i = rng.randrange(len(name))
    kind = rng.randrange(3)
    if kind == 0 and len(name) > 3:
        return name[:i] + name[i + 1:]
    if kind == 1 and i + 1 < len(name):
        return name[:i] + name[i + 1] + name[i] + name[i + 2:]
    return name + rng.choice(["s", "_", "2", "x"])

def public(name):
    return not (name.startswith("__") and name.endswith("__"))

def params_of(fn):
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}

cands = defaultdict(list)       # category -> [(module, text)]
for mname in modules:
    m = importlib.import_module(mname)
    names = [n for n in vars(m) if public(n)]
    funcs, classes = [], []
    for n in names:
        obj = vars(m)[n]
        own = getattr(obj, "__module__", None) == mname
        if isinstance(obj, types.ModuleType):
            continue
        if inspect.isclass(obj) and own:
            classes.append((n, obj)); cands["class"].append((mname, n))
        elif inspect.isfunction(obj) and own:
            funcs.append((n, obj)); cands["function"].append((mname, n))
        elif (inspect.isclass(obj) or callable(obj)) and not own:
            cands["re-export"].append((mname, n))
        elif not callable(obj):
            cands["constant"].append((mname, n))
    def add_params(owner, fn, skip=0):
        ps = params_of(fn)
        for p, prm in list(ps.items())[skip:]:
            cat = {prm.KEYWORD_ONLY: "kw-only param", prm.VAR_POSITIONAL: "*args/**kwargs",
                   prm.VAR_KEYWORD: "*args/**kwargs"}.get(prm.kind, "param")
            cands[cat].append((mname, f"{owner}({p})"))
        if any(p.kind is p.VAR_KEYWORD for p in ps.values()):
            cands["absent: absorbed by **kwargs"].append((mname, f"{owner}({misspell('zz_option')})"))

    for n, fn in funcs:
        add_params(n, fn)
    for cn, cls in classes:
        for a, raw in vars(cls).items():
            if not public(a):
                continue
            if isinstance(raw, property):
                cat = "property"
            elif isinstance(raw, (classmethod, staticmethod)):
                cat = "class/static method"
            elif inspect.isfunction(raw):
                cat = "method"
                add_params(f"{cn}.{a}", raw, skip=1)
            elif isinstance(raw, type):
                cat = "class"
            else:
                cat = "class attribute"
            cands[cat].append((mname, f"{cn}.{a}"))
        for a in dir(cls):
            if public(a) and a not in vars(cls) and not hasattr(object, a):
                cands["inherited"].append((mname, f"{cn}.{a}"))
        for p in params_of(cls):
            cands["constructor param"].append((mname, f"{cn}({p})"))
        for f in getattr(cls, "__dataclass_fields__", {}) or {}:
            cands["class attribute"].append((mname, f"{cn}.{f}"))

out = []
for cat, items in sorted(cands.items()):     # up to ``per`` per category and top-level package
    for top in sorted({m.split(".")[0] for m, _ in items}):
        mine = sorted(x for x in set(items) if x[0].split(".")[0] == top)
        rng.shuffle(mine)
        for mname, text in mine[:per]:
            out.append({"module": mname, "text": text, "category": cat})
present = list(out)
absent = []
for c in present:                   # one absent requirement per present one
    mname, text = c["module"], c["text"]
    if c["category"].startswith("absent"):
        continue
    path, _, params = text.partition("(")
    parts = path.split(".")
    kind = rng.randrange(3)
    if params and kind != 1:        # a parameter taken from another function
        others = [x["text"] for x in present if "(" in x["text"] and x["text"] != text]
        other = rng.choice(others).partition("(")[2].rstrip(")")
        absent.append({"module": mname, "text": f"{path}({other})", "category": "absent: other param"})
    elif len(parts) == 2 and kind == 2:   # a name that exists on another class
        others = [x["text"].split(".")[1] for x in present
                  if x["text"].count(".") == 1 and "(" not in x["text"]]
        absent.append({"module": mname, "text": f"{parts[0]}.{rng.choice(others)}",
                       "category": "absent: wrong class"})
    else:                            # a misspelling of the last name
        wrong = parts[:-1] + [misspell(parts[-1])]
        absent.append({"module": mname, "text": ".".join(wrong) + (f"({params}" if params else ""),
                       "category": "absent: misspelling"})
result = []
for c in present + absent:
    t = truth(sys.modules[c["module"]], c["text"])
    if t is not None:
        result.append({**c, "truth": t})
print(json.dumps(result))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-category", type=int, default=40)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--modules", default=",".join(MODULES), help="comma-separated modules to sample")
    ap.add_argument("--engine", default=None, help="read the static side from this release (a wheel, a "
                    "tree or a pinned requirement, as `check --engine`) instead of the installed source")
    ap.add_argument("--json", type=Path, default=None, help="write every sample and verdict here")
    ap.add_argument("--checker", choices=("ours", "griffe", "ours-no-probe"), default="ours",
                    help="the static side: the project's Checker (with its import probe, or "
                         "without), or the same walk over griffe (bench/griffe_checker.py)")
    args = ap.parse_args()

    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([modules, args.per_category, args.seed])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return 1
    samples = json.loads(proc.stdout.strip().splitlines()[-1])

    from dsv41_flags.requires import Require
    from dsv41_flags.upgrade_gate.static_check import Checker

    view = None
    if args.engine:
        from dsv41_flags.upgrade_gate.releases import open_release

        release = open_release(args.engine, engines=("sglang",))
        if release.error:
            sys.stderr.write(f"{args.engine}: {release.error}\n")
            return 1
        view = release.view
    if args.checker == "griffe":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        try:
            from griffe_checker import GriffeChecker
        except ImportError as exc:
            sys.stderr.write(f"--checker griffe needs griffelib (pip install -r "
                             f"requirements/bench.txt): {exc}\n")
            return 1

        griffe_checker = GriffeChecker(view)
        decide = lambda module, reqs: [griffe_checker.verdict(module, r) for r in reqs]  # noqa: E731
    else:
        checker = Checker(view, probe=args.checker == "ours")
        decide = lambda module, reqs: checker.verdicts(module, reqs, "sglang")  # noqa: E731
    parsed = []
    for s in samples:
        try:
            parsed.append((s, Require.parse(s["text"])))
        except Exception:  # noqa: BLE001 - a name the requires syntax cannot write
            continue
    by_module: dict[str, list] = defaultdict(list)
    for s, req in parsed:
        by_module[s["module"]].append((s, req))
    for module, group in by_module.items():   # one import probe per module, at most
        for (s, _), v in zip(group, decide(module, [req for _, req in group])):
            s["static"], s["why"] = v.verdict, v.why
    stats: dict[str, Counter] = defaultdict(Counter)
    wrong = []
    for s, _ in parsed:
        v = s
        key = "present" if s["truth"] else "absent"
        for cat in (s["category"], "all", f"all {s['module'].split('.')[0]}"):
            st = stats[cat]
            st[key] += 1
            st[f"{key}:{v['static']}"] += 1
        if (v["static"] == "ok" and not s["truth"]) or (v["static"] == "missing" and s["truth"]):
            wrong.append(s)
    assert "sglang" not in {m.split(".")[0] for m in sys.modules}, "the parent imported sglang"

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f}%" if b else "-"

    print(f"{'category':30} {'present':>8} {'absent':>7} {'false-ok':>9} {'false-miss':>10} {'undecided':>9}")
    for cat in sorted(stats, key=lambda c: (c.startswith("all"), c)):
        st = stats[cat]
        und = st["present:undecided"] + st["absent:undecided"]
        print(f"{cat:30} {st['present']:>8} {st['absent']:>7} {pct(st['absent:ok'], st['absent']):>9} "
              f"{pct(st['present:missing'], st['present']):>10} {pct(und, st['present'] + st['absent']):>9}")
    st = stats["all"]
    summary = {
        "checker": args.checker, "modules": modules, "samples": st["present"] + st["absent"], "present": st["present"],
        "absent": st["absent"],
        "false_ok": st["absent:ok"], "false_ok_rate": st["absent:ok"] / max(st["absent"], 1),
        "false_missing": st["present:missing"],
        "false_missing_rate": st["present:missing"] / max(st["present"], 1),
        "undecided": st["present:undecided"] + st["absent:undecided"],
        "right": st["present:ok"] + st["absent:missing"],
    }
    print(f"\n{summary['samples']} requirements ({summary['present']} present, {summary['absent']} absent) "
          f"from {len(modules)} modules: right {summary['right']}, false-ok {summary['false_ok']} "
          f"({100 * summary['false_ok_rate']:.2f}%, goal <= 0.5%), false-missing "
          f"{summary['false_missing']} ({100 * summary['false_missing_rate']:.2f}%, goal <= 1%), "
          f"undecided {summary['undecided']} ({pct(summary['undecided'], summary['samples'])})")
    for s in wrong:
        print(f"  WRONG {s['category']}: {s['module']} {s['text']}: truth {s['truth']}, static "
              f"{s['static']} ({s['why']})")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
