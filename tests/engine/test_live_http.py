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
import zmq.asyncio  # noqa: E402
import sglang.srt.managers.scheduler as sched_mod  # noqa: E402
from sglang.srt.managers.io_struct import sock_recv  # noqa: E402
from sglang.srt.utils.network import get_zmq_socket  # noqa: E402

from dsv41_flags.activation import process_state, set_process_state  # noqa: E402
from dsv41_flags.cli import app as cli_app  # noqa: E402
from dsv41_flags.assembly import build  # noqa: E402
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

    # the tokenizer manager's channel to the schedulers (``send_to_scheduler``, a PUSH socket that
    # binds ``scheduler_input_ipc_name``), as sglang's ``_setup_and_run_http_server`` publishes it
    ipc = f"ipc://{work / 'scheduler_input'}"
    push = get_zmq_socket(zmq.asyncio.Context(), zmq.PUSH, ipc, True)
    previous_state = http_mod.get_global_state()
    http_mod.set_global_state(types.SimpleNamespace(
        tokenizer_manager=types.SimpleNamespace(send_to_scheduler=push), template_manager=None,
        scheduler_info={}))
    stop = threading.Event()
    sched = sched_mod.Scheduler.__new__(sched_mod.Scheduler)
    sched.tp_group = types.SimpleNamespace(cpu_group=dist.new_group([0], backend="gloo"))
    sched.forward_ct = 0

    def entry_rank():
        """The entry scheduler rank: reads the tokenizer's channel and dispatches an
        ``RpcReqInput`` to ``handle_rpc_request``; an output other than None goes back on the
        RPC socket (sglang's ``process_input_requests``), here nowhere."""
        ctx = zmq.Context()
        sock = get_zmq_socket(ctx, zmq.PULL, ipc, False)
        while not stop.is_set():
            sched.forward_ct += 1           # one forward step per poll
            if sock.poll(20):
                out = sched.handle_rpc_request(sock_recv(sock))
                assert out is None          # answered on the request's reply_to
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
        control = rt.live.transport.pop("control", None)
        if control is not None:
            control.socket.close(linger=0)
        rt.live.transport.pop("control_lock", None)
        push.close(linger=0)
        http_mod.set_global_state(previous_state)
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


def _post(url: str, raw: bytes, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url + SET_PATH, data=raw, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


BAD_REQUESTS = {
    "requested_by over 256 characters": {"name": "folded_fence", "value": "on", "requested_by": "x" * 257},
    "requested_by not text": {"name": "folded_fence", "value": "on", "requested_by": ["alice"]},
    "name not text": {"name": {"a": 1}, "value": "on"},
    "name too long": {"name": "f" * 500, "value": "on"},
    "value a list": {"name": "folded_fence", "value": ["on"]},
    "value a long word": {"name": "folded_fence", "value": "on" * 50},
    "request_id with spaces": {"name": "folded_fence", "value": "on", "request_id": "a b"},
    "an unknown field": {"name": "folded_fence", "value": "on", "extra": "x" * 100},
}


@pytest.mark.parametrize("why", sorted(BAD_REQUESTS))
def test_every_field_of_a_set_request_is_bounded(server, why):
    before = (server.rt.live.generation, len(server.rt.live.history))
    status, body = _post(server.url, json.dumps(BAD_REQUESTS[why]).encode())
    assert status == 400 and body["ok"] is False and body["error"], (why, body)
    assert (server.rt.live.generation, len(server.rt.live.history)) == before


def test_a_body_over_the_limit_is_refused_unread(server):
    from dsv41_flags.engines.sglang.http import MAX_BODY

    big = json.dumps({"name": "folded_fence", "value": "on", "requested_by": "y" * (50 * MAX_BODY)})
    status, body = _post(server.url, big.encode())
    assert status == 400 and f"at most {MAX_BODY} are accepted" in body["error"]


def test_a_switch_to_the_current_value_changes_nothing(server):
    on = server.rt.live.gates["folded_fence"].on
    before = (server.rt.live.generation, len(server.rt.live.history))
    status, body = _post(server.url, json.dumps({"name": "folded_fence", "value": on,
                                                 "requested_by": "y" * 256}).encode())
    assert status == 200 and body["ok"] is True and body["changed"] is False, body
    assert body["generation"] == before[0]
    assert (server.rt.live.generation, len(server.rt.live.history)) == before
    assert [e for e in server.events if e["event"] == "feature.toggle_unchanged"
            and e["requested_by"] == "y" * 256]


# ------------------------------------------------------------------ who may call the routes
API_KEY, ADMIN_KEY = "api-key-value", "admin-key-value"
CREDENTIALS = {"no key": None, "a wrong key": "wrong", "the api key": API_KEY,
               "the admin key": ADMIN_KEY}
KEYS = {"neither key": (None, None), "only --api-key": (API_KEY, None),
        "only --admin-api-key": (None, ADMIN_KEY), "both keys": (API_KEY, ADMIN_KEY)}


@pytest.mark.parametrize("config", sorted(KEYS))
def test_the_routes_admit_exactly_whom_flush_cache_admits(server, config):
    """sglang's real key middleware (``add_api_key_middleware``) over an app holding sglang's own
    ``/flush_cache`` endpoint and our two routes: for every key configuration and every
    credential, our routes are refused exactly when ``/flush_cache`` is (ADMIN_OPTIONAL)."""
    from fastapi import FastAPI
    from sglang.srt.utils.auth import add_api_key_middleware
    from starlette.testclient import TestClient

    from dsv41_flags.engines.sglang.http import install_http_routes

    api_key, admin_key = KEYS[config]
    app = FastAPI()
    app.add_api_route("/flush_cache", http_mod.flush_cache, methods=["GET", "POST"])
    install_http_routes(server.rt, types.SimpleNamespace(
        app=app, get_global_state=lambda: types.SimpleNamespace(tokenizer_manager=None)))
    add_api_key_middleware(app, api_key=api_key, admin_api_key=admin_key)
    seen = {}
    with TestClient(app, raise_server_exceptions=False) as client:
        for who, key in CREDENTIALS.items():
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            flush = client.post("/flush_cache", headers=headers).status_code
            # a switch to the current value, answered without the schedulers once admitted
            set_ = client.post(SET_PATH, headers=headers, json={"name": "nope", "value": "on"})
            status = client.get(STATUS_PATH, headers=headers).status_code
            refused = flush == 401
            seen[who] = (refused, set_.status_code == 401, status == 401)
            if not refused:
                assert set_.status_code == 400 and set_.json()["ok"] is False  # the route ran
    expected = {
        "neither key": {w: False for w in CREDENTIALS},
        "only --api-key": {w: w != "the api key" for w in CREDENTIALS},
        "only --admin-api-key": {w: w != "the admin key" for w in CREDENTIALS},
        "both keys": {w: w != "the admin key" for w in CREDENTIALS},
    }[config]
    assert seen == {w: (r, r, r) for w, r in expected.items()}


def test_the_cli_call_sends_the_key_and_is_refused_without_it(server):
    """Against the served app (no keys configured) a key is harmless; a keyed server's 401 is
    ``Refused`` (status 401); its admin key is admitted."""
    from fastapi import FastAPI
    from sglang.srt.utils.auth import add_api_key_middleware

    from dsv41_flags.engines.http_client import Refused
    from dsv41_flags.engines.sglang.http import http_status, install_http_routes

    assert http_status(server.url, api_key="anything")["ok"] is True
    app = FastAPI()
    install_http_routes(server.rt, types.SimpleNamespace(
        app=app, get_global_state=lambda: types.SimpleNamespace(tokenizer_manager=None)))
    add_api_key_middleware(app, api_key=None, admin_api_key=ADMIN_KEY)
    port = _free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                       log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        for key in (None, "wrong"):
            with pytest.raises(Refused) as exc:
                http_status(f"http://127.0.0.1:{port}", api_key=key)
            assert exc.value.status == 401
        answer = http_status(f"http://127.0.0.1:{port}", api_key=ADMIN_KEY, timeout_s=10)
        assert answer["ok"] is False and "no tokenizer manager" in answer["error"]
    finally:
        uv.should_exit = True
        thread.join(10)
