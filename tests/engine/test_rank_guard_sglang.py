"""Engine tier: the rank guard cannot hang, proven through sglang's own path.

Two gloo CPU ranks per scenario, each a fresh process running ``_guard_rank.py``: sglang's real
``load_plugins()`` registers the guard in sglang's HookRegistry, and the AFTER hook fires when
sglang's real ``initialize_model_parallel()`` returns. The seam that lets that call finish on a
CPU is sglang's own platform layer: an out-of-tree platform (entry-point group
``sglang.srt.platforms``, declared by a distribution the test writes on ``PYTHONPATH``) whose
capabilities say ``supports_pynccl=False``. The three scenarios run side by side (six processes,
each imports sglang once); every process is bounded in time and killed at the end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIMEOUT = 600  # seconds for the six processes (importing sglang); the guard answers within seconds

PLATFORM = '''
"""An out-of-tree sglang platform for CPU tests: the in-tree CPU platform, declared out of tree
so that sglang reads its capabilities, which say that PyNccl is not available."""
from sglang.srt.platforms.cpu import CpuSRTPlatform
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import PlatformCapabilities


class GlooCpuPlatform(CpuSRTPlatform):
    _enum = PlatformEnum.OOT
    capabilities = PlatformCapabilities(graph_capture=True, supports_pynccl=False)


def activate():
    return "gloo_platform:GlooCpuPlatform"
'''

SCENARIOS = {
    "equal": (["[default]\nautotune_keep = true\n"] * 2, ["raise", "raise"]),
    "settings_differ": (["[default]\nautotune_keep = true\n", "[default]\nautotune_keep = false\n"],
                        ["raise", "raise"]),
    "modes_differ": (["[default]\nautotune_keep = true\n"] * 2, ["raise", "off"]),
}


def _platform_dist(root: Path) -> Path:
    """A distribution on ``root`` declaring the ``gloo_cpu`` platform in sglang's group."""
    (root / "gloo_platform.py").write_text(textwrap.dedent(PLATFORM))
    info = root / "gloo_platform-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gloo-platform\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sglang.srt.platforms]\ngloo_cpu = gloo_platform:activate\n")
    return root


def _events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    """Run every scenario's two ranks at once; ``{name: [rank0, rank1]}`` with each rank's result
    dict plus ``events`` (its dsv41_flags JSON events)."""
    root = tmp_path_factory.mktemp("guard")
    (root / "platform").mkdir()
    plat = _platform_dist(root / "platform")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("DSV41_", "SGLANG_PLATFORM", "SGLANG_PLUGINS"))}
    procs = []
    for name, (texts, modes) in SCENARIOS.items():
        work = root / name
        work.mkdir()
        for rank in (0, 1):
            settings = work / f"rank{rank}.toml"
            settings.write_text(texts[rank])
            env = dict(base, DSV41_SETTINGS=str(settings), DSV41_RANK_GUARD=modes[rank],
                       DSV41_LOG_FORMAT="json", PYTHONPATH=os.pathsep.join(
                           [str(plat)] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]))
            out, err = work / f"result{rank}.json", open(work / f"stderr{rank}.txt", "w")
            proc = subprocess.Popen([sys.executable, str(HERE / "_guard_rank.py"), str(rank),
                                     str(work / "init"), str(out)], env=env, cwd=work,
                                    stdout=subprocess.DEVNULL, stderr=err)
            procs.append((name, rank, proc, out, err))
    deadline = time.monotonic() + TIMEOUT
    try:
        for _name, _rank, proc, _out, _err in procs:
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        for _name, _rank, proc, _out, err in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            err.close()
    results: dict[str, list[dict]] = {name: [{}, {}] for name in SCENARIOS}
    for name, rank, proc, out, err in procs:
        stderr = Path(err.name).read_text()
        result = json.loads(out.read_text()) if out.is_file() else {
            "error": f"no result (exit {proc.returncode}, killed after {TIMEOUT} s if None)\n{stderr[-3000:]}"}
        result["events"] = _events(stderr)
        results[name][rank] = result
    return results


def _ok(ranks):
    for r in ranks:
        assert "error" not in r, r["error"]
        assert r["hooked"] is True                    # HookRegistry applied the AFTER hook
        assert r["platform"] == "GlooCpuPlatform"     # sglang's platform layer, out of tree
        assert r["seconds"] < 120                     # an answer, not a process-group timeout


def test_equal_settings_agree_after_the_real_initialize_model_parallel(scenarios):
    ranks = scenarios["equal"]
    _ok(ranks)
    for r in ranks:
        assert r.get("returned") is True
        agree = [e for e in r["events"] if e["event"] == "ranks.agree"]
        assert len(agree) == 1 and agree[0]["ranks"] == 2 and agree[0]["mode"] == "raise"
    digests = {e["digest"] for r in ranks for e in r["events"] if e["event"] == "ranks.agree"}
    assert len(digests) == 1


def test_different_settings_raise_with_the_table_on_every_rank(scenarios):
    ranks = scenarios["settings_differ"]
    _ok(ranks)
    for r in ranks:
        assert r["raised"].startswith("RankMismatchError")
        assert "AUTOTUNE_KEEP: rank 0: True, rank 1: False" in r["raised"]
        (mismatch,) = [e for e in r["events"] if e["event"] == "ranks.mismatch"]
        assert "AUTOTUNE_KEEP" in mismatch["keys"] and "armed" in mismatch["keys"]


def test_a_rank_with_guard_off_still_joins_and_the_mode_disagreement_is_reported(scenarios):
    """Rank 1 has rank_guard = off, rank 0 raise: no hang; both report the disagreement on the
    mode itself and both stop (the strictest mode any rank holds is the launch's)."""
    ranks = scenarios["modes_differ"]
    _ok(ranks)
    for r in ranks:
        assert r["raised"].startswith("RankMismatchError")
        assert "rank_guard: rank 0: 'raise', rank 1: 'off'" in r["raised"]
        (mismatch,) = [e for e in r["events"] if e["event"] == "ranks.mismatch"]
        assert mismatch["keys"] == ["rank_guard"] and mismatch["mode"] == "raise"
    assert [r["events"][0]["event"] for r in ranks] == ["flags.resolved"] * 2
    assert {e["local_mode"] for r in ranks for e in r["events"] if e["event"] == "ranks.mismatch"} \
        == {"raise", "off"}
