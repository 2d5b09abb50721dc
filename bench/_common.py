"""Shared helpers of the benchmarks: fresh interpreters, medians, result rows.

Every benchmark module exposes ``run(quick: bool) -> dict`` returning ``{"rows": [...],
"details": {...}}`` and is started by ``run.py`` in its own interpreter. A row is a plain dict:

    id, figure, value, unit, baseline, baseline_value, ratio (value / baseline_value or None),
    added (value - baseline_value), goal, met (True / False / None = no goal), n, note

Figures are measurements, never assertions: a missed goal is reported, nothing fails.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PY = sys.executable
FEATURES_DIR = REPO / "features"
SETTINGS = REPO / "settings.toml"
CLI = str(Path(PY).with_name("dsv41-flags"))
# a benchmark that imports the framework in its own process measures this tree too
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))


#: source of ``timed(owner, name, label, wrap=...)`` for child scripts (which define ``spent = {}``
#: first): wraps ``owner.name`` so each call adds its seconds to ``spent[label]``; skipped when
#: ``owner`` has no ``name``. Contains no braces, so it can sit in a ``str.format`` template.
TIMED_SRC = """
def timed(owner, name, label, wrap=lambda f: f):
    orig = getattr(owner, name, None)
    if orig is None:
        return
    spent[label] = 0.0
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t
    setattr(owner, name, wrap(w))
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any DSV41_ variable, with ``PYTHONPATH`` = this tree's ``src``
    only (no bootstrap on it), plus ``extra``. Every fresh interpreter of the benchmarks starts
    from it, so the host's own settings never leak into a figure and the tree measured is this
    one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env["PYTHONPATH"] = str(REPO / "src")  # this tree's sources, whatever the venv's install points at
    env.pop("PYTHONSTARTUP", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # feature modules and targets use their .pyc
    env.update(extra)
    return env


def python(code: str, env: dict[str, str] | None = None, *, cwd: Path | None = None,
           args: list[str] | None = None, timeout: float = 300) -> tuple[float, dict]:
    """Run ``code`` in a fresh interpreter (``python -c``). Returns ``(wall seconds, payload)``
    where payload is the JSON object the code printed on its last stdout line ({} when none).
    Raises RuntimeError with the stderr tail when the interpreter fails."""
    cmd = [PY, "-c", code] + list(args or [])
    return command(cmd, env, cwd=cwd, timeout=timeout)


def command(cmd: list[str], env: dict[str, str] | None = None, *, cwd: Path | None = None,
            timeout: float = 300, ok_codes: tuple[int, ...] = (0,)) -> tuple[float, dict]:
    """Run ``cmd``; wall time from start to exit, and the JSON of its last stdout line if any."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=clean_env() if env is None else env, cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode not in ok_codes:
        raise RuntimeError(f"{cmd[:3]}... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    payload: dict = {}
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            payload = json.loads(lines[-1])
        except ValueError:
            payload = {"stdout": proc.stdout[-2000:]}
    return wall, payload


def med(values) -> float:
    return statistics.median(values)


def spread(values, scale: float = 1.0, digits: int = 1) -> str:
    """``min..max`` of ``values`` (times ``scale``) for notes."""
    return f"{min(values) * scale:.{digits}f}..{max(values) * scale:.{digits}f}"


def row(id: str, figure: str, value: float, unit: str, baseline: str | None = None,
        baseline_value: float | None = None, *, goal: str = "", met: bool | None = None,
        n: int | None = None, note: str = "", ratio: float | None = None,
        added: float | None = None) -> dict:
    """One result row; ratio and added are computed from the baseline unless given."""
    if baseline_value is not None:
        if ratio is None and baseline_value > 0 and baseline_value >= 1e-3 * abs(value):
            ratio = value / baseline_value
        if added is None:
            added = value - baseline_value
    return {"id": id, "figure": figure, "value": value, "unit": unit, "baseline": baseline or "",
            "baseline_value": baseline_value, "ratio": ratio, "added": added, "goal": goal,
            "met": met, "n": n, "note": note}


def main(run) -> None:
    """Entry point of a benchmark module: ``python bench/bN_x.py [--quick] [--out FILE]``."""
    quick = "--quick" in sys.argv
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    result = run(quick)
    text = json.dumps(result, indent=1, default=str)
    if out:
        Path(out).write_text(text)
    else:
        print(text)
