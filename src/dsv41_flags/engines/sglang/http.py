"""The live routes on sglang's HTTP server process and the CLI's calls to them.

The HTTP server (``entrypoints/http_server.py`` ``launch_server``) starts the schedulers but
leaves ``port_args.rpc_ipc_name`` unbound (only the offline Engine binds it); the module holds a
FastAPI ``app`` and passes ``port_args`` to ``_setup_and_run_http_server``. This module adds, on
that ``app``, ``POST /dsv41_flags/set`` and ``GET /dsv41_flags/status``, which send the
scheduler methods of ``rpc`` on sglang's RPC channel (``rpc_ipc_name``, bound by this process the
way the offline Engine binds it) and wait for the reply in a worker thread; and ``http_set`` /
``http_status``, the CLI's calls (``dsv41-flags set --url`` / ``status --url``).
"""
from __future__ import annotations

from typing import Any

from dsv41_flags.engines.http_client import call_json
from dsv41_flags.engines.sglang.rpc import RPC_TIMEOUT_S, SET_METHOD, STATUS_METHOD, RpcClient
from dsv41_flags.live import BUILTIN, SwitchError, check_declared, feature_name
from dsv41_flags.status import process_status

HTTP_MODULE = "sglang.srt.entrypoints.http_server"
SET_PATH = "/dsv41_flags/set"
STATUS_PATH = "/dsv41_flags/status"


def _capture_port_args(rt):
    def make(original):
        def _setup_and_run_http_server(server_args, tokenizer_manager, template_manager, port_args,
                                       *args, **kwargs):
            rt.live.transport["rpc_endpoint"] = port_args.rpc_ipc_name
            return original(server_args, tokenizer_manager, template_manager, port_args,
                            *args, **kwargs)

        return _setup_and_run_http_server

    return make


def _server_client(rt) -> RpcClient:
    """This HTTP server process's RPC client, bound to ``rpc_ipc_name`` on first use (as the
    offline Engine binds it at start)."""
    client = rt.live.transport.get("client")
    if client is None:
        endpoint = rt.live.transport.get("rpc_endpoint")
        if endpoint is None:
            raise SwitchError("the RPC endpoint of the schedulers is not known in this process "
                              "(the server was not started through sglang's launch_server)")
        import zmq
        from sglang.srt.utils.network import get_zmq_socket

        socket = get_zmq_socket(zmq.Context.instance(), zmq.DEALER, endpoint, True)
        client = rt.live.transport["client"] = RpcClient(socket)
    return client


def install_http_routes(rt, module) -> None:
    """Register ``POST /dsv41_flags/set`` and ``GET /dsv41_flags/status`` on sglang's HTTP
    ``app`` and remember the RPC endpoint when ``_setup_and_run_http_server`` runs (idempotent).

    ``POST /dsv41_flags/set`` body ``{"name": "folded_fence", "value": "on", "requested_by":
    "alice"}``: 200 and the schedulers' answer when applied on every rank, 400 on a bad request
    (unknown feature, bad value, not live-safe), 409 when a rank refused (nothing changed), 504
    when no answer came. ``GET /dsv41_flags/status``: ``{ok, server, ranks}``."""
    import asyncio

    from fastapi import Request
    from fastapi.responses import JSONResponse

    app = module.app
    rt.ledger.patch(BUILTIN, module, "_setup_and_run_http_server", _capture_port_args(rt))
    if any(getattr(r, "path", None) == SET_PATH for r in app.routes):
        return

    async def dsv41_flags_set(request: Request):
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "name" not in body or "value" not in body:
            return JSONResponse({"ok": False, "error": 'expected a JSON body {"name": FEATURE, '
                                 '"value": on|off, "requested_by": WHO}'}, status_code=400)
        name = feature_name(str(body["name"]))
        client = request.client.host if request.client else "unknown"
        requested_by = str(body.get("requested_by") or f"http {client}")
        try:
            _, new = check_declared(rt.features, name, body["value"])
        except SwitchError as exc:
            return JSONResponse({"ok": False, "feature": name, "error": str(exc)}, status_code=400)
        try:
            data = await asyncio.to_thread(_server_client(rt).call, SET_METHOD, name=name,
                                           value=new, requested_by=requested_by)
        except SwitchError as exc:
            return JSONResponse({"ok": False, "feature": name, "error": str(exc)}, status_code=504)
        return JSONResponse(data, status_code=200 if data.get("ok") else 409)

    async def dsv41_flags_status(request: Request):
        try:
            data = await asyncio.to_thread(_server_client(rt).call, STATUS_METHOD)
        except SwitchError as exc:
            data = {"ok": False, "error": str(exc), "ranks": []}
        data["server"] = process_status(rt)
        return JSONResponse(data, status_code=200 if data.get("ok") else 504)

    # this module's annotations are strings (``from __future__ import annotations``) and Request
    # is not a module global: give FastAPI the class itself
    for endpoint in (dsv41_flags_set, dsv41_flags_status):
        endpoint.__annotations__ = {"request": Request}
    app.add_api_route(SET_PATH, dsv41_flags_set, methods=["POST"])
    app.add_api_route(STATUS_PATH, dsv41_flags_status, methods=["GET"])


# ------------------------------------------------------------------ CLI side (HTTP client)
def _http(url: str, path: str, body: dict | None, timeout_s: float,
          api_key: str | None = None) -> Any:
    """The answer of ``GET`` (``body`` None) or ``POST`` ``url + path``, decoded from JSON (its
    shape is the caller's to check), through ``engines.http_client.call_json`` (one deadline,
    a size cap, ``api_key`` as sglang's bearer key). Raises SwitchError (``Refused`` on 401/403)
    when the server cannot be asked, and on 404 (no dsv41_flags routes there)."""
    full = url.rstrip("/") + path
    missing = (f"{full}: 404, the server has no dsv41_flags routes (is dsv41_flags installed in "
               f"the server's environment, with a live feature declared?)")
    return call_json(full, method="GET" if body is None else "POST", body=body, api_key=api_key,
                     timeout_s=timeout_s, errors={404: missing})[1]


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
