"""Benchmark 7: the real server, with the framework and one live feature against the same launch
without the plugin.

``python -m sglang.launch_server --tp 1`` on the CPU (the server tier's launch: out-of-tree CPU
platform, tiny Llama config, ``--load-format dummy``; its helpers are imported from
``tests/server/_server.py``, not copied), in two variants:
  - framework: the package's plugin loads in every process, ``DSV41_FOLDED_FENCE=1`` arms the
    live feature folded_fence (its target is not imported by this launch: it stays armed, its
    post-import hook in place);
  - baseline: the same launch with the plugin excluded by ``SGLANG_PLUGINS=none_such`` (sglang's
    allowlist of plugin names; the name matches nothing, so no plugin loads).
Each pair boots both variants one after the other (the order alternates from pair to pair, so
the second boot, which runs beside the first, idle, server, is each variant's equally often).
Time to healthy: from ``Popen`` to the first ``GET /health`` answering 200 (polled every 0.1 s).
Then ``/generate`` throughput under 4 concurrent clients: short windows on each server in turn
(A B B A ...), each window a fixed number of requests after a warm-up; requests per second.
Every wait is bounded; each launch's process group is stopped at the end of its pair.

Goals: boot ratio (framework / baseline) at most 1.01; throughput ratio at least 0.99.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, main, med, row, spread  # noqa: E402

#: where the server tier's helpers live (``BENCH_SERVER_TIER`` overrides: a worktree of its branch)
SERVER_TIER = Path(os.environ.get("BENCH_SERVER_TIER") or REPO / "tests" / "server")
BOOT_GOAL, THROUGHPUT_GOAL = 1.01, 0.99
CLIENTS = 4
HEALTH_POLL_S = 0.1
WINDOW_TIMEOUT_S = 300.0


def server_tier():
    """The server tier's helper module (``_server``), or a clear error when it is not there."""
    if not (SERVER_TIER / "_server.py").is_file():
        raise RuntimeError(f"no server tier helpers at {SERVER_TIER / '_server.py'} (set "
                           f"BENCH_SERVER_TIER to a tests/server directory that has them)")
    sys.path.insert(0, str(SERVER_TIER))
    import _server  # noqa: PLC0415  (the tier's module, found on the path just added)

    return _server


def wait_healthy(srv, launch, started: float, timeout: float) -> float:
    """Seconds from ``started`` (``time.monotonic()`` at the launch's start) to ``GET /health`` answering 200 (finer than the tier's
    1 s poll); raises with the log's tail when the launch exits first or ``timeout`` passes."""
    deadline = started + timeout
    while time.monotonic() < deadline:
        if not launch.alive():
            raise RuntimeError(f"{launch.name}: exited {launch.proc.returncode} before serving\n"
                               f"{launch.tail()}")
        try:
            status, _ = srv.http("GET", launch.url + "/health", timeout=5)
        except OSError:
            status = None
        if status == 200:
            return time.monotonic() - started
        time.sleep(HEALTH_POLL_S)
    raise RuntimeError(f"{launch.name}: /health not 200 within {timeout:.0f} s\n{launch.tail()}")


def group_cpu_s(srv, pgid: int) -> float:
    """User + system CPU seconds of the running processes of group ``pgid`` (from /proc; the
    children that already exited are not counted): a counter a loaded machine does not stretch."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in srv.group_members(pgid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14, 15 of stat)
    return total / tick


def window(srv, url: str, requests_per_client: int) -> float:
    """Requests per second of ``CLIENTS`` threads each posting ``requests_per_client`` /generate
    requests back to back; raises when one fails or the window outlasts WINDOW_TIMEOUT_S."""
    errors: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(requests_per_client):
            try:
                status, body = srv.http("POST", url + "/generate", srv.GENERATE_BODY, timeout=120)
            except OSError as exc:
                status, body = type(exc).__name__, str(exc)
            if status != 200:
                with lock:
                    errors.append(f"{status}: {body[:200]}")
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, WINDOW_TIMEOUT_S - (time.perf_counter() - t0)))
    elapsed = time.perf_counter() - t0
    if errors or any(t.is_alive() for t in threads):
        raise RuntimeError(f"/generate window on {url} failed: {errors[:3] or 'timed out'}")
    return CLIENTS * requests_per_client / elapsed


def run(quick: bool = False) -> dict:
    pairs, windows, per_client = (1, 2, 4) if quick else (3, 4, 8)
    srv = server_tier()
    boot_timeout = float(os.environ.get("SERVER_TIER_BOOT_TIMEOUT") or 600.0)
    variants = {
        "framework": {"DSV41_FOLDED_FENCE": "1"},
        "baseline": {"SGLANG_PLUGINS": "none_such"},
    }
    boots: dict[str, list[float]] = {v: [] for v in variants}
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    boot_ratios, rate_ratios, states = [], [], {}
    with tempfile.TemporaryDirectory(prefix="dsv41-bench-server-") as tmp:
        kit = srv.Kit(Path(tmp) / "kit")
        # unmeasured warm-up launch: page cache, the session's inductor cache
        warm = srv.Launch.server(kit, "warmup", Path(tmp) / "warmup", tp=1,
                                 env_extra=variants["baseline"], pythonpath=(REPO / "src",))
        try:
            warm.start()
            wait_healthy(srv, warm, time.monotonic(), boot_timeout)
            window(srv, warm.url, 2)
        finally:
            warm.stop()
        for p in range(pairs):
            order = list(variants) if p % 2 == 0 else list(variants)[::-1]
            launches = {}
            try:
                pair_boot = {}
                for name in order:
                    launch = srv.Launch.server(kit, f"{name}{p}", Path(tmp) / f"pair{p}", tp=1,
                                               env_extra=variants[name],
                                               pythonpath=(REPO / "src",))
                    launches[name] = launch
                    t0 = time.monotonic()
                    launch.start()
                    pair_boot[name] = wait_healthy(srv, launch, t0, boot_timeout)
                    boots[name].append(pair_boot[name])
                    cpus[name].append(group_cpu_s(srv, launch.proc.pid))
                boot_ratios.append(pair_boot["framework"] / pair_boot["baseline"])
                for name, launch in launches.items():
                    window(srv, launch.url, 2)  # warm-up requests
                pair_rates: dict[str, list[float]] = {v: [] for v in variants}
                for w in range(windows):   # A B B A ...
                    for name in (order if w % 2 == 0 else order[::-1]):
                        pair_rates[name].append(window(srv, launches[name].url, per_client))
                for name in variants:
                    rates[name].extend(pair_rates[name])
                rate_ratios.append(med(pair_rates["framework"]) / med(pair_rates["baseline"]))
                fw = launches["framework"]
                resolved = [e for e in fw.events("flags.resolved")]
                states = {e.get("role", "?"): e.get("armed") for e in resolved}
                base_events = launches["baseline"].events("flags.resolved")
                if base_events:
                    raise RuntimeError(f"baseline launch activated the framework: {base_events[:1]}")
                if not resolved:
                    raise RuntimeError(f"framework launch printed no flags.resolved\n{fw.tail()}")
            finally:
                for launch in launches.values():
                    launch.stop()
    boot_fw, boot_base = med(boots["framework"]), med(boots["baseline"])
    rate_fw, rate_base = med(rates["framework"]), med(rates["baseline"])
    boot_ratio, rate_ratio = med(boot_ratios), med(rate_ratios)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = [
        row("7", "server --tp 1: time to healthy, framework + live folded_fence armed",
            boot_fw * 1e3, "ms", "same launch, plugin excluded (SGLANG_PLUGINS=none_such)",
            boot_base * 1e3, ratio=boot_ratio, goal=f"ratio <= {BOOT_GOAL}",
            met=boot_ratio <= BOOT_GOAL, n=pairs,
            note=f"median of {pairs} paired ratios, spread {spread(boot_ratios, 1, 3)}; boots "
                 f"{spread(boots['framework'], 1, 1)} vs {spread(boots['baseline'], 1, 1)} s; "
                 f"load average at the end {load}; armed per role {states}"),
        row("7", "server --tp 1: CPU time of the launch's processes at healthy, framework",
            med(cpus["framework"]) * 1e3, "ms", "same launch, plugin excluded",
            med(cpus["baseline"]) * 1e3, n=pairs,
            note=f"user + system of the launcher, scheduler and detokenizer (/proc) when /health "
                 f"first answered: a counter the machine's load does not stretch; per pair "
                 f"{[round(x, 1) for x in cpus['framework']]} vs "
                 f"{[round(x, 1) for x in cpus['baseline']]} s"),
        row("7", f"server --tp 1: /generate throughput, {CLIENTS} clients, framework",
            rate_fw, "req/s", "same launch, plugin excluded", rate_base, ratio=rate_ratio,
            goal=f"ratio >= {THROUGHPUT_GOAL}", met=rate_ratio >= THROUGHPUT_GOAL, n=pairs * windows,
            note=f"median of {pairs} per-pair ratios (each the ratio of medians of {windows} "
                 f"alternating windows of {CLIENTS}x{per_client} requests), spread "
                 f"{spread(rate_ratios, 1, 3)}; windows {spread(rates['framework'], 1, 2)} vs "
                 f"{spread(rates['baseline'], 1, 2)} req/s"),
    ]
    details = {"boot_s": {v: [round(x, 2) for x in xs] for v, xs in boots.items()},
               "cpu_s_at_healthy": {v: [round(x, 2) for x in xs] for v, xs in cpus.items()},
               "boot_ratio_per_pair": {"framework/baseline": [round(x, 3) for x in boot_ratios]},
               "throughput_req_per_s": {v: [round(x, 2) for x in xs] for v, xs in rates.items()},
               "throughput_ratio_per_pair": {"framework/baseline": [round(x, 3) for x in rate_ratios]}}
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    main(run)
