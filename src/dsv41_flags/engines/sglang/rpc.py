"""Live switches over sglang's own control path, read from sglang 0.5.23's source:

- ``Engine.collective_rpc(method, **kwargs)`` (entrypoints/engine.py) sends an ``RpcReqInput``
  (managers/io_struct.py: ``method``, ``parameters`` = flat scalars) on a DEALER socket bound to
  ``port_args.rpc_ipc_name``; the entry scheduler rank (``SchedulerIpcChannels.recv_from_rpc``,
  connected to that name) reads it in ``SchedulerRequestReceiver._pull_raw_reqs`` together with
  the tokenizer's requests, ``_broadcast_reqs_across_ranks`` broadcasts them to every TP rank with
  ``broadcast_pyobj`` over the TP CPU group, and every rank's ``Scheduler.handle_rpc_request``
  calls ``getattr(self, method)(**parameters)`` then ``barrier(tp_group.cpu_group)``. So a
  method reached that way runs on every rank at the same point of the input stream, between
  forward steps. Only the entry rank sends the ``RpcReqOutput(success, message)`` back, and
  ``message`` is only filled from an exception.
- The HTTP server (entrypoints/http_server.py ``launch_server``) starts the same subprocesses
  but leaves ``rpc_ipc_name`` unbound (only the offline Engine binds it); the module holds a
  FastAPI ``app`` and passes ``port_args`` to ``_setup_and_run_http_server``.

What this module adds (only when a live feature is declared):

- on ``Scheduler`` (post-import hook on ``sglang.srt.managers.scheduler``): the methods
  ``dsv41_flags_set(name, value, requested_by, request_id)`` and
  ``dsv41_flags_status(request_id)``, and a wrapper of ``handle_rpc_request`` (the framework's
  own patch, through the ledger) that puts our method's JSON answer into the reply's ``message``;
- ``dsv41_flags_set`` is two-phase over the TP CPU group: every rank checks the switch
  (``Runtime.check_switch``) and all-gathers its vote and generation; only when every rank can
  apply and all are on the same generation does each rank apply it (generation + 1, the step =
  ``Scheduler.forward_ct``) and log ``feature.toggled``; otherwise every rank keeps its value and
  logs ``feature.toggle_refused``. A rank whose apply raises makes every rank roll back;

``switch_engine`` / ``engine_status`` are the same two methods for an offline ``Engine`` (its
own ``send_to_rpc``).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from dsv41_flags.errors import FlagsError
from dsv41_flags.live import BUILTIN, SwitchError, feature_name
from dsv41_flags.status import process_status

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
SET_METHOD = "dsv41_flags_set"
STATUS_METHOD = "dsv41_flags_status"
METHODS = (SET_METHOD, STATUS_METHOD)
RPC_TIMEOUT_S = 60.0


# ------------------------------------------------------------------ scheduler side (every rank)
def _runtime():
    from dsv41_flags.activation import current_runtime as runtime

    rt = runtime()
    if rt is None:
        raise SwitchError("dsv41_flags is not active in this scheduler process")
    return rt


def _cpu_group(scheduler):
    group = getattr(scheduler, "tp_group", None)
    return getattr(group, "cpu_group", None)


def _all_gather(obj: Any, group) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` over ``group`` (``[obj]`` without a group)."""
    import torch.distributed as dist

    if group is None or not dist.is_available() or not dist.is_initialized():
        return [obj]
    size = dist.get_world_size(group)
    if size == 1:
        return [obj]
    out: list = [None] * size
    dist.all_gather_object(out, obj, group=group)
    return out


def _who(rt, group) -> dict:
    """pid, role and ranks of this scheduler (tp_rank from the group when the plugin did not
    read it from sglang's frames)."""
    fields = {k: v for k, v in rt.context.as_fields().items() if k != "process"}
    if "tp_rank" not in fields and group is not None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            fields["tp_rank"] = dist.get_rank(group)
    return fields


def _rank_label(entry: dict) -> str:
    parts = [f"{k[:-5]}{entry[k]}" for k in ("tp_rank", "pp_rank", "dp_rank") if entry.get(k) is not None]
    return " ".join(parts) or f"pid {entry.get('pid')}"


def scheduler_set(self, name: str, value: Any = None, requested_by: str = "", request_id: str = ""):
    """``Scheduler.dsv41_flags_set``: run by ``handle_rpc_request`` on every TP rank at the same
    point of the input stream. Two phases over the TP CPU group (see the module docstring).
    Answers (through the reply slot) ``{ok, request_id, feature, old, new, generation, ranks}``;
    raises SwitchError when refused (``handle_rpc_request`` reports it as a failed RPC)."""
    rt = _runtime()
    group = _cpu_group(self)
    step = getattr(self, "forward_ct", None)
    who = _who(rt, group)
    name = feature_name(str(name))
    vote: dict = {"ok": True, "generation": rt.live.generation, "step": step, **who}
    try:
        _, new = rt.check_switch(name, value, requested_by)
        vote["old"] = rt.value(rt.features[name])
    except FlagsError as exc:
        vote.update(ok=False, reason=str(exc))
    votes = _all_gather(vote, group)                              # phase 1: can every rank?
    problems = [f"{_rank_label(v)}: {v['reason']}" for v in votes if not v["ok"]]
    generations = sorted({v["generation"] for v in votes})
    if len(generations) > 1:
        problems.append("ranks are on different generations (" + ", ".join(
            f"{_rank_label(v)}: {v['generation']}" for v in votes) + ")")
    base = {"request_id": request_id, "feature": name, "value": value, "requested_by": requested_by}
    if problems:
        message = (f"switch {name}={value!r} refused, every rank keeps its value and generation "
                   f"{rt.live.generation}: " + "; ".join(problems))
        rt.log.error("feature.toggle_refused", feature=name, value=value, requested_by=requested_by,
                     request_id=request_id, step=step, generation=rt.live.generation,
                     reason="; ".join(problems))
        _answer(rt, {"ok": False, **base, "error": message, "ranks": votes})
        raise SwitchError(message)
    toggle = None
    try:                                                          # phase 2: apply
        toggle = rt.switch(name, new, requested_by=requested_by, generation=generations[0] + 1,
                           step=step, request_id=request_id)
        applied = {"ok": True, **toggle.to_dict(), **who}
    except Exception as exc:  # noqa: BLE001 - reported to every rank, which then roll back
        applied = {"ok": False, "reason": f"{type(exc).__name__}: {exc}", "step": step, **who}
    results = _all_gather(applied, group)
    failed = [f"{_rank_label(r)}: {r['reason']}" for r in results if not r["ok"]]
    if failed:
        reason = "a rank could not apply the switch: " + "; ".join(failed)
        if toggle is not None:
            rt.rollback(toggle, reason)
        message = f"switch {name}={value!r} rolled back on every rank: " + reason
        _answer(rt, {"ok": False, **base, "error": message, "ranks": results})
        raise SwitchError(message)
    _answer(rt, {"ok": True, **base, "old": toggle.old, "new": toggle.new,
                 "changed": toggle.changed, "generation": toggle.generation, "step": step, "ranks": results})


def scheduler_status(self, request_id: str = ""):
    """``Scheduler.dsv41_flags_status``: every TP rank all-gathers its ``process_status`` (plus
    ``step`` = ``forward_ct``); answers ``{ok, request_id, ranks: [...]}``."""
    rt = _runtime()
    group = _cpu_group(self)
    me = process_status(rt, step=getattr(self, "forward_ct", None), **_who(rt, group))
    _answer(rt, {"ok": True, "request_id": request_id, "ranks": _all_gather(me, group)})


def _answer(rt, data: dict) -> None:
    rt.live.reply = json.dumps(data, default=str)


def _make_handle_rpc_request(original):
    """The framework's wrapper of ``Scheduler.handle_rpc_request``: runs sglang's own (call +
    barrier), then, for our methods, puts our JSON answer into ``RpcReqOutput.message`` (sglang
    fills it only from an exception). Other RPCs are untouched."""

    def handle_rpc_request(self, recv_req):
        from dsv41_flags.activation import current_runtime as runtime

        rt = runtime()
        ours = rt is not None and getattr(recv_req, "method", None) in METHODS
        if ours:
            rt.live.reply = None
        output = original(self, recv_req)
        if ours and rt.live.reply is not None:
            output.message, rt.live.reply = rt.live.reply, None
        return output

    return handle_rpc_request


def install_scheduler_rpc(rt, module) -> None:
    """Give ``module.Scheduler`` the live-switch RPC methods and the reply wrapper (idempotent;
    the wrapper goes through the ledger, so ``uninstall()`` restores sglang's own)."""
    cls = module.Scheduler
    setattr(cls, SET_METHOD, scheduler_set)
    setattr(cls, STATUS_METHOD, scheduler_status)
    rt.ledger.patch(BUILTIN, cls, "handle_rpc_request", _make_handle_rpc_request)


# ------------------------------------------------------------------ client side
class RpcClient:
    """Sends ``RpcReqInput`` on sglang's RPC channel (a DEALER socket: the offline Engine's
    ``send_to_rpc``, or the one the HTTP server process binds) and returns our method's answer.

    Replies carry the request id: a late reply of an earlier call that timed out is skipped.
    One call at a time (a lock)."""

    def __init__(self, socket):
        self.socket = socket
        self.lock = threading.Lock()

    def call(self, method: str, timeout_s: float = RPC_TIMEOUT_S, **params: Any) -> dict:
        """Send ``method(**params)`` to every scheduler rank; returns the decoded answer
        (``{"ok": bool, ...}``). Raises SwitchError when no answer comes within ``timeout_s``."""
        from sglang.srt.managers.io_struct import RpcReqInput, RpcReqOutput, sock_recv, sock_send

        request_id = uuid.uuid4().hex[:16]
        with self.lock:
            sock_send(self.socket, RpcReqInput(method=method,
                                               parameters={**params, "request_id": request_id}))
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.socket.poll(int(remaining * 1000)):
                    raise SwitchError(
                        f"{method}: no answer from the scheduler within {timeout_s:g} s (a rank "
                        f"busy in a long step, or hung?); the request may still be applied: "
                        f"check with dsv41-flags status --url")
                out = sock_recv(self.socket)
                if not isinstance(out, RpcReqOutput):
                    continue
                try:
                    data = json.loads(out.message) if out.message else None
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    return {"ok": False, "error": (
                        f"the schedulers answered {method} with "
                        f"{'success' if out.success else 'an error'}: {out.message or '(no message)'}"
                        + ("" if out.success else " (is dsv41_flags active in the scheduler "
                           "processes, with a live feature declared?)"))}
                if data.get("request_id") not in (None, request_id):
                    continue  # the late answer of an earlier call
                return data


def switch_engine(engine, name: str, value: Any, *, requested_by: str = "python",
                  timeout_s: float = RPC_TIMEOUT_S) -> dict:
    """Switch live feature ``name`` on every scheduler rank of an offline ``sglang.Engine``
    (node 0), in lockstep. Returns ``{ok, feature, old, new, generation, step, ranks}``.
    Raises SwitchError with the ranks' reasons when refused. Do not call it concurrently with
    ``Engine.collective_rpc`` (one socket)."""
    data = _engine_client(engine).call(SET_METHOD, timeout_s, name=feature_name(name), value=value,
                                       requested_by=requested_by)
    if not data.get("ok"):
        raise SwitchError(data.get("error") or json.dumps(data))
    return data


def engine_status(engine, *, timeout_s: float = RPC_TIMEOUT_S) -> dict:
    """Every scheduler rank's status of an offline ``sglang.Engine``: ``{ok, ranks: [...]}``
    (each rank: the ``status --json`` shape plus pid, role, ranks, generation, step, switches)."""
    return _engine_client(engine).call(STATUS_METHOD, timeout_s)


def _engine_client(engine) -> RpcClient:
    socket = getattr(engine, "send_to_rpc", None)
    if socket is None:
        raise SwitchError("this Engine has no RPC socket (only node 0 of a launch binds it)")
    return RpcClient(socket)
