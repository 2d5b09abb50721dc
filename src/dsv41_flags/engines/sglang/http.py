"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The live routes on sglang's HTTP server process and the CLI's calls to them.

On sglang's FastAPI ``app`` (``entrypoints/http_server.py``, imported by every process that
serves HTTP: the launcher with one tokenizer, each tokenizer worker with
``--tokenizer-worker-num`` > 1) this module adds ``POST /dsv41_flags/set`` and
``GET /dsv41_flags/status``:

- **Who may call them**: sglang's own admin rule, ``@auth_level(AuthLevel.ADMIN_OPTIONAL)`` of
  ``sglang.srt.utils.auth`` (as ``/flush_cache``): with ``--admin-api-key`` only
  ``Authorization: Bearer <admin key>`` passes (the ordinary API key is refused); with only
  ``--api-key`` that key is required; with neither the routes are open. sglang's key middleware
  (``add_api_key_middleware``) answers 401 before the route runs.
- **What they accept**: a JSON object of at most ``MAX_BODY`` bytes with ``name`` (a feature
  name, text), ``value`` (a bool, 1/0 or an on/off word), optional ``requested_by`` (the
  runtime's rule: text of at most 256 characters) and ``request_id`` (at most 64 characters of
  letters, digits, ``-`` and ``_``); anything else is a 400 ``{"ok": false, "error": ...}``.
- **How they reach the schedulers**: the ``rpc`` methods in an ``RpcReqInput`` sent on the
  tokenizer manager's ``send_to_scheduler`` (so the DP controller hands one copy to each DP
  group), with a ``reply_to`` address: a zmq PULL socket this process binds, where the rank 0 of
  each TP group pushes its group's answer. One request at a time per process (a lock). With
  several DP groups (which share no process group) a switch is two-phase across them: every
  group votes (``phase="check"``), then each applies it expecting the same generation, and a
  group that could not makes the others roll back (``phase="rollback"``).

``http_set`` / ``http_status`` are the CLI's calls (``dsv41-flags set --url`` /
``status --url``) through ``engines.http_client.call_json`` (one deadline, a size cap, the key
sent as ``Authorization: Bearer``).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from typing import Any

from dsv41_flags.engines.sglang.rpc import (MAX_NAME, MAX_REQUEST_ID, RPC_TIMEOUT_S, SET_METHOD,
                                            STATUS_METHOD, bounded_text)
from dsv41_flags.engines.http_client import call_json
from dsv41_flags.live import SwitchError, check_declared, check_requested_by, feature_name
from dsv41_flags.status import process_status
from dsv41_flags.wire import jsonable

HTTP_MODULE = "sglang.srt.entrypoints.http_server"
SET_PATH = "/dsv41_flags/set"
STATUS_PATH = "/dsv41_flags/status"
#: largest request body the set route reads (bytes)
MAX_BODY = 4096
#: seconds the switch's worker thread waits for a call on the event loop beyond its own deadline
BRIDGE_SLACK_S = 5.0
#: the fields a set request may carry
SET_FIELDS = ("name", "value", "requested_by", "request_id")
_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,%d}" % MAX_REQUEST_ID)


class BadRequest(SwitchError):
    """A request the route refuses before sending anything (400)."""


def parse_set_request(raw: bytes, client: str) -> dict:
    """The fields of a ``POST /dsv41_flags/set`` body: ``{name, value, requested_by,
    request_id}`` (``requested_by`` defaults to ``http <client>``, ``request_id`` to ""). Raises
    BadRequest naming the field, what it got and what is accepted."""
    if len(raw) > MAX_BODY:
        raise BadRequest(f"the request body is {len(raw)} bytes; at most {MAX_BODY} are accepted")
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or "name" not in body or "value" not in body:
        raise BadRequest('expected a JSON body {"name": FEATURE, "value": on|off, '
                         '"requested_by": WHO}')
    unknown = sorted(set(body) - set(SET_FIELDS))
    if unknown:
        raise BadRequest(f"unknown field {str(unknown[0])[:40]!r}; accepted: {', '.join(SET_FIELDS)}")
    name = feature_name(bounded_text("name", body["name"], MAX_NAME))
    value = body["value"]
    if isinstance(value, str):
        bounded_text("value", value, 16)
    elif not isinstance(value, (bool, int)):
        raise BadRequest(f"value must be a bool, 1/0 or an on/off word, got {type(value).__name__}")
    requested_by = body.get("requested_by")
    requested_by = check_requested_by(f"http {client}" if requested_by in (None, "") else requested_by)
    request_id = body.get("request_id") or ""
    if request_id and (not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id)):
        raise BadRequest(f"request_id must be 1 to {MAX_REQUEST_ID} letters, digits, - or _")
    return {"name": name, "value": value, "requested_by": requested_by, "request_id": request_id}


async def read_body(request, limit: int = MAX_BODY) -> bytes:
    """The request body, read in chunks and refused (BadRequest) past ``limit`` bytes: a client
    that sends more is not read to the end."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the request body is {declared} bytes; at most {limit} are accepted")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"the request body is over {limit} bytes; at most {limit} are accepted")
        chunks.append(chunk)
    return b"".join(chunks)


class ControlClient:
    """This HTTP process's end of the control path: sends our methods to every scheduler group
    through the tokenizer manager's ``send_to_scheduler`` and collects one answer per group on a
    PULL socket bound to ``address`` (an ipc path in a private temporary directory)."""

    def __init__(self) -> None:
        import zmq

        self.directory = tempfile.mkdtemp(prefix="dsv41_flags_")
        self.address = f"ipc://{os.path.join(self.directory, 'reply')}"
        self.socket = zmq.Context.instance().socket(zmq.PULL)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(self.address)

    async def call(self, tokenizer_manager, method: str, timeout_s: float, **params: Any) -> dict:
        """Send ``method(**params)`` and return ``{"request_id", "answers": [one per group]}``.
        Raises SwitchError when not every group answered within ``timeout_s``."""
        import asyncio

        from sglang.srt.managers.io_struct import RpcReqInput, async_sock_send

        request_id = params.pop("request_id", "") or uuid.uuid4().hex[:16]
        await async_sock_send(tokenizer_manager.send_to_scheduler, RpcReqInput(
            method=method, parameters={**params, "request_id": request_id,
                                       "reply_to": self.address}))
        answers = await asyncio.to_thread(self.collect, request_id, timeout_s, method)
        return {"request_id": request_id, "answers": answers}

    def collect(self, request_id: str, timeout_s: float, method: str) -> list[dict]:
        """The answers of request ``request_id``, one per TP group (each answer says how many
        groups there are); answers of earlier requests are skipped."""
        deadline = time.monotonic() + timeout_s
        answers: dict[Any, dict] = {}
        expected = 1
        while len(answers) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.socket.poll(int(remaining * 1000)):
                raise SwitchError(
                    f"{method}: {len(answers)} of {expected} scheduler group(s) answered within "
                    f"{timeout_s:g} s (a rank busy in a long step, or hung?); the request may "
                    f"still be applied: check with dsv41-flags status --url")
            try:
                data = json.loads(self.socket.recv_string())
            except ValueError:
                continue
            if not isinstance(data, dict) or data.get("request_id") != request_id:
                continue  # the late answer of an earlier call
            expected = max(expected, int(data.get("groups") or 1))
            ranks = data.get("ranks") or []
            key = (ranks[0].get("dp_rank"), ranks[0].get("pid")) if ranks else len(answers)
            answers[key] = data
        return list(answers.values())


def _merge(answers: list[dict]) -> dict:
    """One answer from the groups' answers: ``ok`` when every group's is, ``ranks`` of all."""
    first = answers[0]
    merged = {k: v for k, v in first.items() if k not in ("ranks", "phase")}
    merged["ok"] = all(a.get("ok") for a in answers)
    merged["groups"] = len(answers)
    merged["ranks"] = [r for a in answers for r in (a.get("ranks") or [])]
    errors = [a["error"] for a in answers if a.get("error")]
    if errors:
        merged["error"] = "; ".join(errors)
    return merged


async def switch_groups(client: ControlClient, tm, fields: dict, timeout_s: float, rt,
                        tokenizer_workers: int = 1) -> dict:
    """A switch on every process of the launch, in ``peers.switch_launch``'s order (run in a
    worker thread), reaching every scheduler group through ``client`` on this event loop: the
    groups vote, then this HTTP process and every peer; the groups apply it expecting the one
    generation they voted on (``request_id`` ``fields["request_id"]``, one made up when empty),
    then every peer. A process that refuses or does not answer refuses the switch before any rank
    applies it; a group or a peer that fails to apply makes every group and peer that applied it
    roll back. Returns the groups' answers merged (``_merge``), with ``processes``: each process
    outside the schedulers, with its role and applied state. Raises SwitchError when not every
    group answered within ``timeout_s`` seconds."""
    import asyncio

    import dsv41_flags.engines.sglang.peers as peers

    loop = asyncio.get_running_loop()
    params = {"name": fields["name"], "value": fields["value"],
              "requested_by": fields["requested_by"]}

    def groups(**extra: Any) -> dict:
        """Every group's answer to ``SET_METHOD`` with ``params`` and ``extra``, merged; called
        from the worker thread, sent on the loop. Raises SwitchError past ``ControlClient.call``'s
        deadline plus ``BRIDGE_SLACK_S`` (a loop that stopped never runs the call)."""
        future = asyncio.run_coroutine_threadsafe(
            client.call(tm, SET_METHOD, timeout_s, **extra, **params), loop)
        try:
            done = future.result(timeout_s + BRIDGE_SLACK_S)
        except TimeoutError:
            future.cancel()
            raise SwitchError(f"{SET_METHOD}: no answer within {timeout_s + BRIDGE_SLACK_S:g} s "
                              f"(the server stopping?); the request may still be applied: check "
                              f"with dsv41-flags status --url") from None
        return _merge(done["answers"])

    return await asyncio.to_thread(
        peers.switch_launch, rt, params, tokenizer_workers=tokenizer_workers,
        check=lambda: groups(phase="check"),
        apply_ranks=lambda generation: groups(phase="both", expect_generation=generation,
                                              request_id=fields["request_id"]),
        rollback_ranks=lambda request_id: groups(phase="rollback", undo=request_id))


def install_http_routes(rt, module) -> None:
    """Register ``POST /dsv41_flags/set`` and ``GET /dsv41_flags/status`` on sglang's HTTP
    ``app``, at sglang's ADMIN_OPTIONAL level (idempotent).

    ``POST /dsv41_flags/set`` body ``{"name": "folded_fence", "value": "on", "requested_by":
    "alice"}``: 200 and the schedulers' answer when applied on every rank (``changed`` False
    when every rank had that value: no generation), 400 on a bad request (field, size, unknown
    feature, bad value, not live-safe), 409 when a rank refused (nothing changed), 504 when no
    answer came, 401 from sglang's key middleware. ``GET /dsv41_flags/status``:
    ``{ok, server, groups, ranks}``."""
    import asyncio

    from fastapi import Request
    from fastapi.responses import JSONResponse
    from sglang.srt.utils.auth import AuthLevel, auth_level

    app = module.app
    if any(getattr(r, "path", None) == SET_PATH for r in app.routes):
        return

    def client_and_manager():
        state = module.get_global_state()
        tm = getattr(state, "tokenizer_manager", None)
        if tm is None:
            raise SwitchError("this HTTP process has no tokenizer manager (the server is not "
                              "serving yet)")
        client = rt.live.transport.get("control")
        if client is None:
            client = rt.live.transport["control"] = ControlClient()
        lock = rt.live.transport.get("control_lock")
        if lock is None:
            lock = rt.live.transport["control_lock"] = asyncio.Lock()
        return client, tm, lock

    def refused(request: Request):
        """sglang's own decision for an ADMIN_OPTIONAL route (``decide_request_auth``), made
        here too: sglang adds its key middleware in single-tokenizer mode only, so with
        ``--tokenizer-worker-num N`` nothing else checks the key. None when allowed."""
        from sglang.srt.runtime_context import get_serving
        from sglang.srt.utils.auth import decide_request_auth

        try:
            serving = get_serving()   # the launch's published server settings
        except ValueError:   # not published (an app built outside a launch): its manager's
            try:
                state = module.get_global_state()
            except Exception:  # noqa: BLE001 - no state yet: no key is known to check
                state = None
            serving = getattr(getattr(state, "tokenizer_manager", None), "server_args", None)
        decision = decide_request_auth(
            method=request.method, path=request.url.path,
            authorization_header=request.headers.get("Authorization"),
            api_key=getattr(serving, "api_key", None),
            admin_api_key=getattr(serving, "admin_api_key", None),
            auth_level=AuthLevel.ADMIN_OPTIONAL)
        if decision.allowed:
            return None
        code = decision.error_status_code
        return JSONResponse({"ok": False, "error": "Unauthorized" if code == 401 else "Forbidden"},
                            status_code=code)

    @auth_level(AuthLevel.ADMIN_OPTIONAL)
    async def dsv41_flags_set(request: Request):
        denied = refused(request)
        if denied is not None:
            return denied
        host = request.client.host if request.client else "unknown"
        try:
            fields = parse_set_request(await read_body(request), host)
            check_declared(rt.features, fields["name"], fields["value"])
        except SwitchError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)
        try:
            client, tm, lock = client_and_manager()
            workers = getattr(getattr(tm, "server_args", None), "tokenizer_worker_num", 1)
            async with lock:
                data = await switch_groups(client, tm, fields, RPC_TIMEOUT_S, rt,
                                           workers if isinstance(workers, int) else 1)
        except SwitchError as exc:
            return JSONResponse({"ok": False, "feature": fields["name"], "error": str(exc)},
                                status_code=504)
        return JSONResponse(jsonable(data), status_code=200 if data.get("ok") else 409)

    @auth_level(AuthLevel.ADMIN_OPTIONAL)
    async def dsv41_flags_status(request: Request):
        denied = refused(request)
        if denied is not None:
            return denied
        try:
            client, tm, lock = client_and_manager()
            async with lock:
                answers = (await client.call(tm, STATUS_METHOD, RPC_TIMEOUT_S))["answers"]
            data = _merge(answers)
        except SwitchError as exc:
            data = {"ok": False, "error": str(exc), "ranks": []}
        data["server"] = process_status(rt).model_dump(mode="json")
        import dsv41_flags.engines.sglang.fleet as fleet
        import dsv41_flags.engines.sglang.peers as peers

        fleet_status = fleet.status_of(rt)
        if fleet_status is not None:
            data["fleet"] = fleet_status.model_dump(mode="json")

        try:
            data["processes"] = (await asyncio.to_thread(peers.call_all, rt,
                                                         {"phase": "status"}))[1:]
        except SwitchError as exc:   # the launch directory is not private: said, not raised
            data.update(ok=False, processes=[], error=f"{data.get('error') or ''} {exc}".strip())
        return JSONResponse(jsonable(data), status_code=200 if data.get("ok") else 504)

    # this module's annotations are strings (``from __future__ import annotations``) and Request
    # is not a module global: give FastAPI the class itself
    for endpoint in (dsv41_flags_set, dsv41_flags_status):
        endpoint.__annotations__ = {"request": Request}
    app.add_api_route(SET_PATH, dsv41_flags_set, methods=["POST"])
    app.add_api_route(STATUS_PATH, dsv41_flags_status, methods=["GET"])
    if rt.resolution.reserved.get("FLEET"):
        import dsv41_flags.engines.sglang.fleet as fleet

        fleet.start(rt, module, SET_PATH)


# ------------------------------------------------------------------ CLI side (HTTP client)
def _http(url: str, path: str, body: dict | None, timeout_s: float,
          api_key: str | None = None) -> Any:
    """The answer of ``GET`` (``body`` None) or ``POST`` ``url + path``, decoded from JSON (its
    shape is the caller's to check), through ``engines.http_client.call_json`` (one deadline,
    a size cap, ``api_key`` as sglang's bearer key). Raises SwitchError (``Refused`` on 401/403)
    when the server cannot be asked, and on 404 (no dsv41_flags routes there)."""
    full = url.rstrip("/") + path
    return call_json(full, method="GET" if body is None else "POST", body=body, api_key=api_key,
                     timeout_s=timeout_s, errors={404: no_routes(full, body is not None)})[1]


def no_routes(full: str, switch: bool = False) -> str:
    """What a 404 from ``full`` (a route's URL) means: the process that answered has no
    dsv41_flags routes (``switch``: a set request, so nothing was changed on any rank: no
    process of the server applies a switch but through the route). The CLI cannot see the
    server's options, so both causes are named, each with its fix."""
    done = "; nothing was changed" if switch else ""
    return (f"{full}: 404, the HTTP process that answered has no dsv41_flags routes{done}. "
            f"Either dsv41_flags is not installed in the server's environment or no live feature "
            f"is declared there, or the server runs --tokenizer-worker-num N > 1 under the plain "
            f"sglang plugin: sglang never loads plugins in its tokenizer workers (the processes "
            f"that answer HTTP then), so no switch can reach them; launch the server under "
            f"dsv41-flags run -- (or dsv41-flags serve) to activate every worker")


def http_set(url: str, name: str, value: Any, requested_by: str, *, api_key: str | None = None,
             timeout_s: float = RPC_TIMEOUT_S + 5) -> Any:
    """``POST URL/dsv41_flags/set``; returns the answer (``ok`` False when refused; the caller
    checks its shape). Raises SwitchError when the server cannot be asked or has no such route,
    ``http_client.Refused`` when it wants another key."""
    return _http(url, SET_PATH, {"name": name, "value": value, "requested_by": requested_by},
                 timeout_s, api_key)


def http_status(url: str, *, api_key: str | None = None, timeout_s: float = RPC_TIMEOUT_S + 5) -> Any:
    """``GET URL/dsv41_flags/status``: ``{ok, server, ranks}`` (the caller checks its shape).
    Raises SwitchError when the server cannot be asked or has no such route,
    ``http_client.Refused`` when it wants another key."""
    return _http(url, STATUS_PATH, None, timeout_s, api_key)
