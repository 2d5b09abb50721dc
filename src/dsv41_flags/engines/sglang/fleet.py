"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The fleet watcher (``dsv41_flags.fleet.Watcher``) on sglang's HTTP server process.

- **One per server.** The HTTP server process that installs the live routes starts it, after
  taking ``fleet.lock`` in the launch's private directory (``peers.launch_directory``): with
  ``--tokenizer-worker-num N`` (several HTTP processes) only the first one reads the flag
  service. No scheduler, detokenizer or controller ever starts it (they import no HTTP server),
  and a forked child never runs its thread.
- **The existing path.** Each change becomes ``POST /dsv41_flags/set`` on this server's own
  port over loopback, with the server's own admin key (or API key) from its ``server_args``
  (the key never leaves the process): the route's lock, the ranks' vote, one generation at one
  step, the peers, the rollback, all as for an operator's ``dsv41-flags set``. A server that is
  not serving yet answers nothing: the change is tried again at the next read.
- ``status_of(rt)`` is the watcher's ``FleetStatus`` for ``GET /dsv41_flags/status``.
"""
from __future__ import annotations

import fcntl
import os
from typing import Any

from dsv41_flags.errors import SwitchError
from dsv41_flags.fleet import Outcome, Watcher, agrees, configured
from dsv41_flags.secrecy import masked_reason
from dsv41_flags.status import FleetStatus

#: seconds one switch through the route may take (the route's own deadline is shorter)
SWITCH_TIMEOUT_S = 60.0
_LOCK_NAME = "fleet.lock"


def _loopback(host: str | None) -> str:
    """Where this process reaches its own server: a wildcard or empty host is loopback."""
    if not host or host in ("0.0.0.0", "*"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _switcher(module, set_path: str):
    """``switch(name, value, requested_by) -> Outcome`` through this server's own route
    ``set_path`` (``http.SET_PATH``)."""
    from dsv41_flags.engines.http_client import Refused, call_json

    def switch(name: str, value: bool, requested_by: str) -> Outcome:
        state = module.get_global_state()
        tm = getattr(state, "tokenizer_manager", None)
        args = getattr(tm, "server_args", None)
        if args is None:
            return Outcome(False, None, "the server is not serving yet; tried again at the next read")
        key = getattr(args, "admin_api_key", None) or getattr(args, "api_key", None)
        url = f"http://{_loopback(getattr(args, 'host', None))}:{args.port}{set_path}"
        try:
            status, answer = call_json(url, method="POST", api_key=key, timeout_s=SWITCH_TIMEOUT_S,
                                       body={"name": name, "value": value,
                                             "requested_by": requested_by})
        except Refused as exc:
            return Outcome(False, None, f"the server's own route refused its key: {exc}")
        except SwitchError as exc:
            return Outcome(False, None, str(exc))
        if not isinstance(answer, dict):
            return Outcome(False, None, f"the route answered HTTP {status} with no JSON object")
        if answer.get("ok") is True:
            return Outcome(True, value)
        return Outcome(False, None, str(answer.get("error") or f"HTTP {status}")[:300])

    return switch


def _one_per_launch(rt) -> Any:
    """The open ``fleet.lock`` of this launch when this process took it, else None."""
    from dsv41_flags.engines.sglang.peers import launch_directory

    directory = launch_directory(rt.launch_pid or os.getpid(), create=True)
    handle = open(directory / _LOCK_NAME, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def start(rt, module, set_path: str) -> bool:
    """Start the launch's fleet watcher in this HTTP server process (``module``: sglang's
    ``http_server``; ``set_path``: the live route the watcher's switches go through, given by
    ``http``, which imports this module) when the launch has a fleet table and no other process of the launch runs
    one. True when started here. A failure to start is reported (``fleet.failed``) and the
    server serves on."""
    settings = configured(rt.resolution)
    if (settings is None or rt.live.transport.get("fleet") is not None
            or rt.context.fields.get("role") == "scheduler"):
        return False
    try:
        lock = _one_per_launch(rt)
        if lock is None:
            rt.log.info("fleet.elsewhere", reason="another HTTP process of this launch reads the "
                                                  "flag service")
            return False
        table = rt.resolution.reserved.get("FLEET") or {}
        values = {name: rt.value(feature) for name, feature in rt.features.items()}
        watcher = Watcher(settings, table.get("context") or {}, rt.features, values,
                          _switcher(module, set_path), rt.log, on_change=_metrics(rt))
        rt.live.transport["fleet"] = watcher
        rt.live.transport["fleet_lock"] = lock
        watcher.start()
    except Exception as exc:  # the flag service is an addition: the server serves without it
        rt.log.error("fleet.failed", error=masked_reason(exc),
                     what="the flag service does not drive this server; its launch values stay")
        return False
    return True


#: why a feature's value in effect differs from its fleet value when the watcher did not say:
#: a switch from outside the flag service (``dsv41-flags set``), which stands until the flag
#: next changes (docs/fleet.md)
OVERRIDDEN = ("overridden: switched outside the flag service (dsv41-flags set); the flag's next "
              "change in the service applies")


def status_of(rt) -> FleetStatus | None:
    """The watcher's record in this process, None when it runs none."""
    watcher = rt.live.transport.get("fleet")
    if watcher is None:
        return None
    status = watcher.status()
    applied = {name: rt.value(feature) for name, feature in rt.features.items()}
    rows = []
    for row in status.features:
        value = applied.get(row.feature, row.applied)
        reason = row.reason
        if not agrees(row.fleet_value, value, reason) and not reason:
            reason = OVERRIDDEN
        rows.append(row.replace(applied=value, agrees=agrees(row.fleet_value, value, reason),
                                reason=reason))
    return status.replace(features=tuple(rows))


def _metrics(rt):
    """The watcher's ``on_change``: the fleet gauges on sglang's ``/metrics``, when enabled."""
    def update(status: FleetStatus) -> None:
        from dsv41_flags.engines.sglang import metrics

        metrics.update_fleet(rt, status)
    return update
