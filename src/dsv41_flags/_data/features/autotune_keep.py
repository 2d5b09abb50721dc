"""Keep the FlashInfer autotune cache across boots under expert parallelism. Default OFF.

The engine's entry gate (``_drop_diverged_autotune_cache``) digests each rank's whole cache file
and drops every cache when the digests differ. Under EP each rank tunes its own MoE shapes, so the
files can never agree: the cache is deleted on every boot and the fused-MoE tactics are re-drawn
from timing noise (sglang#40320, fix proposed in sglang#40420).

Here the digest covers only the load decision, as in #40420, plus one guard: a sidecar with the
launch fingerprint (``dsv41_flags`` computes it once per launch; see docs/fingerprint.md) written next to the
cache after tuning. A cache is kept only when its sidecar matches the current launch, so a config
change cannot leave one rank with a partial hit (a hit skips a profile, and a skipped profile on
one rank desynchronises the timing reduction). A cache that must be re-tuned is moved aside
(``<cache>.stale-<UTC time>-<pid>``, the latest ``keep_old`` copies kept), never deleted.

Fleet safety: engines sharing a cache directory decide and move under an advisory lock
(``<cache>.lock``, never held across a collective) and tolerate a cache vanishing under them; a
read-only directory is used read-only (a matching cache is kept, a stale one is reported with
``autotune_keep.read_only`` and left to the engine's own rules); no write or move follows a
symbolic link; temporaries of crashed writes beside the cache are removed at boot.
"""
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import dsv41_flags.cache_keeping as flags
from dsv41_flags import Feature, Option

# The sidecar helpers are reached as ``flags.<name>`` when install runs, not imported here: a child
# process re-reads this file for its declaration at every boot, and the framework loads a public
# name's module on first use, so the sidecar module is loaded only where the target is imported.

#: errors of a directory this process may read but not change (image-baked caches, read-only
#: mounts, another user's directory): the cache is used read-only
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
#: temporaries of FlashInfer's AutoTuner.save_configs (mkstemp prefix ".autotuner_", suffix ".tmp")
ENGINE_TEMPS = (".autotuner_*.tmp",)
LOCK_SUFFIX = ".lock"
LOCK_TIMEOUT_S = 30.0
#: largest cache file read to decide (FlashInfer's are KiB to a few MiB): a bigger one is re-tuned
CACHE_MAX_BYTES = 256 << 20


def read_cache(cache_path: Path):
    """The cache's JSON content, or None when it is unreadable or not JSON (a FIFO, a device, a
    file over ``CACHE_MAX_BYTES``, bad UTF-8, JSON nested too deeply). Never blocks (opened
    non-blocking, ``fstat``-checked by ``cache_keeping.read_json``). Raises FileNotFoundError (no
    cache) and IsADirectoryError."""
    try:
        return flags.read_json(cache_path, CACHE_MAX_BYTES)
    except ValueError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no cache", str(cache_path)) from None
        if os.path.isdir(cache_path):
            raise IsADirectoryError(errno.EISDIR, "a directory", str(cache_path)) from None
        return None


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _stale_reason(cache_path: Path, configs, fingerprint) -> str | None:
    """Why the cache must be re-tuned, or None when it belongs to this launch."""
    if not isinstance(configs, dict):
        return "cache file unreadable or not a JSON object"
    side = flags.read_sidecar(flags.sidecar_path(cache_path))
    if side.payload is None:
        return f"no sidecar for this cache ({side.error})"
    if not flags.matches(side, fingerprint):
        changed = [f"{c['part']}:{c['key']}" for c in flags.diff(side.payload, fingerprint.payload)]
        return "launch changed: " + (", ".join(changed) or "fingerprint differs")
    return None


@contextlib.contextmanager
def cache_lock(cache_path: Path, log):
    """Advisory lock (``fcntl.flock``) on ``<cache>.lock`` beside the cache, shared by every engine
    using this cache path. Yields True when held. Never held across a collective (the ranks of one
    engine never wait on each other's lock). Opened with ``O_NOFOLLOW`` (a symlinked lock file is
    not used); created when the directory is writable, else opened read-only (flock works on
    it), else no lock (a read-only directory where nothing is moved needs none). Waits at most
    ``LOCK_TIMEOUT_S``, then goes on unlocked with ``autotune_keep.lock_timeout``: never a hang."""
    lock = cache_path.with_name(cache_path.name + LOCK_SUFFIX)
    fd = None
    for mode in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(lock, mode | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            break
        except OSError:
            continue
    if fd is None:
        yield False
        return
    try:
        locked = False
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log.warning("autotune_keep.lock_timeout", cache=str(cache_path), lock=str(lock),
                                waited_s=LOCK_TIMEOUT_S)
                    break
                time.sleep(0.005)
            except OSError:
                break
        try:
            yield locked
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _stamp() -> str:
    ns = time.time_ns()  # names sort in set-aside order; never overwrite an earlier copy
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns / 1e9)) + f".{ns % 10**9:09d}-{os.getpid()}"


def _move_aside(cache_path: Path, keep: int, reason: str, log) -> Path | None:
    """``set_aside`` without the lock (the caller holds it)."""
    try:
        os.lstat(cache_path)
    except FileNotFoundError:
        return None
    stamp = _stamp()
    target = cache_path.with_name(f"{cache_path.name}.stale-{stamp}")
    while os.path.lexists(target):
        stamp += "+"
        target = cache_path.with_name(f"{cache_path.name}.stale-{stamp}")
    try:
        os.replace(cache_path, target)  # rename(2): moves a link itself, never what it points to
    except FileNotFoundError:
        return None  # another engine sharing the directory moved it first: nothing lost
    except OSError as exc:
        event = "autotune_keep.read_only" if exc.errno in READ_ONLY else "autotune_keep.set_aside_failed"
        log.warning(event, cache=str(cache_path), reason=reason, error=f"{exc.strerror or exc}",
                    action="cache left in place, not written to; the engine's own rules decide "
                           "whether it is loaded, as without this feature")
        return None
    side = flags.sidecar_path(cache_path)
    try:
        os.replace(side, side.with_name(f"{side.name}.stale-{stamp}"))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("autotune_keep.set_aside_failed", cache=str(side), reason=reason,
                    error=f"{exc.strerror or exc}", action="sidecar left in place")
    if keep > 0:
        copies = sorted(cache_path.parent.glob(f"{cache_path.name}.stale-*"))
        for old in copies[:-keep]:
            for path in (old, side.with_name(f"{side.name}.stale-{old.name.split('.stale-', 1)[1]}")):
                try:
                    os.unlink(path)  # unlink removes a link itself
                except OSError:
                    pass
    log.info("autotune_keep.set_aside", cache=str(cache_path), moved_to=str(target), reason=reason)
    return target


def set_aside(cache_path: Path, keep: int, reason: str, log) -> Path | None:
    """Move ``cache_path`` (and its sidecar) to ``<name>.stale-<UTC time>.<ns>-<pid>``; keep the
    latest ``keep`` stale copies of this cache (by set-aside time), remove older ones. Under the
    cache's lock. Returns the new path, or None when there is no cache (another engine moved it
    first: ENOENT is not an error) or it cannot be moved (read-only directory: reported with
    ``autotune_keep.read_only``, the cache stays in place). Never raises OSError."""
    cache_path = Path(cache_path)
    with cache_lock(cache_path, log):
        return _move_aside(cache_path, keep, reason, log)


def _clean_temps(cache_path: Path) -> None:
    flags.clean_stale_temps(cache_path.parent, flags.sidecar_path(cache_path).name, patterns=ENGINE_TEMPS)


def boot_digest(cache_path: Path, env, fingerprint, keep: int, log, stock) -> str:
    """The patched ``_autotune_cache_digest``: decide, under the cache's lock, whether this rank
    keeps its cache. A cache of another launch is set aside and "" returned (nothing to load);
    one of this launch gives a digest of the load decision only (sglang#40420), equal on every
    rank of the launch. A stale cache that cannot be moved (read-only directory) gets the stock
    digest (``stock(cache_path, env)``) when it is a JSON object: the engine's own gate decides,
    as without the feature; an unreadable one (not JSON, not a regular file) gets "", what the
    stock digest answers for it, without handing it to the stock code.
    Leftover temporaries of crashed writes beside the cache are removed first. Never raises
    OSError (a cache vanishing under a concurrent engine counts as no cache), never blocks on a
    cache or sidecar that is a FIFO or device (read non-blocking, ``cache_keeping.read_json``); the stock
    digest runs outside the lock."""
    cache_path = Path(cache_path)
    with cache_lock(cache_path, log):
        _clean_temps(cache_path)
        try:
            configs = read_cache(cache_path)
        except (FileNotFoundError, IsADirectoryError):
            return ""
        reason = _stale_reason(cache_path, configs, fingerprint)
        if reason:
            # a different launch re-tunes: an empty digest alone would still let the stock
            # code load the old file when every rank reports "" (they agree)
            moved = _move_aside(cache_path, keep, reason, log)
            if moved is None and os.path.lexists(cache_path):
                stuck = True  # cannot be moved (read-only directory): decided below, unlocked
            else:
                return ""
        else:
            stuck = False
    if stuck:
        if isinstance(configs, dict):  # a cache of another launch: the engine's own rules
            return stock(cache_path, env)  # outside the lock: it reads the whole file
        if not _is_regular(cache_path):
            log.warning("autotune_keep.unreadable", cache=str(cache_path),
                        reason="not a regular file and cannot be moved aside",
                        action="treated as no cache")
        return ""  # unreadable or not a JSON object: what the stock digest answers for it
    stamp = configs.get("_metadata")
    # the fingerprint itself differs between ranks (node rank, per-node env); only "same
    # launch as when this rank saved" enters the cross-rank digest (sglang#40420)
    payload = {"loadable": True, "stamp": stamp if isinstance(stamp, dict) else None, "env": env}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def before_save(cache_path: Path, fingerprint, log) -> bool:
    """Before the engine saves this launch's tactics over the cache: drop a sidecar of another
    launch (written by an engine sharing the directory since this boot's decision), so that no
    engine pairs the cache being saved with a fingerprint it does not belong to. A missing
    sidecar only makes a concurrent boot set the cache aside (kept). Under the cache's lock;
    returns True when a sidecar was dropped; never raises (a read-only directory keeps it)."""
    cache_path = Path(cache_path)
    side = flags.sidecar_path(cache_path)
    with cache_lock(cache_path, log):
        if not os.path.lexists(side) or flags.matches(flags.read_sidecar(side), fingerprint):
            return False
        try:
            os.unlink(side)  # unlink removes a link itself, never its target
        except OSError:
            return False
    log.info("autotune_keep.sidecar_dropped", cache=str(cache_path), sidecar=str(side),
             reason="written by another launch while this one tuned")
    return True


def after_tuning(cache_path: Path, fingerprint, log) -> bool:
    """Write the sidecar of the cache this launch saved, under the cache's lock. Returns True when
    written. A read-only directory (``autotune_keep.read_only``), a symlinked sidecar
    (``autotune_keep.sidecar_refused``, never written through) or another write error
    (``autotune_keep.sidecar_failed``) is reported, never raised."""
    cache_path = Path(cache_path)
    side = flags.sidecar_path(cache_path)
    with cache_lock(cache_path, log):
        if not cache_path.is_file():
            return False
        try:
            flags.write_sidecar(side, fingerprint)
            return True
        except flags.SymlinkRefused as exc:
            log.warning("autotune_keep.sidecar_refused", cache=str(cache_path), sidecar=str(side),
                        error=f"{exc.strerror}", action="not written through the link; the next "
                                                        "boot re-tunes this cache")
        except OSError as exc:
            event = "autotune_keep.read_only" if exc.errno in READ_ONLY else "autotune_keep.sidecar_failed"
            log.warning(event, cache=str(cache_path), sidecar=str(side), error=f"{exc.strerror or exc}",
                        action="sidecar not written")
    return False


def install(module, ctx):
    """Patch the digest, the divergence gate and the autotune context of ``flashinfer_autotune``."""
    fingerprint, keep, log = ctx.fingerprint, ctx.options["keep_old"], ctx.log

    def unlink(cache_path, *_):  # what the stock gate does with diverged caches
        with contextlib.suppress(OSError):
            os.unlink(cache_path)

    safe_set_aside = ctx.guard(set_aside, unlink, step="set_aside")
    safe_reused = ctx.guard(lambda p: p.is_file() and _stale_reason(p, {}, fingerprint) is None,
                            step="reused")
    safe_before_save = ctx.guard(before_save, step="before_save")
    safe_after_tuning = ctx.guard(after_tuning, step="after_tuning")

    def make_digest(original):
        def _autotune_cache_digest(cache_path, env):
            return boot_digest(Path(cache_path), env, fingerprint, keep, log, original)

        return _autotune_cache_digest

    def make_drop(original):
        # the stock gate, with set_aside instead of unlink: every rank enters tuning with the same
        # cache or with none, and a cache that must go is kept as a stale copy
        def _drop_diverged_autotune_cache(cache_path, group, env):
            dist = module.torch.distributed
            digests = [""] * dist.get_world_size(group)
            dist.all_gather_object(digests, module._autotune_cache_digest(Path(cache_path), env), group=group)
            if len(set(digests)) > 1:
                safe_set_aside(Path(cache_path), keep, "per-rank caches disagree (stock gate)", log)

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
                reused = bool(safe_reused(cache_path))
                yield
                safe_before_save(cache_path, fingerprint, log)  # the engine saves when this block exits
            safe_after_tuning(cache_path, fingerprint, log)
            log.info("autotune_keep.reused" if reused else "autotune_keep.tuned", cache=str(cache_path))

        return flashinfer_autotune_context

    # guard=True: a fault of this feature's code (a file it cannot make sense of, a filesystem
    # error) is reported as autotune_keep.error and the engine's original digest runs instead
    ctx.patch(module, "_autotune_cache_digest", make_digest, guard=True)
    # the gate and the context run collectives / the engine's own code: guarded step by step
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
    # keeping or dropping a cache changes no tuned kernel
    volatile=("DSV41_AUTOTUNE_KEEP",),
    options=(Option("keep_old", "int", 3, minimum=1, maximum=100, volatile=True,
                    help="stale cache copies kept per cache file when a launch change re-tunes"),),
    refs=("sglang#40320", "sglang#40420"),
)
