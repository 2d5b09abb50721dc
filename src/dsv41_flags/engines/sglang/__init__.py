"""The sglang adapter room: everything dsv41_flags knows about sglang, declared once, behind the
seam ``dsv41_flags.engines.EngineAdapter`` (``ADAPTER``, entry-point group ``dsv41_flags.engines``).

- ``facts``: the distribution, the default version range and the launch fingerprint's facts;
- ``processes``: roles and ranks of sglang's processes, the plugin entry (``load``), the rank
  guard's hook point;
- ``rpc``: the live-switch methods on every scheduler rank and the client of sglang's RPC channel;
- ``http``: the live routes on sglang's HTTP server and the CLI's calls to them.

Public, sglang-only calls: ``switch_engine`` and ``engine_status`` (an offline ``sglang.Engine``).
"""
from __future__ import annotations

from dsv41_flags.engines import EngineAdapter
from dsv41_flags.engines.sglang.facts import DEFAULT_RANGE, DISTRIBUTION, FINGERPRINT
from dsv41_flags.engines.sglang.http import http_set, http_status
from dsv41_flags.engines.sglang.processes import (caller_context, load, on_world_ready,
                                                  plugin_will_activate)
from dsv41_flags.engines.sglang.rpc import engine_status, switch_engine

__all__ = ["ADAPTER", "engine_status", "switch_engine"]

ADAPTER = EngineAdapter(
    name=DISTRIBUTION,
    default_range=DEFAULT_RANGE,
    fingerprint=FINGERPRINT,
    plugin_entry=load,
    on_world_ready=on_world_ready,
    process_context=caller_context,
    will_activate=plugin_will_activate,
    switch=switch_engine,
    status=engine_status,
    remote_switch=http_set,
    remote_status=http_status,
)
