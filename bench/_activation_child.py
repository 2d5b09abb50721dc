"""Child side of benchmark 1. Only stdlib modules at the top: with ``spawn`` every child imports
this module (the target's module) before running ``child``, so nothing here may bias a figure.

The spawning parent itself is started as ``python -c`` (no ``__main__`` file), so a spawned child
imports nothing but this module before the measured part.
"""
import os
import sys
import time

#: what every sglang process imports anyway, before any plugin runs
ENGINE_BASE = ("asyncio", "inspect", "typing", "logging", "importlib.metadata")


def child(conn, activate: bool) -> None:
    """Import the engine base, then (``activate``) ``import dsv41_flags; activate()`` from the
    ``DSV41_SNAPSHOT`` the parent exported. Sends the perf_counter figures back on ``conn``."""
    sys.stderr = open(os.devnull, "w")  # flags.resolved is rendered as usual, then dropped
    t0 = time.perf_counter()
    import asyncio, importlib.metadata, inspect, logging, typing  # noqa: E401,F401
    t1 = time.perf_counter()
    info = {}
    if activate:
        import dsv41_flags

        t2 = time.perf_counter()
        rt = dsv41_flags.activate()
        t3 = time.perf_counter()
        info = {"from_snapshot": rt.from_snapshot, "armed": [f.name for f in rt.armed()],
                "states": {s.name: s.state for s in rt.states()}}
    else:
        t2 = t3 = time.perf_counter()
    conn.send({"base": t1 - t0, "import": t2 - t1, "activate": t3 - t2, "measured": t3 - t1, **info})
    conn.close()


def spawn_parent(reps: int) -> None:
    """Start ``2 * reps`` spawn children, with and without activation alternately (ABBA order),
    after one unmeasured warm-up pair. Prints ``{"on": [...], "off": [...]}`` as one JSON line;
    each entry is the child's figures plus ``wall`` (parent: ``start()`` to ``join()``)."""
    import json
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results: dict[str, list] = {"on": [], "off": []}

    def one(activate: bool) -> dict:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child, args=(send, activate))
        t0 = time.perf_counter()
        proc.start()
        send.close()
        msg = recv.recv()
        proc.join()
        msg["wall"] = time.perf_counter() - t0
        if proc.exitcode != 0:
            raise SystemExit(f"child exited {proc.exitcode}")
        return msg

    one(True), one(False)  # warm-up: page cache, .pyc files
    for i in range(reps):
        for activate in ((True, False) if i % 2 == 0 else (False, True)):
            results["on" if activate else "off"].append(one(activate))
    sys.stdout.write(json.dumps(results) + "\n")
