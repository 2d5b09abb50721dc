"""Child side of benchmark 1. Only stdlib modules at the top: with ``spawn`` every child imports
this module (the target's module) before running ``child``, so nothing here may bias a figure.

The spawning parent itself is started as ``python -c`` (no ``__main__`` file), so a spawned child
imports nothing but this module before the measured part.
"""
import importlib
import os
import sys
import time

#: what a real sglang scheduler process has imported before ``load_plugins()`` runs (DESIGN.md:
#: asyncio, inspect, logging, importlib.metadata, rich.console, attr, pygments; not rich.traceback
#: or rich.pretty, which structlog pulls in), plus ``hashlib``: the one other module a child
#: activation imports, which sglang's scheduler module has imported long before (torch and sglang
#: hash everywhere). tests/engine/test_bench_base.py imports ``sglang.srt.managers.scheduler`` in a
#: fresh interpreter and checks that every name here is imported there and that the floor's
#: libraries (structlog, wrapt) are not.
ENGINE_BASE = ("asyncio", "inspect", "typing", "logging", "importlib.metadata", "rich.console",
               "attr", "pygments", "hashlib")
#: the floor: the libraries a child activation must use (structlog, with what it pulls when rich
#: is installed, and wrapt), nothing of the framework
FLOOR = ("structlog", "wrapt")
MODES = ("on", "floor", "off")


def child(conn, mode: str) -> None:
    """Import the engine base, then: ``on``: ``import dsv41_flags; activate()`` from the
    ``DSV41_SNAPSHOT`` the parent exported; ``floor``: import FLOOR only; ``off``: nothing.
    Sends the perf_counter figures (and, for ``on``, the modules the activation imported) back
    on ``conn``."""
    sys.stderr = open(os.devnull, "w")  # flags.resolved is rendered as usual, then dropped
    t0 = time.perf_counter()
    for name in ENGINE_BASE:
        importlib.import_module(name)
    t1 = time.perf_counter()
    before = set(sys.modules)
    info = {}
    if mode == "on":
        import dsv41_flags

        t2 = time.perf_counter()
        rt = dsv41_flags.activate()
        t3 = time.perf_counter()
        info = {"from_snapshot": rt.from_snapshot, "armed": [f.name for f in rt.armed()],
                "states": {s.name: s.state for s in rt.states()},
                "new_modules": sorted(set(sys.modules) - before)}
    elif mode == "floor":
        for name in FLOOR:
            importlib.import_module(name)
        t2 = t3 = time.perf_counter()
        info = {"new_modules": sorted(set(sys.modules) - before)}
    else:
        t2 = t3 = time.perf_counter()
    conn.send({"base": t1 - t0, "import": t2 - t1, "activate": t3 - t2, "measured": t3 - t1, **info})
    conn.close()


def spawn_parent(reps: int) -> None:
    """Start ``3 * reps`` spawn children (activating, floor, nothing) in rotating order, after one
    unmeasured warm-up round. Prints ``{"on": [...], "floor": [...], "off": [...]}`` as one JSON
    line; each entry is the child's figures plus ``wall`` (parent: ``start()`` to ``join()``)."""
    import json
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results: dict[str, list] = {m: [] for m in MODES}

    def one(mode: str) -> dict:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=child, args=(send, mode))
        t0 = time.perf_counter()
        proc.start()
        send.close()
        msg = recv.recv()
        proc.join()
        msg["wall"] = time.perf_counter() - t0
        if proc.exitcode != 0:
            raise SystemExit(f"child exited {proc.exitcode}")
        return msg

    for mode in MODES:  # warm-up: page cache, .pyc files
        one(mode)
    for i in range(reps):
        order = MODES[i % 3:] + MODES[:i % 3]
        for mode in (order if i % 2 == 0 else tuple(reversed(order))):
            results[mode].append(one(mode))
    sys.stdout.write(json.dumps(results) + "\n")
