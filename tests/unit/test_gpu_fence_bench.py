"""``bench/gpu_fence.py`` skips cleanly where there is no CUDA device (CI has none): exit status 0,
one line saying why, and with ``--out`` a JSON result that carries the reason and no figures.
The interpreter starts with CUDA hidden (``CUDA_VISIBLE_DEVICES=""``), so the test means the same
on a machine that has a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ..conftest import REPO

SCRIPT = REPO / "bench" / "gpu_fence.py"


def _run(*args, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)


def test_without_a_gpu_it_reports_a_clean_skip(tmp_path):
    out = tmp_path / "result.json"
    proc = _run("--quick", "--out", str(out), "--out-dir", str(tmp_path / "dir"), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_fence: skipped: "), proc.stdout
    reason = lines[0].removeprefix("gpu_fence: skipped: ")
    assert "CUDA" in reason or "torch" in reason, reason
    result = json.loads(out.read_text())
    assert result == {"skipped": reason, "rows": [], "details": {}}
    assert (tmp_path / "dir" / "gpu_fence.md").read_text() == reason


def test_help_names_the_options(tmp_path):
    proc = _run("--help", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for option in ("--quick", "--steps", "--device", "--reproduction", "--out", "--out-dir"):
        assert option in proc.stdout, option
