"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Flag state on sglang's Prometheus endpoint (``--enable-metrics``).

sglang serves ``/metrics`` through prometheus_client in multiprocess mode: the launcher sets
``PROMETHEUS_MULTIPROC_DIR`` before it starts the subprocesses (``utils/common.py``
``set_prometheus_multiproc_dir``), every process writes its samples to files there, and the
HTTP process's ``MultiProcessCollector`` reads them all. In that mode only Gauge, Counter and
Histogram work, and a Gauge needs a ``multiprocess_mode``.

Every process outside the schedulers with a live feature (the HTTP server process, the
detokenizer, the data-parallel controller) writes ``dsv41_flags_process_feature_state{feature,
role, pid, state}`` and ``dsv41_flags_process_generation{role, pid}`` (``update_process``), and
the HTTP process that reads a flag service the ``dsv41_flags_fleet_*`` samples (``update_fleet``).

Each scheduler rank writes two gauges (``multiprocess_mode="livemax"``: the samples of live
processes; the rank labels keep every rank's apart):

- ``dsv41_flags_feature_state{feature, tp_rank, pp_rank, dp_rank, state}``: 1 for the feature's
  current state on that rank, 0 for a state it had before;
- ``dsv41_flags_generation{tp_rank, pp_rank, dp_rank}``: the rank's live generation.

``update(rt)`` refreshes both from the runtime's status records (``Runtime.states``): when the
scheduler starts serving (after its installs), then as a ``Runtime.state_listeners`` callback at
every state change (a late install, a switch, a rollback, an audit's finding). A rank label
unknown here is ``"0"``.
Nothing is written when sglang's metrics are off or prometheus_client is not installed.
"""
from __future__ import annotations

import os
from typing import Any

from dsv41_flags.text import exception_text

RANK_LABELS = ("tp_rank", "pp_rank", "dp_rank")
STATE_METRIC = "dsv41_flags_feature_state"
GENERATION_METRIC = "dsv41_flags_generation"


def enabled() -> bool:
    """True in a process of a launch with ``--enable-metrics`` (sglang's published
    observability settings, and the multiprocess directory set)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return False
    try:
        from sglang.srt.runtime_context import get_observability

        return bool(get_observability().enable_metrics)
    except Exception:  # noqa: BLE001 - no published context: not a serving launch
        return False


def _metric_set(rt, key: str, make, force: bool = False) -> dict[str, Any] | None:
    """The metric objects of ``key`` in this process (kept in ``rt.live.transport[key]``, made
    once by ``make(prometheus_client)``), or None when sglang's metrics are off here (``force``:
    make them all the same) or prometheus_client is not installed. The one place a metric of
    this module is created: prometheus_client refuses a second registration of one name."""
    metrics = rt.live.transport.get(key)
    if metrics is None:
        if not (force or enabled()):
            return None
        try:
            import prometheus_client
        except ImportError:
            return None
        metrics = rt.live.transport[key] = make(prometheus_client)
    return metrics


def _rank_gauges(prom) -> dict[str, Any]:
    return {"state": prom.Gauge(STATE_METRIC, "dsv41_flags feature state on a scheduler rank "
                                "(1: the current state)", ("feature", *RANK_LABELS, "state"),
                                multiprocess_mode="livemax"),
            "generation": prom.Gauge(GENERATION_METRIC, "dsv41_flags live generation on a "
                                     "scheduler rank", RANK_LABELS, multiprocess_mode="livemax"),
            "seen": {}}


def update(rt, ranks: dict | None = None, *, force: bool = False) -> bool:
    """Write this rank's feature states and generation. ``ranks``: the rank fields (default:
    the runtime's process context); ``force``: write even when sglang's metrics are not enabled
    here (``PROMETHEUS_MULTIPROC_DIR`` must still be set before prometheus_client is imported).
    Returns False when nothing is written (metrics off)."""
    gauges = _metric_set(rt, "metrics", _rank_gauges, force)
    if gauges is None:
        return False
    fields = {**rt.context.as_fields(), **(ranks or {})}
    rank = {k: str(fields.get(k) if fields.get(k) is not None else 0) for k in RANK_LABELS}
    _write_states(rt, gauges, rank)
    return True


def _write_states(rt, gauges: dict[str, Any], labels: dict[str, str]) -> None:
    """Each feature's state (1 for the current one, 0 for every state it had before: the set in
    ``gauges["seen"]``) and the live generation, under ``labels``."""
    seen: dict[str, set] = gauges["seen"]
    for st in rt.states():
        states = seen.setdefault(st.name, set())
        states.add(st.state)
        for state in states:
            gauges["state"].labels(feature=st.name, state=state, **labels).set(
                1 if state == st.state else 0)
    gauges["generation"].labels(**labels).set(rt.live.generation)


def _safely(rt, write) -> None:
    """``write(rt)``, a failure reported (``flags.metrics_failed``), never raised into sglang's
    event loop or a process's state change: metrics never stop a process."""
    try:
        write(rt)
    except Exception as exc:  # noqa: BLE001 - metrics never stop a process
        rt.log.warning("flags.metrics_failed", error=f"{exception_text(exc)}")


def update_safely(rt) -> None:
    """``update(rt)`` through ``_safely``."""
    _safely(rt, update)


PROCESS_STATE_METRIC = "dsv41_flags_process_feature_state"
PROCESS_GENERATION_METRIC = "dsv41_flags_process_generation"


def update_process(rt) -> bool:
    """Write the feature states and generation of this process outside the schedulers (the HTTP
    server process, the detokenizer, the data-parallel controller: ``peers``), beside the ranks':

    - ``dsv41_flags_process_feature_state{feature, role, pid, state}``: 1 for the current state;
    - ``dsv41_flags_process_generation{role, pid}``: the process's live generation.

    ``pid`` is prometheus_client's own label of a ``liveall`` gauge in multiprocess mode (a
    label of ours by that name would be dropped by its collector). Called when the process
    becomes a peer, at each of its state changes (``state_listeners``)
    and at each status request, so a process whose metrics were not enabled yet at the first
    call writes them at the next. Returns False when sglang's metrics are off here."""
    gauges = _metric_set(rt, "process_metrics", _process_gauges)
    if gauges is None:
        return False
    _write_states(rt, gauges, {"role": str(rt.context.fields.get("role") or "process")})
    return True


def _process_gauges(prom) -> dict[str, Any]:
    return {"state": prom.Gauge(PROCESS_STATE_METRIC, "dsv41_flags feature state in a process "
                                "outside the scheduler ranks (1: the current state)",
                                ("feature", "role", "state"), multiprocess_mode="liveall"),
            "generation": prom.Gauge(PROCESS_GENERATION_METRIC, "dsv41_flags live generation in "
                                     "a process outside the scheduler ranks", ("role",),
                                     multiprocess_mode="liveall"),
            "seen": {}}


def update_process_safely(rt) -> None:
    """``update_process(rt)`` through ``_safely``."""
    _safely(rt, update_process)


FLEET_VALUE_METRIC = "dsv41_flags_fleet_value"
FLEET_APPLIED_METRIC = "dsv41_flags_fleet_applied"
FLEET_REFUSED_METRIC = "dsv41_flags_fleet_refused"
FLEET_REACHABLE_METRIC = "dsv41_flags_fleet_reachable"


def _fleet_metrics(prom) -> dict[str, Any]:
    return dict(
        value=prom.Gauge(FLEET_VALUE_METRIC, "dsv41_flags: the flag service's value for a "
                         "feature on this server (1 on, 0 off, -1 none)", ("feature",),
                         multiprocess_mode="livemax"),
        applied=prom.Gauge(FLEET_APPLIED_METRIC, "dsv41_flags: the feature's value in effect on "
                           "this server (1 on, 0 off)", ("feature",), multiprocess_mode="livemax"),
        reachable=prom.Gauge(FLEET_REACHABLE_METRIC, "dsv41_flags: 1 when the flag service "
                             "could be read at the last try", multiprocess_mode="livemax"),
        refused=prom.Counter(FLEET_REFUSED_METRIC, "dsv41_flags: fleet changes refused"),
        counted=[0])


def update_fleet(rt, status) -> bool:
    """Write the fleet's samples of this server (``status``: a ``status.FleetStatus``; the
    metric objects are kept in ``rt.live.transport["fleet_metrics"]``), from the
    HTTP server process that reads the flag service:

    - ``dsv41_flags_fleet_value{feature}``: the flag service's value (1 on, 0 off; -1 none);
    - ``dsv41_flags_fleet_applied{feature}``: the value in effect on the server (1 on, 0 off);
    - ``dsv41_flags_fleet_reachable``: 1 when the flag service could be read at the last try;
    - ``dsv41_flags_fleet_refused_total``: fleet changes refused (a counter).

    Returns False when sglang's metrics are off."""
    metrics = _metric_set(rt, "fleet_metrics", _fleet_metrics)
    if metrics is None:
        return False
    for row in status.features:
        metrics["value"].labels(feature=row.feature).set(
            -1 if row.fleet_value is None else int(row.fleet_value))
        metrics["applied"].labels(feature=row.feature).set(int(bool(row.applied)))
    metrics["reachable"].set(int(status.reachable))
    new = status.refused - metrics["counted"][0]
    if new > 0:
        metrics["refused"].inc(new)
        metrics["counted"][0] = status.refused
    return True
