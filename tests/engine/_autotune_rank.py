"""One rank of the autotune_keep engine test, run in a ``spawn``-ed process (see
test_autotune_keep.py). Everything here is real: a gloo group of two processes, sglang's
``flashinfer_autotune`` module, FlashInfer's ``AutoTuner`` writing the per-rank cache files, and
dsv41_flags runtimes armed in this process. The rank reports a dict per scenario on ``queue``;
the parent process asserts. Any exception is reported with its traceback.
"""
from __future__ import annotations

import hashlib
import traceback
from datetime import timedelta
from pathlib import Path

TARGET = "sglang.srt.model_executor.runner.flashinfer_autotune"
#: the launch command line, the same on both ranks (only --port changes, in scenario d)
ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "/models/dsv41", "--tp", "2",
        "--ep", "2", "--port", "30000"]
BASE_ENV = {"DSV41_AUTOTUNE_KEEP": "1", "SGLANG_RUN_ID": "20261129-000001",
            "NCCL_DEBUG": "WARN"}


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _listing(directory: Path, stem: str) -> list[str]:
    """This rank's files in the cache directory the ranks share (the peer's change concurrently):
    its cache, sidecar, moved-aside copies and any leftover temporary (``.<name>.keep-*``)."""
    return sorted(p.name for p in directory.iterdir() if p.name.lstrip(".").startswith(stem + ".")
                  and not p.name.endswith(".lock"))  # the advisory lock file beside the cache


def run_rank(rank: int, world_size: int, init_file: str, workdir: str, repo: str, queue) -> None:
    try:
        queue.put((rank, "done", _scenarios(rank, world_size, init_file, Path(workdir), Path(repo), queue)))
    except BaseException:  # noqa: BLE001 - the parent shows it
        queue.put((rank, "error", traceback.format_exc()))


def _scenarios(rank: int, world_size: int, init_file: str, workdir: Path, repo: Path, queue) -> dict:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=90))
    try:
        # the CPU group sglang hands to the gate (tp_group.cpu_group)
        group = dist.new_group(ranks=list(range(world_size)), backend="gloo")
        return _run(rank, group, workdir, repo)
    finally:
        dist.destroy_process_group()


def _run(rank: int, group, workdir: Path, repo: Path) -> dict:
    import importlib
    import sys

    import torch.distributed as dist
    from flashinfer.autotuner import AutoTuner, ProfilingCacheKey, _collect_metadata

    import dsv41_flags
    import dsv41_flags.cache_keeping
    from dsv41_flags.assembly import build

    assert TARGET not in sys.modules
    mod = importlib.import_module(TARGET)  # the one import of the target in this process
    stock = {name: getattr(mod, name) for name in
             ("_autotune_cache_digest", "_drop_diverged_autotune_cache", "flashinfer_autotune_context")}

    # ------------------------------------------------------------------ per-rank tuner content
    # Under EP each rank tunes the MoE shapes of its own experts. The winner of a profile goes in
    # the tuner's profiling cache exactly as AutoTuner.rank_tactics/choose_one put it on a GPU
    # (key: op, runner class, bucketed shapes; value: (tactic, profile)); save_configs then
    # writes a real cache file stamped with _collect_metadata().
    tuner = AutoTuner.get()
    local_experts = 16 * (rank + 1)
    key = ProfilingCacheKey(custom_op="flashinfer::trtllm_fp4_block_scale_moe",
                            runner_class_name="MoERunner", runner_hash=0,
                            nearest_profile=((64, 7168), (local_experts, 4096, 3584)),
                            extras=(f"local_experts={local_experts}",))
    with tuner._lock:
        tuner.profiling_cache[key] = ((rank + 1) * 7, None)
    env = _collect_metadata()

    cache_dir = workdir / "autotune"
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_path = cache_dir / f"rank_tp{rank}_pp0_dp0.json"
    sidecar = dsv41_flags.cache_keeping.sidecar_path(cache_path)

    def tune():
        """What a finished tuning leaves behind (the autotune context saves the tactics)."""
        tuner.save_configs(str(cache_path))
        return _digest(cache_path)

    def gate():
        """The entry gate as flashinfer_autotune_context calls it, every rank together."""
        dist.barrier(group=group)
        mod._drop_diverged_autotune_cache(cache_path, group, env)
        dist.barrier(group=group)

    def runtime(extra_env=None, argv=ARGV):
        environ = dict(BASE_ENV, **(extra_env or {}))
        rt = build([repo / "settings.toml"], None, environ=environ, argv=list(argv), use_snapshot=False,
                   configure_logging=False)
        rt.arm()  # the target is imported: the install runs at once
        return rt

    def state(rt):
        return {s.name: s.state for s in rt.states()}["autotune_keep"]

    def stale():
        return sorted(p.name for p in cache_dir.glob(f"{cache_path.name}.stale-*"))

    out: dict = {"env": env, "cache_name": cache_path.name}

    # a) stock gate (feature not installed): EP caches always differ, both are deleted (#40320)
    a = out["a"] = {}
    a["digest"] = tune()
    a["json_metadata"] = __import__("json").loads(cache_path.read_text()).get("_metadata")
    a["stock_digest"] = mod._autotune_cache_digest(cache_path, env)
    a["patched"] = any(getattr(mod, n) is not f for n, f in stock.items())
    gate()
    a["exists_after"] = cache_path.exists()
    a["listing"] = _listing(cache_dir, cache_path.stem)

    # b) feature armed; the caches and sidecars of this launch; the gate keeps both
    b = out["b"] = {}
    rt1 = runtime()
    b["state"] = state(rt1)
    b["patched"] = sorted(n for n, f in stock.items() if getattr(mod, n) is not f)
    b["fingerprint"] = rt1.fingerprint.digest
    b["digest"] = tune()
    dsv41_flags.cache_keeping.write_sidecar(sidecar, rt1.fingerprint)  # what the context wrapper writes after tuning
    b["sidecar"] = _digest(sidecar)
    gate()
    b["digest_after"] = _digest(cache_path)
    b["sidecar_after"] = _digest(sidecar)
    b["listing"] = _listing(cache_dir, cache_path.stem)

    # c) a launch change that is not volatile: the caches are re-tuned, moved aside, not deleted
    c = out["c"] = {}
    rt1.uninstall()
    c["restored"] = all(getattr(mod, n) is f for n, f in stock.items())
    rt2 = runtime({"SGLANG_SOME_KNOB": "1"})
    c["state"] = state(rt2)
    c["fingerprint"] = rt2.fingerprint.digest
    c["digest_before"] = _digest(cache_path)
    gate()
    c["exists_after"] = cache_path.exists()
    c["sidecar_exists_after"] = sidecar.exists()
    c["stale"] = {name: _digest(cache_dir / name) for name in stale()}
    c["stale_sidecars"] = {p.name: _digest(p) for p in cache_dir.glob(f"{sidecar.name}.stale-*")}
    c["listing"] = _listing(cache_dir, cache_path.stem)

    # d) this launch tunes and saves; the next launch differs only in volatile keys: kept
    d = out["d"] = {}
    d["digest"] = tune()
    dsv41_flags.cache_keeping.write_sidecar(sidecar, rt2.fingerprint)
    d["sidecar"] = _digest(sidecar)
    rt2.uninstall()
    argv3 = [("30001" if t == "30000" else t) for t in ARGV]
    rt3 = runtime({"SGLANG_SOME_KNOB": "1", "SGLANG_RUN_ID": "20261129-000002"}, argv=argv3)
    d["state"] = state(rt3)
    d["fingerprint"] = rt3.fingerprint.digest
    gate()
    d["digest_after"] = _digest(cache_path)
    d["sidecar_after"] = _digest(sidecar)
    d["stale_count"] = len(stale())
    d["listing"] = _listing(cache_dir, cache_path.stem)

    # e) rank 1 lost its sidecar (killed before saving): the ranks disagree, so the gate must
    #    drop rank 0's good cache too; it is set aside (kept), never deleted
    e = out["e"] = {}
    if rank == 1:
        sidecar.unlink()
    e["digest_before"] = _digest(cache_path)
    gate()
    e["exists_after"] = cache_path.exists()
    e["stale"] = {name: _digest(cache_dir / name) for name in stale()}
    e["listing"] = _listing(cache_dir, cache_path.stem)
    rt3.uninstall()
    d["restored"] = all(getattr(mod, n) is f for n, f in stock.items())

    # f) a read-only cache directory (an image's pre-tuned caches) holding caches of another
    #    launch: root cannot make a directory read-only, so EROFS is injected at the os calls.
    #    The gate must not raise (the stock one would, unlinking); the caches stay in place,
    #    reported, and nothing is written there.
    import errno
    import os

    from structlog.testing import capture_logs

    f = out["f"] = {}
    f["digest"] = tune()
    dsv41_flags.cache_keeping.write_sidecar(sidecar, rt3.fingerprint)
    rt4 = runtime({"SGLANG_SOME_KNOB": "2"})
    before = _listing(cache_dir, cache_path.stem)
    real = {n: getattr(os, n) for n in ("replace", "rename", "unlink", "open")}

    def ro(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    def ro_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real["open"](path, flags, *a, **k)

    try:
        os.replace = os.rename = os.unlink = ro
        os.open = ro_open
        with capture_logs() as logs:
            try:
                gate()
                f["raised"] = None
            except Exception as exc:  # noqa: BLE001 - reported
                f["raised"] = repr(exc)
    finally:
        for n, fn in real.items():
            setattr(os, n, fn)
    f["events"] = [e["event"] for e in logs]
    f["digest_after"] = _digest(cache_path)
    f["listing_before"] = before
    f["listing_after"] = _listing(cache_dir, cache_path.stem)
    rt4.uninstall()
    return out
