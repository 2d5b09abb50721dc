"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Live switches over sglang's own control path, read from sglang 0.5.23's source.

How a control request reaches the schedulers:

- ``Engine.collective_rpc(method, **kwargs)`` (entrypoints/engine.py) sends an ``RpcReqInput``
  (managers/io_struct.py: ``method``, ``parameters`` = flat scalars) on a DEALER socket bound to
  ``port_args.rpc_ipc_name``; the entry scheduler rank (``SchedulerIpcChannels.recv_from_rpc``)
  reads it in ``SchedulerRequestReceiver._pull_raw_reqs`` together with the tokenizer's requests.
- The same ``RpcReqInput`` sent on the tokenizer manager's ``send_to_scheduler`` (the HTTP
  server's path, ``http``) reaches the entry rank of every data-parallel group: with
  ``--dp-size`` the ``DataParallelController`` (managers/data_parallel_controller.py) sends every
  request type it does not dispatch itself to ``send_control_message``, one copy per DP group's
  entry rank (with DP attention, to the first entry rank only: its TP group spans every DP rank).
- ``_broadcast_reqs_across_ranks`` broadcasts the requests to every rank of the TP group with
  ``broadcast_pyobj`` over the TP CPU group, and every rank's ``Scheduler.handle_rpc_request``
  calls ``getattr(self, method)(**parameters)`` then ``barrier(tp_group.cpu_group)``: a method
  reached that way runs on every rank of one TP group at the same point of the input stream,
  between forward steps. The entry rank's ``RpcReqOutput(success, message)`` goes back on
  ``recv_from_rpc`` (``message`` only filled from an exception).

What this module adds (only when a live feature is declared):

- on ``Scheduler`` (post-import hook on ``sglang.srt.managers.scheduler``): the methods
  ``dsv41_flags_set`` and ``dsv41_flags_status``, and a wrapper of ``handle_rpc_request`` (the
  framework's own patch, through the ledger) that carries our method's JSON answer back: into
  ``RpcReqOutput.message``, or, when the request names a ``reply_to`` address, pushed there by
  the rank 0 of each TP group (one answer per DP group; no ``RpcReqOutput`` is sent then);
- ``dsv41_flags_set`` is two-phase over the TP CPU group: every rank checks the switch
  (``Runtime.check_switch``) and all-gathers its vote and generation; only when every rank can
  apply and all are on the same generation (and on ``expect_generation`` when given) does each
  rank apply it (generation + 1, the step = ``Scheduler.forward_ct``) and log
  ``feature.toggled``; otherwise every rank keeps its value and logs ``feature.toggle_refused``.
  A rank whose apply raises makes every rank roll back. A switch to the value every rank
  already has is a no-op: each rank keeps its generation and logs ``feature.toggle_unchanged``
  (who asked is on record). ``phase="check"`` only votes;
  ``phase="rollback"`` undoes the switch of request ``undo`` (the HTTP server's two phases
  across DP groups, which share no process group);
- ``switch_engine`` / ``engine_status``: the same two methods for an offline ``Engine`` (its
  own ``send_to_rpc``; one TP group), the switch in ``peers.switch_launch``'s order.

Every answer is bounded: request fields are checked by the HTTP route (``http``) and again here
(``bounded_text``), the history each rank reports is the runtime's (bounded there).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from dsv41_flags.errors import FlagsError
from dsv41_flags.live import BUILTIN, SwitchError, check_requested_by, feature_name
from dsv41_flags.status import process_status, serving
from dsv41_flags.text import exception_text
from dsv41_flags.wire import dumps

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


def _who(rt, group, scheduler=None) -> dict:
    """pid, role and ranks of this scheduler (tp_rank from the group and dp_rank from the
    scheduler when the plugin did not read them from sglang's frames)."""
    fields = {k: v for k, v in rt.context.as_fields().items() if k != "process"}
    dp_rank = getattr(scheduler, "dp_rank", None)
    if "dp_rank" not in fields and isinstance(dp_rank, int):
        fields["dp_rank"] = dp_rank
    if "tp_rank" not in fields and group is not None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            fields["tp_rank"] = dist.get_rank(group)
    return fields


def _rank_label(entry: dict) -> str:
    parts = [f"{k[:-5]}{entry[k]}" for k in ("tp_rank", "pp_rank", "dp_rank") if entry.get(k) is not None]
    return " ".join(parts) or f"pid {entry.get('pid')}"


#: longest feature name and ``request_id`` a request may carry (characters); ``requested_by``
#: follows the runtime's rule (``live.check_requested_by``)
MAX_NAME = 128
MAX_REQUEST_ID = 64
PHASES = ("both", "check", "rollback")


def bounded_text(field: str, value: Any, limit: int) -> str:
    """``value`` as short printable text: a str of at most ``limit`` characters without control
    characters. Raises SwitchError naming the field, the value's type or length, and the limit."""
    if not isinstance(value, str):
        raise SwitchError(f"{field} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise SwitchError(f"{field} is {len(value)} characters long; at most {limit} are accepted")
    if any(ord(c) < 32 or ord(c) == 127 or 0x80 <= ord(c) < 0xA0 for c in value):
        raise SwitchError(f"{field} holds a control character; printable text only")
    return value


def _vote(rt, name: str, value: Any, requested_by: str, who: dict, step,
          expect_generation: int) -> dict:
    vote: dict = {"ok": True, "generation": rt.live.generation, "step": step, **who}
    try:
        _, new = rt.check_switch(name, value, requested_by)
        vote.update(old=rt.value(rt.features[name]), new=new)
        if expect_generation >= 0 and rt.live.generation != expect_generation:
            raise SwitchError(f"generation {rt.live.generation}, the request expected "
                              f"{expect_generation} (another switch came first)")
    except FlagsError as exc:
        vote.update(ok=False, reason=str(exc))
    return vote


def scheduler_set(self, name: str, value: Any = None, requested_by: str = "", request_id: str = "",
                  phase: str = "both", expect_generation: int = -1, undo: str = ""):
    """``Scheduler.dsv41_flags_set``: run by ``handle_rpc_request`` on every rank of one TP
    group at the same point of the input stream. Two phases over the TP CPU group (see the module
    docstring). Answers (through the reply slot) ``{ok, request_id, feature, old, new,
    generation, changed, ranks}``; ``phase="check"`` answers the votes and changes nothing;
    ``phase="rollback"`` undoes the switch applied by request ``undo`` on every rank where it is
    the last one. Raises SwitchError when refused (``handle_rpc_request`` reports a failed RPC)."""
    rt = _runtime()
    group = _cpu_group(self)
    step = getattr(self, "forward_ct", None)
    who = _who(rt, group, self)
    base = {"request_id": request_id, "groups": _groups(), "phase": phase}
    try:
        name = feature_name(bounded_text("name", name, MAX_NAME))
        requested_by = check_requested_by(requested_by)
        bounded_text("request_id", request_id, MAX_REQUEST_ID)
        if phase not in PHASES:
            raise SwitchError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
        if phase != "rollback" and (not isinstance(value, (bool, int, str))
                                    or (isinstance(value, str) and len(value) > 16)):
            raise SwitchError(f"value must be a bool or an on/off word, got {type(value).__name__}")
    except SwitchError as exc:  # the same on every rank: no collective needed
        _answer(rt, {"ok": False, **base, "error": str(exc), "ranks": []})
        raise
    base.update(feature=name, value=value, requested_by=requested_by)
    if phase == "rollback":
        last = rt.live.history[-1] if rt.live.history else None
        undone = last is not None and bool(undo) and last.request_id == undo
        if undone:
            rt.rollback(last, f"another data-parallel group could not apply request {undo}")
        results = _all_gather({"ok": True, "undone": undone, "generation": rt.live.generation,
                               "step": step, **who}, group)
        _answer(rt, {"ok": True, **base, "generation": rt.live.generation, "ranks": results})
        return
    votes = _all_gather(_vote(rt, name, value, requested_by, who, step, int(expect_generation)),
                        group)
    problems = [f"{_rank_label(v)}: {v['reason']}" for v in votes if not v["ok"]]
    generations = sorted({v["generation"] for v in votes})
    if len(generations) > 1:
        problems.append("ranks are on different generations (" + ", ".join(
            f"{_rank_label(v)}: {v['generation']}" for v in votes) + ")")
    if problems:
        message = (f"switch {name}={value!r} refused, every rank keeps its value and generation "
                   f"{rt.live.generation}: " + "; ".join(problems))
        rt.log.error("feature.toggle_refused", feature=name, value=value, requested_by=requested_by,
                     request_id=request_id, step=step, generation=rt.live.generation,
                     reason="; ".join(problems))
        _answer(rt, {"ok": False, **base, "error": message, "ranks": votes})
        if phase == "check":
            return
        raise SwitchError(message)
    if phase == "check":                                          # the votes only
        unchanged = all(v["old"] == v["new"] for v in votes)
        _answer(rt, {"ok": True, **base, "old": votes[0]["old"], "new": votes[0]["new"],
                     "changed": not unchanged, "generation": generations[0], "step": step,
                     "ranks": votes})
        return
    toggle = None
    try:                                                          # phase 2: apply
        toggle = rt.switch(name, value, requested_by=requested_by, generation=generations[0] + 1,
                           step=step, request_id=request_id)
        applied = {"ok": True, **toggle.to_dict(), **who}
    except Exception as exc:  # noqa: BLE001 - reported to every rank, which then roll back
        applied = {"ok": False, "reason": f"{exception_text(exc)}", "step": step, **who}
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
                 "changed": toggle.changed, "generation": toggle.generation, "step": step,
                 "ranks": results})


def scheduler_status(self, request_id: str = ""):
    """``Scheduler.dsv41_flags_status``: every rank of the TP group all-gathers its
    ``process_status`` (plus ``step`` = ``forward_ct``); answers ``{ok, request_id, groups,
    ranks: [...]}``."""
    rt = _runtime()
    group = _cpu_group(self)
    me = process_status(rt, step=getattr(self, "forward_ct", None), serving=serving(rt),
                        **_who(rt, group, self)).model_dump(mode="json")
    _answer(rt, {"ok": True, "request_id": request_id, "groups": _groups(),
                 "ranks": _all_gather(me, group)})


def _groups() -> int:
    """How many TP groups one control request reaches: the DP size without DP attention (the
    controller sends one copy per DP group), else 1 (one TP group spans every DP rank); 1 when
    sglang's runtime context is not published (a seam without a server)."""
    try:
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        if parallel.attn_dp_enabled and not parallel.enable_dp_attention_local_control_broadcast:
            return 1
        return max(int(parallel.num_dp_ranks), 1)
    except Exception:  # noqa: BLE001 - no published context: one group
        return 1


def _answer(rt, data: dict) -> None:
    rt.live.reply = dumps(data)


def _group_entry(scheduler) -> bool:
    """True on the rank that answers for its TP group: rank 0 of the TP CPU group (the rank
    that broadcast the request to the others)."""
    group = _cpu_group(scheduler)
    if group is None:
        return True
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return True
    return dist.get_rank(group) == 0


def _push_reply(address: str, message: str) -> None:
    """Send ``message`` to the HTTP server process waiting at ``address`` (a zmq PULL socket it
    bound); never blocks the scheduler: a peer that went away loses the message."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.PUSH)
    try:
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        sock.connect(address)
        sock.send_string(message)
    except zmq.ZMQError:
        pass
    finally:
        sock.close()


def _make_handle_rpc_request(original):
    """The framework's wrapper of ``Scheduler.handle_rpc_request``: runs sglang's own (call +
    barrier), then, for our methods, carries our JSON answer back: pushed to the request's
    ``reply_to`` by the rank that answers for its TP group (and no ``RpcReqOutput``: None is
    what the scheduler sends nothing for), else put into ``RpcReqOutput.message`` (sglang fills
    it only from an exception). Other RPCs are untouched."""

    def handle_rpc_request(self, recv_req):
        from dsv41_flags.activation import current_runtime as runtime

        rt = runtime()
        ours = rt is not None and getattr(recv_req, "method", None) in METHODS
        if not ours:
            return original(self, recv_req)
        rt.live.reply = None
        params = getattr(recv_req, "parameters", None)
        reply_to = params.pop("reply_to", "") if isinstance(params, dict) else ""
        output = original(self, recv_req)
        reply, rt.live.reply = rt.live.reply, None
        if reply is None:
            reply = json.dumps({"ok": False, "request_id": (params or {}).get("request_id", ""),
                                "groups": _groups(), "ranks": [],
                                "error": getattr(output, "message", "") or "no answer"})
        if isinstance(reply_to, str) and reply_to.startswith(("ipc://", "tcp://")):
            if _group_entry(self):
                _push_reply(reply_to, reply)
            return None
        output.message = reply
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
    ``send_to_rpc``) and returns our method's answer (one TP group: the Engine's).

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
    """Switch live feature ``name`` in every process of an offline ``sglang.Engine`` (node 0),
    in ``peers.switch_launch``'s order over the Engine's RPC socket: the ranks vote, then this
    process and the Engine's other processes; every scheduler rank applies it in lockstep, then
    the other processes. Without a runtime in this process only the ranks are asked (one apply).
    Returns ``{ok, feature, old, new, generation, step, ranks, processes}``. Raises SwitchError
    with the reasons when refused or when a rank or a process failed to apply it (a process
    that fails makes every rank and process that applied it roll back), and when no answer
    comes within ``timeout_s`` seconds. Do not call it concurrently with
    ``Engine.collective_rpc`` (one socket)."""
    from dsv41_flags.activation import current_runtime
    import dsv41_flags.engines.sglang.peers as peers

    rt = current_runtime()
    params = {"name": feature_name(name), "value": value, "requested_by": requested_by}
    client = _engine_client(engine)
    if rt is None:
        data = client.call(SET_METHOD, timeout_s, **params)
    else:
        data = peers.switch_launch(
            rt, params,
            check=lambda: client.call(SET_METHOD, timeout_s, phase="check", **params),
            # one socket, one call at a time: the ranks apply without expect_generation
            apply_ranks=lambda generation: client.call(SET_METHOD, timeout_s, **params),
            rollback_ranks=lambda request_id: client.call(SET_METHOD, timeout_s, phase="rollback",
                                                          undo=request_id, **params))
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
