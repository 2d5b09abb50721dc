"""autotune_keep on the real ``sglang.srt.model_executor.runner.flashinfer_autotune`` (CPU).

Two real ranks: two ``spawn`` processes (sglang's own start method) in a torch.distributed gloo
group of world size 2. Each rank writes its own FlashInfer cache file with FlashInfer's
``AutoTuner.save_configs`` - the contents differ per rank, as under expert parallelism - and runs
the real entry gate ``_drop_diverged_autotune_cache`` over the group, in four scenarios run in
order inside the same pair of processes (each imports the target once):

a) stock (feature not installed): the gate deletes both caches (sglang#40320);
b) feature armed, caches and sidecars of this launch: both caches survive unchanged;
c) a non-volatile launch change (``SGLANG_SOME_KNOB=1``): the caches are re-tuned - no longer at
   the cache path - and moved aside as ``<cache>.stale-*`` with their content (nothing deleted);
d) a volatile-only change (``SGLANG_RUN_ID``, ``--port``): the caches are kept;
e) ranks that disagree set their caches aside (never delete);
f) a read-only directory (EROFS injected at the os calls): the gate never raises, the caches stay.

The ranks only report (see _autotune_rank.py); every assertion is made here.
"""
from __future__ import annotations

import multiprocessing
import queue as queue_mod
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

pytest.importorskip("torch.distributed")
pytest.importorskip("flashinfer")
if not __import__("importlib").util.find_spec("sglang"):
    pytest.skip("sglang is not installed", allow_module_level=True)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# the ranks unpickle run_rank by module name: make it a top-level module whatever the import mode
# (a spawned child starts with the parent's sys.path)
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from _autotune_rank import run_rank  # noqa: E402
WORLD_SIZE = 2
DEADLINE_S = 200  # generous: each rank imports the engine (~8 s alone, more on 2 shared cores)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run both ranks; return ``{rank: report}``. A rank's exception fails every test of this
    module with the rank's traceback; a rank that hangs or dies is killed and reported."""
    work = tmp_path_factory.mktemp("autotune_keep")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run_rank, name=f"rank{r}",
                         args=(r, WORLD_SIZE, str(work / "pg-init"), str(work), str(REPO), q))
             for r in range(WORLD_SIZE)]
    for p in procs:
        p.start()
    reports, errors = {}, {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(reports) + len(errors) < WORLD_SIZE:
            try:
                rank, kind, payload = q.get(timeout=1.0)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    errors["timeout"] = (f"no report from rank(s) "
                                         f"{sorted(set(range(WORLD_SIZE)) - set(reports) - set(errors))} "
                                         f"within {DEADLINE_S} s")
                    break
                dead = [p for r, p in enumerate(procs)
                        if r not in reports and r not in errors and not p.is_alive()]
                if dead:
                    # a rank gone without a report (crash); give its last message a moment
                    try:
                        rank, kind, payload = q.get(timeout=2.0)
                    except queue_mod.Empty:
                        for p in dead:
                            errors[p.name] = f"{p.name} died with exit code {p.exitcode} and no report"
                        break
                else:
                    continue
            (reports if kind == "done" else errors)[rank] = payload
            if kind == "error":
                break  # its peer is stuck in a collective: stop now
    finally:
        for p in procs:
            p.join(timeout=0 if errors else 30)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        q.close()
    if errors:
        pytest.fail("rank failure(s):\n" + "\n".join(f"--- {who}:\n{what}" for who, what in errors.items()),
                    pytrace=False)
    assert all(p.exitcode == 0 for p in procs), [(p.name, p.exitcode) for p in procs]
    return reports


def both(ranks, scenario):
    return [ranks[r][scenario] for r in range(WORLD_SIZE)]


def test_ranks_write_real_flashinfer_caches_that_differ(ranks):
    a0, a1 = both(ranks, "a")
    # real FlashInfer files: stamped with the environment, the same on both ranks
    assert ranks[0]["env"] == ranks[1]["env"] and ranks[0]["env"]
    assert a0["json_metadata"] == a1["json_metadata"] == ranks[0]["env"]
    # the EP case: the per-rank contents (so the stock digests) differ
    assert a0["digest"] != a1["digest"]
    assert a0["stock_digest"] and a1["stock_digest"] and a0["stock_digest"] != a1["stock_digest"]


def test_a_stock_gate_deletes_every_cache_under_ep(ranks):
    for r, a in enumerate(both(ranks, "a")):
        assert a["patched"] is False
        assert a["exists_after"] is False, f"rank {r} kept its cache"
        assert a["listing"] == [], f"rank {r}: {a['listing']}"  # deleted, not moved


def test_b_armed_same_launch_keeps_both_caches_unchanged(ranks):
    b0, b1 = both(ranks, "b")
    assert b0["fingerprint"] == b1["fingerprint"]
    for r, b in enumerate((b0, b1)):
        assert b["state"] == "installed"
        assert b["patched"] == ["_autotune_cache_digest", "_drop_diverged_autotune_cache",
                                "flashinfer_autotune_context"]
        assert b["digest_after"] == b["digest"], f"rank {r}: cache changed or gone"
        assert b["sidecar_after"] == b["sidecar"], f"rank {r}: sidecar changed or gone"
        name = ranks[r]["cache_name"]
        assert b["listing"] == sorted([name, name.replace(".json", ".launch")]), b["listing"]


def test_c_non_volatile_change_moves_the_caches_aside(ranks):
    for r, (b, c) in enumerate(zip(both(ranks, "b"), both(ranks, "c"))):
        assert c["restored"], f"rank {r}: uninstall left a patch"
        assert c["state"] == "installed"
        assert c["fingerprint"] != b["fingerprint"]
        assert c["digest_before"] == b["digest"]
        assert c["exists_after"] is False, f"rank {r}: a cache of another launch is still loadable"
        assert c["sidecar_exists_after"] is False
        # nothing deleted: exactly one moved-aside copy, with the cache's content, and its sidecar
        assert list(c["stale"].values()) == [b["digest"]], f"rank {r}: {c['listing']}"
        assert list(c["stale_sidecars"].values()) == [b["sidecar"]], f"rank {r}: {c['listing']}"
        assert not [n for n in c["listing"] if ".keep-" in n], f"rank {r}: leftover {c['listing']}"


def test_d_volatile_only_change_keeps_the_caches(ranks):
    for r, (c, d) in enumerate(zip(both(ranks, "c"), both(ranks, "d"))):
        assert d["state"] == "installed"
        assert d["fingerprint"] == c["fingerprint"], "SGLANG_RUN_ID / --port entered the fingerprint"
        assert d["digest_after"] == d["digest"], f"rank {r}: cache changed or gone"
        assert d["sidecar_after"] == d["sidecar"]
        assert d["stale_count"] == 1, f"rank {r}: {d['listing']}"  # only scenario c's copy
        assert d["restored"], f"rank {r}: uninstall left a patch"


def test_e_disagreeing_ranks_set_caches_aside_never_delete(ranks):
    for r, (d, e) in enumerate(zip(both(ranks, "d"), both(ranks, "e"))):
        assert e["digest_before"] == d["digest"]
        assert e["exists_after"] is False, f"rank {r}: a cache survived a disagreeing gate"
        assert d["digest"] in e["stale"].values(), f"rank {r}: the cache was deleted: {e['listing']}"
        assert len(e["stale"]) == 2, f"rank {r}: {e['listing']}"   # scenario c's copy and this one
        assert not [n for n in e["listing"] if ".keep-" in n or n.endswith(".tmp")], e["listing"]


def test_f_read_only_directory_never_crashes_the_gate(ranks):
    """On the real gate: caches of another launch in a read-only directory
    (EROFS injected at the os calls) are reported and left in place; the gate does not raise."""
    for r, f in enumerate(both(ranks, "f")):
        assert f["raised"] is None, f"rank {r}: {f['raised']}"
        assert "autotune_keep.read_only" in f["events"], f"rank {r}: {f['events']}"
        assert f["digest_after"] == f["digest"], f"rank {r}: cache changed or gone"
        assert f["listing_after"] == f["listing_before"], f"rank {r}: something was written"
