"""Benchmark 9: kill-switch latency of fleet flags (docs/fleet.md), against the direct switch.

A real sglang server at tp 2 on the CPU (the server tier's launch, ``tests/server/_server.py``),
driven by a real flag service (``tests/services/unleash.py``: Unleash 8.2 with PostgreSQL on
loopback; then a flagd file), the live feature ``folded_fence`` (the shipped one; its target is
not imported on a CPU, so a switch changes its value and generation on every rank, which is what
is timed). For each change:

- **fleet**: from the flag's change in the service (Unleash's Admin API call returned; the flagd
  file replaced) to every scheduler rank reporting the new value (``GET /dsv41_flags/status``,
  polled every 0.05 s);
- **baseline, direct**: the same switch asked of the same server with ``POST /dsv41_flags/set``
  (what ``dsv41-flags set --url`` does), from the call to every rank reporting it.

The changes alternate on and off, fleet and direct interleaved. Reported: the median and the
spread of each, the ratio, and the fleet's latency beyond the provider's poll interval (goal: at
most about 2 s beyond it). ``poll_interval_s`` is 1 s for both providers (Unleash's client polls
every second, and Unleash itself refreshes its client API about once a second). ``--quick``:
3 changes each instead of 10.
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, main, med, row, spread  # noqa: E402

POLL_S = 1.0
STATUS_POLL_S = 0.05
APPLY_TIMEOUT_S = 60.0
GOAL_BEYOND_POLL_S = 2.0
FEATURE = "folded_fence"
FLAG = f"dsv41.{FEATURE}"


def _tiers():
    sys.path.insert(0, str(REPO))
    from tests.server import _server as srv  # noqa: PLC0415
    from tests.services.unleash import Installation, UnleashService  # noqa: PLC0415

    return srv, Installation, UnleashService


def ranks_value(srv, url: str) -> set:
    """The values of ``FEATURE`` on every scheduler rank now (empty when the route fails)."""
    try:
        status, text = srv.http("GET", url + "/dsv41_flags/status", timeout=10)
        data = json.loads(text)
    except (OSError, ValueError):
        return set()
    return {f["value"] for r in data.get("ranks") or () for f in r.get("features") or ()
            if f.get("name") == FEATURE} if status == 200 else set()


def wait_value(srv, url: str, value: bool, started: float) -> float:
    """Seconds from ``started`` until every rank reports ``value``; raises past the bound."""
    while time.monotonic() - started < APPLY_TIMEOUT_S:
        if ranks_value(srv, url) == {value}:
            return time.monotonic() - started
        time.sleep(STATUS_POLL_S)
    raise RuntimeError(f"{url}: {FEATURE}={value} not on every rank within {APPLY_TIMEOUT_S} s")


def direct(srv, url: str, value: bool) -> float:
    started = time.monotonic()
    status, text = srv.http("POST", url + "/dsv41_flags/set",
                            {"name": FEATURE, "value": value, "requested_by": "bench"}, timeout=90)
    if status != 200:
        raise RuntimeError(f"direct switch refused: {status} {text[:300]}")
    return wait_value(srv, url, value, started)


def serve(srv, kit, name: str, work: Path, fleet: str, env: dict):
    settings = work / f"{name}.toml"
    settings.write_text("[default]\nfolded_fence = false\nautotune_keep = false\nstrict = true\n"
                        "[default.fleet]\n" + fleet)
    launch = srv.Launch.server(kit, name, work, tp=2, env_extra={"DSV41_SETTINGS": str(settings),
                                                                **env},
                               pythonpath=(REPO / "src",))
    launch.start()
    try:
        launch.wait_healthy()
    except BaseException:
        launch.stop()
        raise
    return launch


def measure(srv, launch, changes: int, change) -> tuple[list[float], list[float]]:
    """``changes`` fleet changes (``change(value)`` makes one in the service) interleaved with
    as many direct switches; returns the two lists of seconds."""
    fleet_s, direct_s = [], []
    phase = random.Random(9)   # fixed seed: the same phases run after run
    for _ in range(changes):
        target = not (ranks_value(srv, launch.url) == {True})
        started = time.monotonic()
        change(target)
        fleet_s.append(wait_value(srv, launch.url, target, started))
        time.sleep(POLL_S)
        # a switch by hand overrides the fleet value until the flag changes again
        direct_s.append(direct(srv, launch.url, not target))
        change(not target)   # the service agrees with the ranks again before the next change
        # a random phase against the watcher's poll: whole seconds here would land every change
        # at the same point of its 1 s cycle, and measure that point, not the latency
        time.sleep(2 * POLL_S + phase.uniform(0, POLL_S))
    return fleet_s, direct_s


def run(quick: bool = False) -> dict:
    changes = 3 if quick else 10
    srv, Installation, UnleashService = _tiers()
    installation = Installation.load()
    if installation is None:
        raise RuntimeError("the Unleash test service is not installed: ./dev setup")
    rows, details = [], {}
    with tempfile.TemporaryDirectory(prefix="dsv41-bench-fleet-") as tmp:
        work = Path(tmp)
        kit = srv.Kit(work / "kit")
        service = UnleashService(installation)
        service.start()
        try:
            service.create_flag(FLAG, type="kill-switch")
            service.set_enabled(FLAG, "development", False)
            launch = serve(srv, kit, "unleash", work, (
                f'provider = "unleash"\nurl = "{service.url}"\nenvironment = "development"\n'
                f"poll_interval_s = {POLL_S}\nmin_switch_interval_s = 0.2\n"),
                {"DSV41_FLEET_TOKEN": service.client_token("development")})
            try:
                results = measure(srv, launch, changes,
                                  lambda v: service.set_enabled(FLAG, "development", v))
            finally:
                launch.stop()
        finally:
            service.stop()
        details["unleash"] = results
        flags = work / "flags.json"

        def write(value: bool) -> None:
            data = {"flags": {FLAG: {"state": "ENABLED", "variants": {"on": True, "off": False},
                                     "defaultVariant": "on" if value else "off"}}}
            part = flags.with_suffix(".part")
            part.write_text(json.dumps(data))
            os.replace(part, flags)

        write(False)
        launch = serve(srv, kit, "flagd", work, (
            f'provider = "flagd"\npath = "{flags}"\npoll_interval_s = {POLL_S}\n'
            "min_switch_interval_s = 0.2\n"), {})
        try:
            details["flagd"] = measure(srv, launch, changes, write)
        finally:
            launch.stop()
    for provider, (fleet_s, direct_s) in details.items():
        beyond = med(fleet_s) - POLL_S
        rows.append(row("9", f"kill switch via {provider}: change in the service -> every rank",
                        med(fleet_s), "s", "direct POST /dsv41_flags/set", med(direct_s),
                        goal=f"<= poll {POLL_S:g} s + {GOAL_BEYOND_POLL_S:g} s",
                        met=beyond <= GOAL_BEYOND_POLL_S, n=len(fleet_s),
                        note=f"fleet {spread(fleet_s, digits=2)} s, direct "
                             f"{spread(direct_s, digits=2)} s; {beyond:.2f} s beyond the poll"))
    return {"rows": rows, "details": {k: {"fleet_s": v[0], "direct_s": v[1]}
                                      for k, v in details.items()}}


if __name__ == "__main__":
    main(run)
