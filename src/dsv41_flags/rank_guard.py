"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Rank consistency guard: every rank must arm the same features with the same non-volatile
resolution, or the engine hangs or computes garbage instead of failing.

When the engine's torch.distributed world is initialised, the ranks all-gather (torch.distributed
``all_gather_object`` over the CPU group) a digest of their armed features, non-volatile
resolution and guard mode; a mismatch raises (``rank_guard = "raise"``) or only warns
(``"warn"``), with a table of which rank differs in which key. In sglang processes it is wired
through sglang's own HookRegistry (an AFTER hook on ``initialize_model_parallel``), so no import
finder is added.

Hang-free: the guard mode is part of the launch's resolution (reserved
setting ``RANK_GUARD``, handed to children in the snapshot), every rank joins the collective
whatever its own mode (``off`` only silences the report), and the mode itself is compared like any
other key. After the gather every rank acts on the same effective mode, the strictest any rank
holds (``raise`` > ``warn`` > ``off``), so no rank goes on into the engine's next collective while
another stops.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from dsv41_flags.errors import FlagsError
from dsv41_flags.logs import get_logger
from dsv41_flags.fingerprint import volatile_names
from dsv41_flags.declare import ENV_PREFIX
from dsv41_flags.wire import jsonable



class RankMismatchError(FlagsError, RuntimeError):
    """Ranks disagree on armed features or non-volatile settings. ``table`` lists
    ``(key, {rank: value})`` for every differing key."""

    def __init__(self, message: str, table: list[tuple[str, dict[int, Any]]]):
        self.table = table
        super().__init__(message)


MODES = ("off", "warn", "raise")


def guard_mode(runtime) -> str:
    """This rank's guard mode: the launch's ``RANK_GUARD`` reserved setting (``raise`` default)."""
    mode = runtime.resolution.reserved.get("RANK_GUARD", "raise")
    return mode if mode in MODES else "raise"


def rank_view(runtime, mode: str | None = None) -> dict:
    """What must agree across ranks: armed feature names, every flag (volatile or not: a flag
    decides which patches exist), every non-volatile option and the guard mode (``mode``, default
    ``guard_mode(runtime)``); ``digest`` is sha256 over all of it."""
    volatile = volatile_names(runtime.resolution, list(runtime.features.values()))
    values = {k: r.value for k, r in sorted(runtime.resolution.values.items())
              if r.option is None or ENV_PREFIX + k not in volatile}
    view = {"armed": [f.name for f in runtime.armed()], "features": sorted(runtime.features),
            "rank_guard": mode or guard_mode(runtime),
            "values": jsonable(values)}
    view["digest"] = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()
    return view


def unavailable_view(reason: str) -> dict:
    """The view of a rank where dsv41_flags has no runtime (activation failed and the process
    runs on, non-strict): it still joins the gather, so the other ranks get an answer instead of
    waiting; its ``armed`` says why, and its mode is ``off`` (it defers to the other ranks')."""
    view = {"armed": f"<not activated: {reason}>", "features": [], "rank_guard": "off", "values": {}}
    view["digest"] = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()
    return view


def compare(views: list[dict]) -> list[tuple[str, dict[int, Any]]]:
    """Keys whose value differs between ranks: ``[(key, {rank: value})]`` (empty when all agree).
    ``rank_guard`` (the mode) is one of the keys."""
    if len({v["digest"] for v in views}) == 1:
        return []
    table = []
    for part in ("armed", "features", "rank_guard"):
        if len({json.dumps(v.get(part)) for v in views}) > 1:
            table.append((part, {rank: v.get(part) for rank, v in enumerate(views)}))
    keys = sorted(set().union(*(v["values"] for v in views)))
    for key in keys:
        per_rank = {rank: v["values"].get(key, "<undeclared>") for rank, v in enumerate(views)}
        if len({json.dumps(x) for x in per_rank.values()}) > 1:
            table.append((key, per_rank))
    return table


def effective_mode(views: list[dict]) -> str:
    """The strictest mode any rank holds (``raise`` > ``warn`` > ``off``): the same on every
    rank, so all ranks stop or all go on."""
    return max((v.get("rank_guard", "raise") for v in views),
               key=lambda m: MODES.index(m) if m in MODES else len(MODES))


def format_table(table: list[tuple[str, dict[int, Any]]]) -> str:
    """Text table: one line per differing key, ``rank N: value`` for every rank."""
    return "\n".join(f"  {key}: " + ", ".join(f"rank {r}: {v!r}" for r, v in sorted(per.items()))
                     for key, per in table)


def check_ranks(runtime, group=None, mode: str | None = None, *,
                reason: str = "") -> list[tuple[str, dict[int, Any]]]:
    """All-gather this rank's view over ``group`` (default: the whole world) and compare.

    runtime: this process's Runtime, or None when activation failed here (``reason`` says why;
    the rank still joins, see ``unavailable_view``). mode: this rank's ``raise`` | ``warn`` |
    ``off`` (default: the launch's RANK_GUARD setting). Every rank joins the gather whatever its
    mode (it is a collective: a rank that skipped it would leave the others blocked). Then every
    rank acts on ``effective_mode``: ``off`` on every rank -> nothing is reported; otherwise emits
    ``ranks.agree`` or ``ranks.mismatch`` (a disagreement on the mode is a row of the table).
    Raises RankMismatchError when ranks differ and the effective mode is ``raise``. Returns the
    table (empty when all agree).
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return []
    if runtime is None:
        mine, view, log = "off", unavailable_view(reason or "unknown"), get_logger()
    else:
        mine = mode or guard_mode(runtime)
        view, log = rank_view(runtime, mine), runtime.log
    views: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(views, view, group=group)
    table = compare(views)
    rank = dist.get_rank(group)
    effective = effective_mode(views)
    if effective == "off":
        return table
    if not table:
        log.info("ranks.agree", ranks=len(views), digest=views[0]["digest"], rank=rank,
                 mode=effective)
        return table
    text = format_table(table)
    log.error("ranks.mismatch", ranks=len(views), keys=[k for k, _ in table], table=text,
              mode=effective, local_mode=mine, rank=rank)
    if effective == "raise":
        raise RankMismatchError(f"ranks disagree on dsv41_flags settings (rank_guard = raise on at "
                                f"least one rank):\n{text}", table)
    return table


def register_guard(runtime, *, reason: str = "", engine=None) -> bool:
    """Arrange ``check_ranks`` at the engine's hook point (``EngineAdapter.on_world_ready``: once
    the engine has initialised its distributed world, over its CPU group), whatever the local
    guard mode: every rank must join the gather. ``runtime`` None (activation failed in this
    process, ``reason`` says why): the rank still joins with ``unavailable_view``. ``engine``:
    the adapter (default: this environment's). Returns False when the engine offers no hook."""
    if engine is None:
        from dsv41_flags.engine import adapter

        engine = adapter()
    return engine.on_world_ready(lambda group: check_ranks(runtime, group, reason=reason))
