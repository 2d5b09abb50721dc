"""The child benchmark's engine base (bench/_activation_child.py ``ENGINE_BASE``) is what a real
sglang 0.5.23 scheduler process has imported when it calls ``load_plugins()``: importing the
scheduler module in a fresh interpreter imports every one of those modules and none of the
floor's libraries (structlog, wrapt), so the benchmark neither flatters nor burdens the framework.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_engine_base_is_what_a_real_scheduler_has_imported():
    sys.path.insert(0, str(BENCH))
    try:
        from _activation_child import ENGINE_BASE, FLOOR
    finally:
        sys.path.remove(str(BENCH))
    code = ("import json, sys, warnings; warnings.simplefilter('ignore')\n"
            "import sglang.srt.managers.scheduler as s\n"
            "assert callable(s.run_scheduler_process)\n"
            "print(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not [m for m in ENGINE_BASE if m not in imported]
    assert not [m for m in FLOOR if m in imported]
    assert "rich.traceback" not in imported and "rich.pretty" not in imported  # structlog's, floor
