"""The sglang integration: all dsv41_flags knows about sglang, declared once behind the engine seam
(``ADAPTER``, a ``dsv41_flags.engine.EngineAdapter``, entry-point group ``dsv41_flags.engines``).

- ``facts``: the distribution, the default version range and the launch fingerprint's facts;
- ``processes``: roles and ranks of sglang's processes and the hook points the core's activation
  drives (rank guard, live transport, serving report);
- ``rpc``: the live-switch methods on every scheduler rank and the client of sglang's RPC channel;
- ``http``: the live routes on sglang's HTTP server and the CLI's calls to them;
- ``peers``: a live switch in the launch's processes outside the schedulers;
- ``metrics``: flag state on sglang's ``/metrics``;
- ``launch_server`` and ``cpu_platform``: ``dsv41-flags serve`` (the server's command line, the
  CPU platform plugin).

Public, sglang-only calls: ``switch_engine`` and ``engine_status`` (an offline ``sglang.Engine``).
"""
from __future__ import annotations

from dsv41_flags.engine import EngineAdapter
from dsv41_flags.engines.sglang.facts import DEFAULT_RANGE, DISTRIBUTION, FINGERPRINT
from dsv41_flags.engines.sglang.http import http_set, http_status
from dsv41_flags.engines.sglang.launch_server import fleet_context, server_command
from dsv41_flags.engines.sglang.processes import (NO_WORLD_ROLES, arm_live, caller_context,
                                                  on_serving, on_world_ready, plugin_will_activate)
from dsv41_flags.engines.sglang.rpc import engine_status, switch_engine

__all__ = ["ADAPTER", "engine_status", "switch_engine"]

ADAPTER = EngineAdapter(
    name=DISTRIBUTION,
    default_range=DEFAULT_RANGE,
    fingerprint=FINGERPRINT,
    process_context=caller_context,
    no_world_roles=NO_WORLD_ROLES,
    on_world_ready=on_world_ready,
    arm_live=arm_live,
    on_serving=on_serving,
    will_activate=plugin_will_activate,
    switch=switch_engine,
    status=engine_status,
    remote_switch=http_set,
    remote_status=http_status,
    server_command=server_command,
    fleet_context=fleet_context,
)
