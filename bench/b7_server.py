"""Benchmark 7: the real server with the framework against the same launch without the plugin,
and where each process's boot seconds go.

``python -m sglang.launch_server --tp 2`` on the CPU (the server tier's launch: out-of-tree CPU
platform, tiny Llama config, ``--load-format dummy``, the tier's settings file with both shipped
features off; its helpers are imported from ``tests/server/_server.py``, not copied;
``BENCH_SERVER_TP`` sets another tp, ``BENCH_SERVER_ENV`` adds ``NAME=VALUE,...`` to the
framework variant, e.g. ``DSV41_FOLDED_FENCE=1``), in two variants:
  - framework: the package's plugin loads in every process (sglang's ``load_plugins()``);
  - baseline: the same launch with the plugin excluded by ``SGLANG_PLUGINS=none_such`` (sglang
    0.5.23 ``load_plugins_by_group``: a non-empty ``SGLANG_PLUGINS`` is an allowlist of entry-point
    names, and this one matches none, so no general plugin loads; an empty value would load all.
    The platform plugin, selected by ``SGLANG_PLATFORM``, loads in both).
Each pair boots both variants one after the other (the order alternates from pair to pair, so
the second boot, which runs beside the first, idle, server, is each variant's equally often).
Time to healthy: from ``Popen`` to the first ``GET /health`` answering 200 (polled every 0.1 s).
Per process (launcher/HTTP, each scheduler, the detokenizer), from ``/proc`` and what the launch
prints, sampled every 0.1 s from ``Popen`` to healthy (``Watch``): its start (``/proc/PID/stat``
start time), its CPU time, and its time from start to *ready*: the sample at which its CPU
counter reached the value it had when the launcher printed sglang's ready line ("The server is
fired up and ready to roll!"; after it, ``/health`` runs a one-token generation in every
scheduler, which is not boot), for the launcher the arrival of that line.
Then ``/generate`` throughput under 4 concurrent clients: short windows on each server in turn
(A B B A ...), each window a fixed number of requests after a warm-up; requests per second.
Every wait is bounded; each launch's process group is stopped at the end of its pair.
``--quick``: one pair, no warm-up launch, 2 windows of 4x4 requests (a smoke run of the code).

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
#: sglang 0.5.23's launcher line once it serves (``http_server._wait_and_warmup``)
READY_LINE = "The server is fired up and ready to roll"
TICK = os.sysconf("SC_CLK_TCK")


def boot_clock() -> float:
    """Seconds since the machine booted: the clock of ``/proc/PID/stat``'s start time."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def proc_stat(pid: int) -> tuple[float, float] | None:
    """``(start, cpu)`` of process ``pid`` from ``/proc/PID/stat``: its start time (seconds on
    ``boot_clock``) and its user + system CPU seconds; None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()   # fields from 3 (state) on
    if fields[0] == "Z":
        return None
    return int(fields[19]) / TICK, (int(fields[11]) + int(fields[12])) / TICK


def role_of(pid: int, leader: int) -> str | None:
    """The role of a process of the launch: ``launcher`` (the group leader: sglang's HTTP
    process), else read from its command line, which sglang sets with ``setproctitle``
    (``sglang::scheduler_TP0`` -> ``scheduler TP0``, ``sglang::detokenizer`` -> ``detokenizer``);
    ``spawned`` for a multiprocessing child not named yet; None for any other process (the
    resource tracker, a compiler the inductor starts, ...), which is not one of the launch's."""
    if pid == leader:
        return "launcher"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "spawned"
    if cmd.startswith("sglang::"):
        return cmd[len("sglang::"):].strip().replace("_", " ")
    if "multiprocessing.spawn" in cmd or "multiprocessing-fork" in cmd:
        return "spawned"
    return None


class Watch:
    """Samples one launch every ``HEALTH_POLL_S`` in a daemon thread, from its start until
    ``stop()``: every process of its group (``/proc``: start time, role, CPU seconds per sample)
    and the lines it printed (its stdout and stderr files), each stamped with the time it was
    first read. Times are seconds since ``started`` (``boot_clock()`` just before ``Popen``)."""

    def __init__(self, srv, launch, started: float):
        self.srv, self.launch, self.started = srv, launch, started
        self.procs: dict[int, dict] = {}     # pid -> {"role", "start", "cpu": [(t, s), ...]}
        self.ready_line_at: float | None = None
        self._offsets = {p: 0 for p in (launch.stdout_path, launch.stderr_path)}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Watch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(HEALTH_POLL_S)

    def sample(self) -> None:
        now = boot_clock() - self.started
        leader = self.launch.proc.pid
        for pid in self.srv.group_members(leader):
            stat = proc_stat(pid)
            if stat is None:
                continue
            rec = self.procs.setdefault(pid, {"role": "spawned", "start": stat[0] - self.started,
                                              "cpu": []})
            if rec["role"] == "spawned":
                rec["role"] = role_of(pid, leader)
            rec["cpu"].append((now, stat[1]))
        for path, offset in self._offsets.items():   # lines printed since the last sample
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            if self.ready_line_at is None and READY_LINE.encode() in chunk[:end]:
                self.ready_line_at = now

    def processes(self, healthy_s: float) -> dict[str, dict]:
        """Per role (``launcher``, ``scheduler TP0``, ..., ``detokenizer``): ``start_s`` (since
        ``Popen``), ``ready_s`` (from its start to ready: see the module docstring), ``cpu_s``
        (CPU seconds at ready). Roles seen twice get ``#2``; processes that are not the launch's
        (``role_of`` None) or were never named are left out."""
        mark = self.ready_line_at if self.ready_line_at is not None else healthy_s
        out: dict[str, dict] = {}
        for pid, rec in sorted(self.procs.items(), key=lambda kv: kv[1]["start"]):
            if rec["role"] in (None, "spawned") or not rec["cpu"]:
                continue
            upto = [(t, c) for t, c in rec["cpu"] if t <= mark] or rec["cpu"][:1]
            cpu = upto[-1][1]
            ready = mark if pid == self.launch.proc.pid else next(t for t, c in upto if c >= cpu)
            name = rec["role"] if rec["role"] not in out else f"{rec['role']} #2"
            out[name] = {"start_s": rec["start"], "ready_s": ready - rec["start"], "cpu_s": cpu}
        return out


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
    return sum(stat[1] for stat in map(proc_stat, srv.group_members(pgid)) if stat is not None)


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


def extra_env(text: str) -> dict[str, str]:
    """``NAME=VALUE,NAME=VALUE`` (``BENCH_SERVER_ENV``) as a dict; raises ValueError naming the
    item that has no ``=``."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"BENCH_SERVER_ENV={text!r}: {item!r} is not NAME=VALUE")
        out[name] = value
    return out


def boot(srv, kit, name: str, workdir: Path, tp: int, env: dict, timeout: float):
    """Start one launch and wait until it is healthy, watching its processes. Returns
    ``(launch, seconds to healthy, per-role processes (Watch.processes), CPU seconds of the
    group at healthy)``; the caller stops the launch (a launch that fails to boot is stopped
    here, and the error raised)."""
    launch = srv.Launch.server(kit, name, workdir, tp=tp, env_extra=env, pythonpath=(REPO / "src",))
    started, t0 = boot_clock(), time.monotonic()
    launch.start()
    watch = Watch(srv, launch, started).start()
    try:
        healthy = wait_healthy(srv, launch, t0, timeout)
    except BaseException:
        launch.stop()
        raise
    finally:
        watch.stop()
    watch.sample()
    return launch, healthy, watch.processes(healthy), group_cpu_s(srv, launch.proc.pid)


def run(quick: bool = False) -> dict:
    pairs, windows, per_client = (1, 2, 4) if quick else (3, 4, 8)
    srv = server_tier()
    tp = int(os.environ.get("BENCH_SERVER_TP") or 2)
    boot_timeout = float(os.environ.get("SERVER_TIER_BOOT_TIMEOUT") or 600.0)
    variants = {
        "framework": extra_env(os.environ.get("BENCH_SERVER_ENV", "")),
        "baseline": {"SGLANG_PLUGINS": "none_such"},
    }
    boots: dict[str, list[float]] = {v: [] for v in variants}
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    #: variant -> role -> per pair {"start_s", "ready_s", "cpu_s"}
    per_role: dict[str, dict[str, list[dict]]] = {v: {} for v in variants}
    boot_ratios, rate_ratios, states = [], [], {}
    with tempfile.TemporaryDirectory(prefix="dsv41-bench-server-") as tmp:
        kit = srv.Kit(Path(tmp) / "kit")
        if not quick:  # unmeasured warm-up launch: page cache, the session's inductor cache
            warm, *_ = boot(srv, kit, "warmup", Path(tmp) / "warmup", tp, variants["baseline"],
                            boot_timeout)
            try:
                window(srv, warm.url, 2)
            finally:
                warm.stop()
        for p in range(pairs):
            order = list(variants) if p % 2 == 0 else list(variants)[::-1]
            launches = {}
            try:
                pair_boot = {}
                for name in order:
                    launch, pair_boot[name], procs, cpu = boot(
                        srv, kit, f"{name}{p}", Path(tmp) / f"pair{p}", tp, variants[name],
                        boot_timeout)
                    launches[name] = launch
                    boots[name].append(pair_boot[name])
                    cpus[name].append(cpu)
                    for role, rec in procs.items():
                        per_role[name].setdefault(role, []).append(rec)
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
                states = {e.get("role", "?") + (f" tp{e['tp_rank']}" if "tp_rank" in e else ""):
                          e.get("armed") for e in resolved}
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
    fw_label = ("framework" + (" + " + ", ".join(f"{k}={v}" for k, v in variants["framework"].items())
                               if variants["framework"] else ", the tier's settings (features off)"))
    rows = [
        row("7", f"server --tp {tp}: time to healthy, {fw_label}",
            boot_fw * 1e3, "ms", "same launch, plugin excluded (SGLANG_PLUGINS=none_such)",
            boot_base * 1e3, ratio=boot_ratio, goal=f"ratio <= {BOOT_GOAL}",
            met=boot_ratio <= BOOT_GOAL, n=pairs,
            note=f"median of {pairs} paired ratios, spread {spread(boot_ratios, 1, 3)}; boots "
                 f"{spread(boots['framework'], 1, 1)} vs {spread(boots['baseline'], 1, 1)} s; "
                 f"load average at the end {load}; armed per process {states}"),
    ]
    rows += role_rows(tp, per_role, pairs)
    rows += [
        row("7", f"server --tp {tp}: CPU time of the launch's processes at healthy, framework",
            med(cpus["framework"]) * 1e3, "ms", "same launch, plugin excluded",
            med(cpus["baseline"]) * 1e3, n=pairs,
            note=f"user + system of the launcher, schedulers and detokenizer (/proc) when /health "
                 f"first answered: a counter the machine's load does not stretch; per pair "
                 f"{[round(x, 1) for x in cpus['framework']]} vs "
                 f"{[round(x, 1) for x in cpus['baseline']]} s"),
        row("7", f"server --tp {tp}: /generate throughput, {CLIENTS} clients, framework",
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
    for key in ("start_s", "ready_s", "cpu_s"):
        details[f"per_process_{key}"] = {f"{v}: {role}": [round(r[key], 2) for r in recs]
                                         for v, roles in per_role.items()
                                         for role, recs in sorted(roles.items())}
    return {"rows": rows, "details": details}


def role_rows(tp: int, per_role: dict[str, dict[str, list[dict]]], pairs: int) -> list[dict]:
    """One row per process role seen in both variants: its time from start to ready, framework
    against baseline (medians over the pairs; the ratio is the median of the per-pair ratios),
    with its start offset and CPU seconds at ready in the note (info rows: the goal is the
    launch's time to healthy)."""
    out = []
    fw, base = per_role["framework"], per_role["baseline"]
    for role in sorted(set(fw) & set(base), key=lambda r: (r != "launcher", r)):
        f, b = fw[role], base[role]
        n = min(len(f), len(b))
        ratios = [x["ready_s"] / y["ready_s"] for x, y in zip(f, b) if y["ready_s"] > 0]
        value = lambda recs, k: med([r[k] for r in recs])  # noqa: E731
        out.append(row(
            "7", f"  {role}: start to ready", value(f, "ready_s") * 1e3, "ms",
            "same process, plugin excluded", value(b, "ready_s") * 1e3,
            ratio=med(ratios) if ratios else None, n=n,
            note=f"started {value(f, 'start_s'):.2f} vs {value(b, 'start_s'):.2f} s after Popen; "
                 f"CPU at ready {value(f, 'cpu_s'):.2f} vs {value(b, 'cpu_s'):.2f} s "
                 f"(+{(value(f, 'cpu_s') - value(b, 'cpu_s')) * 1e3:.0f} ms); per pair ready "
                 f"{[round(r['ready_s'], 2) for r in f]} vs {[round(r['ready_s'], 2) for r in b]} s"
                 + ("" if ratios else "; ratio: no baseline time")))
    return out


if __name__ == "__main__":
    main(run)
