"""autotune_keep on the real ``flashinfer_autotune`` against hostile caches and sidecars: valid
JSON of the wrong shape, nesting deep enough to exhaust the parser, FIFOs, a
symbolic link to ``/dev/zero``. The patched digest never raises into the engine, never hangs, and
never holds the cache's lock forever: each such cache is of no launch and is set aside."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

if not __import__("importlib").util.find_spec("sglang"):
    pytest.skip("sglang is not installed", allow_module_level=True)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile")
    proc = subprocess.run([sys.executable, str(HERE / "_autotune_hostile.py"), str(REPO), str(work)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_installed(report):
    assert report["state"] == "installed"


@pytest.mark.parametrize("case", ["payload_argv_int", "payload_env_list", "sidecar_deep", "cache_deep",
                                  "cache_fifo", "sidecar_fifo", "sidecar_dev_zero", "cache_dev_zero"])
def test_hostile_file_never_raises_nor_hangs(report, case):
    entry = report[case]
    assert "raised" not in entry, entry
    assert entry["result"] == "", entry  # no cache of this launch: set aside, re-tuned
    assert "autotune_keep.set_aside" in entry["events"], entry
    assert entry["seconds"] < 5, entry
