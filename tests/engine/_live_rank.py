"""One scheduler rank of the lockstep live-switch test, run in a ``spawn``-ed process (see
test_live_lockstep.py). Real: a gloo world of two processes and a TP CPU group, sglang's
``Scheduler`` class with its own ``handle_rpc_request`` (on an instance made without
``__init__``: a real one needs a model), sglang's ``RpcReqInput`` / ``RpcReqOutput`` sent with
sglang's ``sock_send`` / ``sock_recv`` over a zmq DEALER pair made by sglang's ``get_zmq_socket``
(the client end bound, as the offline Engine binds ``rpc_ipc_name``; the entry rank's end
connected, as ``SchedulerIpcChannels`` connects it), sglang's ``broadcast_pyobj`` over the TP CPU
group (what ``SchedulerRequestReceiver._broadcast_reqs_across_ranks`` does with the control
requests), and the real ``folded_fence`` target: each step is one verify replay of a real
``DsparkVerifyEpilogue`` and the folded read through the (patched) ``TargetVerifyExecutor``.

The loop mirrors ``Scheduler.recv_requests`` + ``process_input_requests`` + one forward per
step; the entry rank's client thread sends the switches mid-stream with dsv41_flags' own
``RpcClient``. The rank reports what it saw; the parent asserts.
"""
from __future__ import annotations

import os
import threading
import time
import traceback
import types
from datetime import timedelta

FAULT_STEP = 12      # rank 1 loses its folded_fence patch here (uninstalled): it cannot apply
MAX_STEPS = 3000     # a bound: the loop stops long before unless something hangs
STEP_SLEEP_S = 0.01  # a forward step's duration, so client requests land mid-stream
STOP = "__stop__"


def run_rank(rank: int, init_file: str, ipc: str, repo: str, tests_dir: str, queue) -> None:
    try:
        queue.put((rank, "done", _run(rank, init_file, ipc, repo, tests_dir)))
    except BaseException:  # noqa: BLE001 - the parent shows it
        queue.put((rank, "error", traceback.format_exc()))


def _run(rank: int, init_file: str, ipc: str, repo: str, tests_dir: str) -> dict:
    import sys

    for key in [k for k in os.environ if k.startswith("DSV41_")]:
        del os.environ[key]
    os.environ.update({"DSV41_SETTINGS": os.path.join(repo, "settings.toml"), "DSV41_LOG_FORMAT": "json"})
    sys.path.insert(0, tests_dir)

    import torch.distributed as dist
    import zmq
    from structlog.testing import capture_logs

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=90))
    try:
        tp_cpu_group = dist.new_group(ranks=[0, 1], backend="gloo")

        import dsv41_flags
        from dsv41_flags.engines.sglang.processes import arm_live
        from dsv41_flags.engines.sglang.rpc import METHODS, RpcClient

        rt = dsv41_flags.activate(role="scheduler")
        rt.context.update(tp_rank=rank, pp_rank=0)
        import sglang.srt.managers.scheduler as sched_mod
        import sglang.srt.speculative.dspark_components.dspark_verify as dv
        from sglang.srt.distributed.parallel_state import GroupCoordinator
        from sglang.srt.managers.io_struct import RpcReqInput, RpcReqOutput, sock_recv, sock_send
        from sglang.srt.utils import broadcast_pyobj
        from sglang.srt.utils.network import get_zmq_socket

        arm_live(rt)  # as the plugin does: the scheduler module is imported -> methods installed
        assert all(callable(getattr(sched_mod.Scheduler, m, None)) for m in METHODS)
        folded = {s.name: s.state for s in rt.states()}["folded_fence"]

        # the real folded_fence target (its TP sync over a one-rank group: no verify-time collective)
        import test_folded_fence as tf
        solo = GroupCoordinator(group_ranks=[[0], [1]], local_rank=rank, torch_distributed_backend="gloo",
                                use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False,
                                use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
                                use_xpu_communicator=False, group_name="dsv41_live_solo")
        rig = tf.Rig(solo)

        # a Scheduler without __init__ (a real one loads a model): what handle_rpc_request reads
        sched = sched_mod.Scheduler.__new__(sched_mod.Scheduler)
        sched.tp_group = types.SimpleNamespace(cpu_group=tp_cpu_group)
        sched.forward_ct = 0

        ctx = zmq.Context()
        replies: list = []
        client_error: list = []
        step_now = [0]
        client_done = threading.Event()
        recv_from_rpc = None
        if rank == 0:
            client_sock = get_zmq_socket(ctx, zmq.DEALER, ipc, True)    # the Engine's end
            recv_from_rpc = get_zmq_socket(ctx, zmq.DEALER, ipc, False)  # the entry rank's end
            client = RpcClient(client_sock)

            def wait_step(n):
                while step_now[0] < n:
                    time.sleep(0.002)

            def operator():
                try:
                    wait_step(4)
                    replies.append(("set_on", client.call(METHODS[0], 60, name="folded_fence",
                                                          value=True, requested_by="test-operator")))
                    replies.append(("status_1", client.call(METHODS[1], 60)))
                    wait_step(FAULT_STEP + 3)
                    replies.append(("set_off", client.call(METHODS[0], 60, name="folded_fence",
                                                           value=False, requested_by="test-operator")))
                    replies.append(("status_2", client.call(METHODS[1], 60)))
                    replies.append(("not_live", client.call(METHODS[0], 60, name="autotune_keep",
                                                            value=False, requested_by="test-operator")))
                except BaseException:  # noqa: BLE001
                    client_error.append(traceback.format_exc())
                finally:
                    client_done.set()

            threading.Thread(target=operator, daemon=True).start()

        steps = []
        with capture_logs() as events:
            for step in range(MAX_STEPS):
                sched.forward_ct = step
                step_now[0] = step
                if rank == 0:  # SchedulerRequestReceiver._pull_raw_reqs on the entry rank
                    reqs = []
                    while True:
                        try:
                            reqs.append(sock_recv(recv_from_rpc, zmq.NOBLOCK))
                        except zmq.ZMQError:
                            break
                    if client_done.is_set() and step > FAULT_STEP + 6:
                        reqs.append(STOP)
                else:
                    reqs = None
                reqs = broadcast_pyobj(reqs, rank, tp_cpu_group, src=0)  # the control broadcast
                if STOP in reqs:
                    break
                for req in reqs:                                       # process_input_requests
                    assert isinstance(req, RpcReqInput), req
                    output = sched.handle_rpc_request(req)
                    if isinstance(output, RpcReqOutput) and recv_from_rpc is not None:
                        sock_send(recv_from_rpc, output)
                if rank == 1 and step == FAULT_STEP:
                    rt.uninstall("folded_fence")                      # this rank's patch is gone
                # one forward: a verify replay and the folded read through the patched executor
                rig.replay(tf.STEP_A if step % 2 else tf.STEP_B)
                outs = rig.folded()
                fenced = not tf._shares_storage(outs.out_tokens, rig.buffer("out_tokens"))
                gate = rt.live.gates["folded_fence"].on
                steps.append({"step": step, "gate": gate, "generation": rt.live.generation,
                              "fenced": fenced})
                time.sleep(STEP_SLEEP_S)
        if rank == 0:
            client_done.wait(30)
        return {"rank": rank, "boot_state": folded, "steps": steps, "replies": replies,
                "client_error": client_error,
                "events": [{k: v for k, v in e.items() if isinstance(v, (str, int, float, bool, type(None), list))}
                           for e in events if e["event"].startswith("feature.")],
                "generation": rt.live.generation,
                "history": [t.to_dict() for t in rt.live.history]}
    finally:
        dist.destroy_process_group()
