"""One rank of the hang-free rank guard test, run as its own process by
test_rank_guard_sglang.py. Everything is sglang 0.5.23's own path, nothing stubbed:

1. ``load_plugins()``: sglang's loader runs the dsv41_flags entry point, which activates the
   framework (settings from ``DSV41_SETTINGS`` / ``DSV41_RANK_GUARD`` of this rank) and registers
   the guard as an AFTER hook on ``initialize_model_parallel`` in sglang's HookRegistry, which
   ``load_plugins()`` then applies to the real function;
2. ``publish(ServerArgs(model_path="dummy", device="cpu", tp_size=2), role="scheduler",
   ranks=SpawnRanks(world_rank=rank))`` + ``init_distributed_environment(backend="gloo")``;
3. the real ``initialize_model_parallel()``: on CPU it builds its groups because the platform is
   the out-of-tree platform ``gloo_cpu`` (a ``CpuSRTPlatform`` whose capabilities say
   ``supports_pynccl=False``) declared in sglang's platform entry-point group by the test's
   ``gloo_platform`` distribution; sglang's ``init_model_parallel_group`` reads that capability
   for out-of-tree platforms, so no PyNccl communicator is created. When it returns, the AFTER
   hook runs the guard.

Writes ``{"rank", "platform", "hooked", "returned" | "raised", "seconds"}`` (or ``"error"``) as
JSON to the result path, then leaves at once (``os._exit``: no teardown of the gloo world).
Usage: ``python _guard_rank.py RANK INIT_FILE RESULT_PATH``.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main(rank: int, init_file: str, out: str) -> None:
    result: dict = {"rank": rank}
    try:
        from sglang.srt.plugins import load_plugins

        load_plugins()
        from sglang.srt.distributed import parallel_state as ps
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import ServerArgs

        result["hooked"] = hasattr(ps.initialize_model_parallel, "__wrapped__")
        publish(ServerArgs(model_path="dummy", device="cpu", tp_size=2), role="scheduler",
                ranks=SpawnRanks(world_rank=rank))
        ps.init_distributed_environment(world_size=2, rank=rank, local_rank=rank,
                                        distributed_init_method=f"file://{init_file}",
                                        backend="gloo")
        start = time.monotonic()
        try:
            ps.initialize_model_parallel()
            result["returned"] = True
        except Exception as exc:  # RankMismatchError raised by the AFTER hook
            result["raised"] = f"{type(exc).__name__}: {exc}"
        result["seconds"] = round(time.monotonic() - start, 3)
        from sglang.srt.platforms import current_platform

        result["platform"] = type(current_platform).__name__
    except BaseException:
        result["error"] = traceback.format_exc()
    with open(out, "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
