"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The client side of an engine server's live routes: one JSON call over HTTP, bounded.

``call_json`` sends one request and returns ``(status, answer)``. Whatever the server does, the
call ends: one overall deadline covers connect, send and read (the exchange runs in a daemon
thread joined with that deadline, so a server that trickles bytes or never ends its body cannot
hold the caller); the body is read in chunks and refused beyond ``MAX_ANSWER_BYTES`` (memory
stays bounded); the answer must be JSON. An API key is sent as sglang expects it
(``Authorization: Bearer <key>``, ``sglang/srt/utils/auth.py``) and appears in no message, nor
does a secret of the URL (its credentials, a secret query parameter: ``secrecy.masked_url``).

Standard library only.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Mapping

from dsv41_flags.live import SwitchError
from dsv41_flags.secrecy import MASK, masked_text, masked_url

#: largest answer body read (a status of many ranks is a few hundred KiB)
MAX_ANSWER_BYTES = 8 << 20
_CHUNK = 64 << 10


class Refused(SwitchError):
    """The server refused the call for want of the right key: HTTP 401 or 403 (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _shown(text: Any, api_key: str | None) -> str:
    """``text`` as a message may hold it: ``api_key`` and every URL's secrets as ``MASK``."""
    text = str(text)
    return masked_text(text.replace(api_key, MASK) if api_key else text)


def _read_capped(resp, url: str, max_bytes: int) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = resp.read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise SwitchError(f"{masked_url(url)}: the answer is larger than {max_bytes} bytes: not read further "
                              f"(is this the engine server?)")
        chunks.append(chunk)


def _exchange(url: str, method: str, body: Any, api_key: str | None, timeout_s: float,
              max_bytes: int) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        if any(ord(c) < 0x21 or ord(c) == 0x7f for c in api_key):
            raise SwitchError("the API key holds a space or control character: give the key "
                              "exactly as the server was launched with it")
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        """A redirect is answered, never followed: the key goes to ``url`` and nowhere else."""

        def redirect_request(self, req, fp, code, msg, hdrs, newurl):
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            return resp.status, _read_capped(resp, url, max_bytes)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _read_capped(exc, url, max_bytes)
    except SwitchError:
        raise
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a bad header value
        reason = _shown(getattr(exc, "reason", None) or exc, api_key)
        raise SwitchError(f"cannot reach {masked_url(url)}: {reason} (is the engine server running "
                          f"there?)") from None
    except Exception as exc:  # noqa: BLE001 - http.client's own (a bad status line, too many headers)
        raise SwitchError(f"{masked_url(url)}: not an HTTP answer ({type(exc).__name__}: "
                          f"{_shown(exc, api_key)})") from None


def call_json(url: str, *, method: str = "GET", body: Any = None, api_key: str | None = None,
              timeout_s: float, max_bytes: int = MAX_ANSWER_BYTES,
              errors: Mapping[int, str] | None = None) -> tuple[int, Any]:
    """``(status, answer)`` of ``method url`` with ``body`` as JSON (None: no body), the answer
    decoded from JSON (any JSON value: the caller checks its shape).

    Raises ``Refused`` on HTTP 401 or 403; SwitchError with ``errors[status]`` when the status
    is one of ``errors`` (whatever the body); SwitchError when the server cannot be reached, gives
    no complete answer within ``timeout_s`` seconds (connect, send and read together), answers
    more than ``max_bytes`` bytes, or answers something that is not JSON. No message holds the
    key."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["answer"] = _exchange(url, method, body, api_key, timeout_s, max_bytes)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=work, name="dsv41-flags-http", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise SwitchError(f"{masked_url(url)}: no complete answer within {timeout_s:g} s (connect "
                          f"and read)")
    if "error" in box:
        raise box["error"]
    status, raw = box["answer"]
    if status in (401, 403):
        raise Refused(f"{masked_url(url)}: the server refused the call (HTTP {status})", status)
    if errors and status in errors:
        raise SwitchError(errors[status])
    try:
        return status, json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise SwitchError(f"{masked_url(url)}: HTTP {status}, a JSON answer nested too deeply") \
            from None
    except ValueError:  # bad UTF-8 or not JSON (an integer too long included)
        raise SwitchError(f"{masked_url(url)}: HTTP {status}, not a JSON answer: "
                          f"{_shown(repr(raw[:120]), api_key)}") from None
