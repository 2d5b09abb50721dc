"""Keep the FlashInfer autotune cache across boots under expert parallelism. Default OFF.

Ported from seeds/autotune_keep.py. The engine's entry gate (``_drop_diverged_autotune_cache``)
digests each rank's whole cache file and drops every cache when the digests differ. Under EP each
rank tunes its own MoE shapes, so the files can never agree: the cache is deleted on every boot
and the fused-MoE tactics are re-drawn from timing noise (sglang#40320, fix proposed in
sglang#40420).

Here the digest covers only the load decision, as in #40420, plus one guard: a sidecar with the
launch fingerprint (``dsv41_flags`` computes it once per launch; see README) written next to the
cache after tuning. A cache is kept only when its sidecar matches the current launch, so a config
change cannot leave one rank with a partial hit (a hit skips a profile, and a skipped profile on
one rank desynchronises the timing reduction). A cache that must be re-tuned is moved aside
(``<cache>.stale-<UTC time>-<pid>``, the latest ``keep_old`` copies kept), never deleted.
"""
import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from dsv41_flags import Feature, Option, read_sidecar, sidecar_path, write_sidecar
from dsv41_flags._fingerprint import diff, matches


def _stale_reason(cache_path: Path, configs, fingerprint) -> str | None:
    """Why the cache must be re-tuned, or None when it belongs to this launch."""
    if not isinstance(configs, dict):
        return "cache file unreadable or not a JSON object"
    side = read_sidecar(sidecar_path(cache_path))
    if side.legacy:
        return "sidecar written by the older adapter (seed autotune_keep.py): fingerprint unknown"
    if side.payload is None:
        return f"no sidecar for this cache ({side.error})"
    if not matches(side, fingerprint):
        changed = [f"{c['part']}:{c['key']}" for c in diff(side.payload, fingerprint.payload)]
        return "launch changed: " + (", ".join(changed) or "fingerprint differs")
    return None


def set_aside(cache_path: Path, keep: int, reason: str, log) -> Path | None:
    """Move ``cache_path`` (and its sidecar) to ``<name>.stale-<UTC time>.<ns>-<pid>``; keep the
    latest ``keep`` stale copies of this cache (by set-aside time), remove older ones.
    Returns the new path, or None when there is no cache."""
    if not cache_path.exists():
        return None
    ns = time.time_ns()  # names sort in set-aside order; never overwrite an earlier copy
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns / 1e9)) + f".{ns % 10**9:09d}-{os.getpid()}"
    target = cache_path.with_name(f"{cache_path.name}.stale-{stamp}")
    while target.exists():
        stamp += "+"
        target = cache_path.with_name(f"{cache_path.name}.stale-{stamp}")
    os.replace(cache_path, target)
    side = sidecar_path(cache_path)
    if side.exists():
        os.replace(side, side.with_name(f"{side.name}.stale-{stamp}"))
    copies = sorted(cache_path.parent.glob(f"{cache_path.name}.stale-*"))
    for old in copies[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
        sidecar = side.with_name(f"{side.name}.stale-{old.name.split('.stale-', 1)[1]}")
        sidecar.unlink(missing_ok=True)
    log.info("autotune_keep.set_aside", cache=str(cache_path), moved_to=str(target), reason=reason)
    return target


def install(module, ctx):
    """Patch the digest, the divergence gate and the autotune context of ``flashinfer_autotune``."""
    fingerprint, keep, log = ctx.fingerprint, ctx.options["keep_old"], ctx.log

    def make_digest(original):
        def _autotune_cache_digest(cache_path, env):
            cache_path = Path(cache_path)
            if not cache_path.is_file():
                return ""
            try:
                configs = json.loads(cache_path.read_text())
            except (OSError, ValueError):
                configs = None
            reason = _stale_reason(cache_path, configs, fingerprint)
            if reason:
                # a different launch re-tunes: an empty digest alone would still let the stock
                # code load the old file when every rank reports "" (they agree)
                set_aside(cache_path, keep, reason, log)
                return ""
            stamp = configs.get("_metadata")
            # the fingerprint itself differs between ranks (node rank, per-node env); only "same
            # launch as when this rank saved" enters the cross-rank digest (sglang#40420)
            payload = {"loadable": True, "stamp": stamp if isinstance(stamp, dict) else None, "env": env}
            return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

        return _autotune_cache_digest

    def make_drop(original):
        # the stock gate, with set_aside instead of unlink: every rank enters tuning with the same
        # cache or with none, and a cache that must go is kept as a stale copy
        def _drop_diverged_autotune_cache(cache_path, group, env):
            dist = module.torch.distributed
            digests = [""] * dist.get_world_size(group)
            dist.all_gather_object(digests, module._autotune_cache_digest(Path(cache_path), env), group=group)
            if len(set(digests)) > 1:
                set_aside(Path(cache_path), keep, "per-rank caches disagree (stock gate)", log)

        return _drop_diverged_autotune_cache

    def make_context(original):
        @contextlib.contextmanager
        def flashinfer_autotune_context(model_runner, *args, **kwargs):
            cache_path = Path(module.flashinfer_autotune_cache_path(model_runner))
            # sets a stale cache aside before the stock code can load it (also without a gate,
            # which runs only with more than one rank)
            module._autotune_cache_digest(cache_path, {})
            with original(model_runner, *args, **kwargs):
                # after the gate and the load: was a cache of this launch really there?
                reused = cache_path.is_file() and _stale_reason(cache_path, {}, fingerprint) is None
                yield
            try:
                if cache_path.is_file():
                    write_sidecar(sidecar_path(cache_path), fingerprint)
            except OSError as exc:
                log.warning("autotune_keep.sidecar_failed", cache=str(cache_path), error=str(exc))
            log.info("autotune_keep.reused" if reused else "autotune_keep.tuned", cache=str(cache_path))

        return flashinfer_autotune_context

    ctx.patch(module, "_autotune_cache_digest", make_digest)
    ctx.patch(module, "_drop_diverged_autotune_cache", make_drop)
    ctx.patch(module, "flashinfer_autotune_context", make_context)


FEATURE = Feature(
    name="autotune_keep",
    target="sglang.srt.model_executor.runner.flashinfer_autotune",
    install=install,
    summary="Keep per-rank FlashInfer autotune caches across boots of the same launch (EP)",
    requires=("_autotune_cache_digest(cache_path, env)", "_drop_diverged_autotune_cache(cache_path, group, env)",
              "flashinfer_autotune_context", "flashinfer_autotune_cache_path", "torch"),
    engine="sglang>=0.5.23,<0.6",
    # keeping or dropping a cache changes no tuned kernel (seed _VOLATILE)
    volatile=("DSV41_AUTOTUNE_KEEP",),
    options=(Option("keep_old", "int", 3, minimum=1, maximum=100, volatile=True,
                    help="stale cache copies kept per cache file when a launch change re-tunes"),),
    refs=("sglang#40320", "sglang#40420"),
)
