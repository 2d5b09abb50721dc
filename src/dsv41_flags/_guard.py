"""Rank consistency guard: every rank must arm the same features with the same non-volatile
resolution, or the engine hangs or computes garbage instead of failing.

When the engine's torch.distributed world is initialised, the ranks all-gather (torch.distributed
``all_gather_object`` over the CPU group) a digest of their armed features and non-volatile
resolution; a mismatch raises (``rank_guard = "raise"``) or only warns (``"warn"``), with a table
of which rank differs in which key. In sglang processes it is wired through sglang's own
HookRegistry (an AFTER hook on ``initialize_model_parallel``), so no import finder is added.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from ._errors import FlagsError
from ._fingerprint import volatile_names
from ._declare import ENV_PREFIX

GUARD_TARGET = "sglang.srt.distributed.parallel_state.initialize_model_parallel"


class RankMismatchError(FlagsError, RuntimeError):
    """Ranks disagree on armed features or non-volatile settings. ``table`` lists
    ``(key, {rank: value})`` for every differing key."""

    def __init__(self, message: str, table: list[tuple[str, dict[int, Any]]]):
        self.table = table
        super().__init__(message)


def rank_view(runtime) -> dict:
    """What must agree across ranks: armed feature names, every flag (volatile or not: a flag
    decides which patches exist) and every non-volatile option."""
    volatile = volatile_names(runtime.resolution, list(runtime.features.values()))
    values = {k: r.value for k, r in sorted(runtime.resolution.values.items())
              if r.option is None or ENV_PREFIX + k not in volatile}
    view = {"armed": [f.name for f in runtime.armed()], "features": sorted(runtime.features),
            "values": json.loads(json.dumps(values, default=list))}
    view["digest"] = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()
    return view


def compare(views: list[dict]) -> list[tuple[str, dict[int, Any]]]:
    """Keys whose value differs between ranks: ``[(key, {rank: value})]`` (empty when all agree)."""
    if len({v["digest"] for v in views}) == 1:
        return []
    table = []
    for part in ("armed", "features"):
        if len({json.dumps(v[part]) for v in views}) > 1:
            table.append((part, {rank: v[part] for rank, v in enumerate(views)}))
    keys = sorted(set().union(*(v["values"] for v in views)))
    for key in keys:
        per_rank = {rank: v["values"].get(key, "<undeclared>") for rank, v in enumerate(views)}
        if len({json.dumps(x) for x in per_rank.values()}) > 1:
            table.append((key, per_rank))
    return table


def format_table(table: list[tuple[str, dict[int, Any]]]) -> str:
    """Text table: one line per differing key, ``rank N: value`` for every rank."""
    return "\n".join(f"  {key}: " + ", ".join(f"rank {r}: {v!r}" for r, v in sorted(per.items()))
                     for key, per in table)


def check_ranks(runtime, group=None, mode: str | None = None) -> list[tuple[str, dict[int, Any]]]:
    """All-gather this rank's view over ``group`` (default: the whole world) and compare.

    mode: ``raise`` | ``warn`` | ``off`` (default: the RANK_GUARD setting). Emits ``ranks.agree``
    or ``ranks.mismatch``. Raises RankMismatchError in ``raise`` mode when ranks differ. Every
    rank of the group must call it (it is a collective).
    """
    import torch.distributed as dist

    mode = mode or runtime.resolution.reserved.get("RANK_GUARD", "raise")
    if mode == "off" or not dist.is_available() or not dist.is_initialized():
        return []
    views: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(views, rank_view(runtime), group=group)
    table = compare(views)
    rank = dist.get_rank(group)
    if not table:
        runtime.log.info("ranks.agree", ranks=len(views), digest=views[0]["digest"], rank=rank)
        return table
    text = format_table(table)
    runtime.log.error("ranks.mismatch", ranks=len(views), keys=[k for k, _ in table], table=text,
                      mode=mode, rank=rank)
    if mode == "raise":
        raise RankMismatchError(f"ranks disagree on dsv41_flags settings (rank_guard = raise):\n{text}",
                                table)
    return table


def register_sglang_guard(runtime) -> bool:
    """Register ``check_ranks`` as an AFTER hook on sglang's ``initialize_model_parallel`` through
    sglang's HookRegistry (applied by ``load_plugins()``). Returns False when sglang's plugin
    system is not importable or the guard is off."""
    if runtime.resolution.reserved.get("RANK_GUARD", "raise") == "off":
        return False
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:
        return False

    def after(result, *args, **kwargs):
        """HookRegistry AFTER hook: run the guard over the world's CPU group, keep the result."""
        from sglang.srt.distributed.parallel_state import get_world_group

        check_ranks(runtime, get_world_group().cpu_group)
        return result

    HookRegistry.register(GUARD_TARGET, after, HookType.AFTER)
    return True
