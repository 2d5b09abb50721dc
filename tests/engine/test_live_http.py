"""Engine tier: the operator's path. ``dsv41-flags set NAME=VALUE --url`` and
``dsv41-flags status --url`` against sglang's real HTTP ``app`` (served by uvicorn on a free
port, lifespan off: no model) with dsv41_flags' routes, which send sglang's ``RpcReqInput`` on
sglang's RPC channel (zmq DEALER pair from sglang's ``get_zmq_socket``) to an entry scheduler
rank: a thread running sglang's real ``Scheduler.handle_rpc_request`` on a Scheduler made without
``__init__`` (TP world of one gloo rank). What a full server adds (model, CUDA graphs, the
subprocesses) needs a GPU; the lockstep across ranks is test_live_lockstep.py's.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from typer.testing import CliRunner

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")
http_mod = pytest.importorskip("sglang.srt.entrypoints.http_server")

import torch.distributed as dist  # noqa: E402
import uvicorn  # noqa: E402
import zmq  # noqa: E402
import sglang.srt.managers.scheduler as sched_mod  # noqa: E402
from sglang.srt.managers.io_struct import sock_recv, sock_send  # noqa: E402
from sglang.srt.utils.network import get_zmq_socket  # noqa: E402

from dsv41_flags.activation import process_state, set_process_state  # noqa: E402
from dsv41_flags.cli import app as cli_app  # noqa: E402
from dsv41_flags.runtime import build  # noqa: E402
from dsv41_flags.engines.sglang.http import SET_PATH, STATUS_PATH  # noqa: E402
from dsv41_flags.engines.sglang.processes import arm_live  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("dsv41-flags"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("live_http")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{work / 'pg'}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    rt = build([REPO / "settings.toml"], None, environ={}, argv=[], features_dir=REPO / "features",
               use_snapshot=False, configure_logging=False)
    rt.context.update(role="scheduler", tp_rank=0, pp_rank=0)
    previous = process_state()
    set_process_state((rt, None))       # this process's runtime (server and scheduler alike here)
    rt.arm()
    assert arm_live(rt)                 # both modules are imported: the hooks fire at once
    assert hasattr(sched_mod.Scheduler, "dsv41_flags_set")
    assert {SET_PATH, STATUS_PATH} <= {getattr(r, "path", None) for r in http_mod.app.routes}
    assert http_mod._setup_and_run_http_server.__wrapped__ is not None  # captures port_args

    ipc = f"ipc://{work / 'rpc'}"
    rt.live.transport["rpc_endpoint"] = ipc   # what the _setup_and_run_http_server wrapper records
    stop = threading.Event()
    sched = sched_mod.Scheduler.__new__(sched_mod.Scheduler)
    sched.tp_group = types.SimpleNamespace(cpu_group=dist.new_group([0], backend="gloo"))
    sched.forward_ct = 0

    def entry_rank():
        ctx = zmq.Context()
        sock = get_zmq_socket(ctx, zmq.DEALER, ipc, False)
        while not stop.is_set():
            sched.forward_ct += 1           # one forward step per poll
            if sock.poll(20):
                out = sched.handle_rpc_request(sock_recv(sock))
                sock_send(sock, out)
        sock.close(linger=0)

    threading.Thread(target=entry_rank, daemon=True).start()
    port = _free_port()
    uv = uvicorn.Server(uvicorn.Config(http_mod.app, host="127.0.0.1", port=port, lifespan="off",
                                       log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started
    try:
        with capture_logs() as events:  # the events as dicts (and off the CLI runner's stdout)
            yield types.SimpleNamespace(url=f"http://127.0.0.1:{port}", rt=rt, events=events)
    finally:
        uv.should_exit = True
        thread.join(10)
        stop.set()
        client = rt.live.transport.pop("client", None)
        if client is not None:
            client.socket.close(linger=0)
        rt.uninstall()
        set_process_state(previous)
        dist.destroy_process_group()


def _cli(*args):
    return CliRunner().invoke(cli_app, list(args))


def test_set_through_the_command_switches_the_scheduler_and_status_shows_it(server):
    proc = subprocess.run([CLI, "set", "folded_fence=on", "--url", server.url, "--by", "alice"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "folded_fence: off -> on, generation 1, on 1 rank(s) at step" in proc.stdout
    assert server.rt.live.gates["folded_fence"].on is True
    toggle = server.rt.live.history[-1]
    assert (toggle.requested_by, toggle.generation) == ("alice", 1) and toggle.step > 0
    (ev,) = [e for e in server.events if e["event"] == "feature.toggled"]
    assert (ev["feature"], ev["old"], ev["new"], ev["generation"], ev["step"], ev["requested_by"]) == \
        ("folded_fence", False, True, 1, toggle.step, "alice")
    assert ev["role"] == "scheduler" and ev["tp_rank"] == 0

    res = _cli("status", "--url", server.url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] and data["generations_agree"]
    (rank,) = data["ranks"]
    assert rank["tp_rank"] == 0 and rank["generation"] == 1 and rank["step"] >= toggle.step
    ff = {f["name"]: f for f in rank["features"]}["folded_fence"]
    assert ff["value"] is True and ff["live"] is True
    assert ff["source"].startswith("live switch generation 1 by alice")
    assert rank["switches"][0]["step"] == toggle.step
    assert data["server"]["pid"] == rank["pid"]       # one process plays both parts here

    human = _cli("status", "--url", server.url)
    assert human.exit_code == 0
    assert "1 scheduler rank(s), generation 1 on every rank" in human.stdout
    assert "switch generation 1: folded_fence off -> on by alice at step" in human.stdout


def test_set_refuses_a_feature_that_is_not_live_safe(server):
    before = server.rt.live.generation
    res = _cli("set", "autotune_keep=off", "--url", server.url)
    assert res.exit_code == 1
    assert "'autotune_keep' is not live-safe" in res.stderr and "relaunch" in res.stderr
    assert server.rt.live.generation == before


def test_set_with_a_bad_value_or_body_is_a_clear_400(server):
    res = _cli("set", "folded_fence=maybe", "--url", server.url, "--json")  # refused before sending
    assert res.exit_code == 2
    assert "switch folded_fence='maybe': the value is not one of" in json.loads(res.stdout)["error"]
    from dsv41_flags.engines.sglang.http import http_set

    answer = http_set(server.url, "folded_fence", "maybe", "t")  # the server refuses it too
    assert answer["ok"] is False and "switch folded_fence='maybe': the value is not one of" in answer["error"]
    req = urllib.request.Request(server.url + SET_PATH, data=b"[1]", method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=30)
    assert exc.value.code == 400 and b"expected a JSON body" in exc.value.read()


def test_switch_off_again(server):
    res = _cli("set", "DSV41_FOLDED_FENCE=0", "--url", server.url, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] and data["new"] is False and data["generation"] == server.rt.live.generation
    assert server.rt.live.gates["folded_fence"].on is False
