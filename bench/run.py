"""Run every benchmark side by side and report each figure with its baseline and the ratio.

    ./dev bench                 # or: .venv/bin/python bench/run.py
    ./dev bench --quick         # fewer repetitions (a smoke run, ~1.5 min)
    ./dev bench --only 1,3      # a subset

Each benchmark runs in its own interpreter (and starts fresh interpreters itself where it
measures a process). Prints the table (figure, value, baseline, ratio, added, goal, met?) and the
breakdowns, and writes the same as markdown to ``bench/out/last.md`` and as JSON to
``bench/out/last.json``. Figures are measurements: a missed goal is reported, never raised; the
exit status is 1 only when a benchmark crashed.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
BENCHMARKS = [
    ("1", "b1_activation", "Activation: child, parent, CLI"),
    ("2", "b2_resolution", "Parent resolution"),
    ("3", "b3_patched_call", "Patched call"),
    ("4", "b4_import_hooks", "Import hooks"),
    ("5", "b5_static_check", "Static check"),
    ("6", "b6_upgrade_gate", "Upgrade gate"),
    ("7", "b7_server", "Server: time to healthy and /generate throughput"),
    ("8", "b8_patch_check", "Patch check: the audit where a state is read"),
    ("9", "b9_fleet", "Fleet flags: kill-switch latency (Unleash, flagd) against the direct switch"),
]


def machine() -> dict:
    import importlib.metadata as md

    def version(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return "-"

    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    git = lambda *a: subprocess.run(["git", *a], cwd=REPO, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--", "src", "features", "settings.toml")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(), "cpu": cpu or platform.processor(),
        "gpu": "none" if not shutil.which("nvidia-smi") else "present (not used)",
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(), "platform": platform.platform(),
        "commit": git("rev-parse", "--short", "HEAD") + (" (src/features modified)" if dirty else ""),
        "versions": {d: version(d) for d in ("sglang", "torch", "flashinfer-python", "dynaconf",
                                             "structlog", "wrapt", "packaging", "rich")},
    }


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms" and abs(v) >= 1000:
        return f"{v / 1000:.2f} s"
    if unit == "%":
        return f"{v:.2f} %"
    if unit == "collections":
        return f"{v:g}"
    return f"{v:.1f} {unit}" if abs(v) >= 0.1 or v == 0 else f"{v:.3f} {unit}"


def cells(r: dict) -> list[str]:
    met = {True: "met", False: "MISSED", None: ""}[r["met"]]
    added = r["added"]
    return [r["id"], r["figure"], fmt_value(r["value"], r["unit"]), r["baseline"],
            fmt_value(r["baseline_value"], r["unit"]) if r["baseline_value"] is not None else "",
            f"x{r['ratio']:.3f}" if r["ratio"] is not None else "-",
            ("+" if added >= 0 else "-") + fmt_value(abs(added), r["unit"]) if added is not None else "",
            r["goal"], met]


HEAD = ["#", "figure", "value", "baseline", "baseline value", "ratio", "added", "goal", "met?"]


def text_table(rows: list[dict]) -> str:
    body = [HEAD] + [cells(r) for r in rows]
    widths = [min(max(len(c[i]) for c in body), 64) for i in range(len(HEAD))]
    line = lambda c: "  ".join(x[:w].ljust(w) for x, w in zip(c, widths)).rstrip()  # noqa: E731
    return "\n".join([line(body[0]), "  ".join("-" * w for w in widths)] + [line(c) for c in body[1:]])


def md_table(rows: list[dict]) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(esc(c) if i != 1 else esc(c).replace("  ", "&nbsp;&nbsp;")
                              for i, c in enumerate(cells(r))) + " |" for r in rows]
    return "\n".join(out)


def details_text(results: dict, markdown: bool) -> str:
    out = []
    for num, name, title in BENCHMARKS:
        res = results.get(num)
        if not res:
            continue
        notes = [(r["figure"].strip(), r["note"]) for r in res.get("rows", []) if r.get("note")]
        simple = lambda x: isinstance(x, (int, float, str)) or (  # noqa: E731
            isinstance(x, list) and all(isinstance(y, (int, float)) for y in x))
        blocks = [(k, v) for k, v in res.get("details", {}).items()
                  if isinstance(v, dict) and v and all(simple(x) for x in v.values())]
        if not notes and not blocks:
            continue
        out.append(f"### {num}. {title}" if markdown else f"\n[{num}] {title}")
        for fig, note in notes:
            out.append(f"- {fig}: {note}" if markdown else f"  {fig}: {note}")
        for key, block in blocks:
            out.append(f"- {key}:" if markdown else f"  {key}:")
            for k, v in block.items():
                v = ", ".join(map(str, v)) if isinstance(v, list) else v
                out.append(f"    - {k}: {v}" if markdown else f"      {k:<64} {v}")
        if markdown:
            out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="./dev bench", description=__doc__.split("\n")[0],
                                     epilog="Writes bench/out/last.md and bench/out/last.json.")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--only", metavar="N,N", help="run only these benchmarks, e.g. 1,3 (of "
                        + ",".join(b[0] for b in BENCHMARKS) + ")")
    args = parser.parse_args(argv)  # --help prints this and exits; an unknown option exits 2
    quick = args.quick
    only = set(args.only.split(",")) if args.only else None
    if only is not None and not only <= {b[0] for b in BENCHMARKS}:
        parser.error(f"--only {args.only}: no benchmark {', '.join(sorted(only - {b[0] for b in BENCHMARKS}))}")
    info = machine()
    results: dict[str, dict] = {}
    crashed = []
    started = time.perf_counter()
    chosen = [b for b in BENCHMARKS if only is None or b[0] in only]
    for i, (num, name, title) in enumerate(chosen, 1):
        sys.stderr.write(f"bench {num} ({i}/{len(chosen)}) {title} ... ")
        sys.stderr.flush()
        t0 = time.perf_counter()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
            tmp = fh.name
        cmd = [sys.executable, str(BENCH / f"{name}.py"), "--out", tmp] + (["--quick"] if quick else [])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(  # this tree's sources first
            [str(REPO / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
        try:
            results[num] = json.loads(Path(tmp).read_text()) if proc.returncode == 0 else None
        except ValueError:
            results[num] = None
        finally:
            Path(tmp).unlink(missing_ok=True)
        if results[num] is None:
            crashed.append(num)
            tail = proc.stderr.strip().splitlines()[-15:]
            sys.stderr.write(f"CRASHED (exit {proc.returncode})\n" + "\n".join(tail) + "\n")
            results[num] = {"rows": [{"id": num, "figure": f"{title}: benchmark crashed", "value": None,
                                      "unit": "", "baseline": "", "baseline_value": None,
                                      "ratio": None, "added": None, "goal": "", "met": None,
                                      "n": None, "note": tail[-1] if tail else ""}],
                            "details": {}, "error": "\n".join(tail)}
        else:
            sys.stderr.write(f"{time.perf_counter() - t0:.1f} s\n")
    total = time.perf_counter() - started
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [r for num, *_ in chosen for r in results[num]["rows"]]
    header = (f"dsv41_flags benchmarks, {info['date']}: {info['cores']} cores ({info['cpu']}), GPU "
              f"{info['gpu']}, Python {info['python']}, commit {info['commit']}; "
              + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
              + f"; load average {info['load_before']} before, {info['load_after']} after"
              + f"; {'quick, ' if quick else ''}total {total:.0f} s")
    print(header)
    print(text_table(rows))
    print(details_text(results, markdown=False))
    OUT.mkdir(exist_ok=True)
    missed = [f"{r['id']} {r['figure'].strip()}" for r in rows if r["met"] is False]
    md = [f"# Benchmark run {info['date']}", "", header, "", md_table(rows), "",
          "Goals missed: " + ("; ".join(missed) if missed else "none"), "", "## Breakdowns", "",
          details_text(results, markdown=True)]
    (OUT / "last.md").write_text("\n".join(md) + "\n")
    (OUT / "last.json").write_text(json.dumps({"machine": info, "quick": quick, "total_s": total,
                                               "rows": rows, "results": results}, indent=1,
                                              default=str) + "\n")
    print(f"\nwritten: {OUT / 'last.md'}, {OUT / 'last.json'} ({total:.0f} s)")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
