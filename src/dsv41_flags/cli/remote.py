"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

``dsv41-flags set NAME=VALUE --url`` and ``dsv41-flags status --url``: the command-line side of
live switches. The transport is the engine adapter's (``remote_switch`` / ``remote_status``,
bounded by ``dsv41_flags.engines.http_client``); this module checks what the server answers and
prints it.

Nothing from the server is trusted: every answer is validated (``Applied`` / ``Refusal`` below,
the status record's ``status.StatusAnswer``: types, required fields, text and list sizes, in the
``status.WIRE`` context) before anything is printed or counted, and one that does not fit is one clear line (``--json``: ``{"ok": false,
"error"}``) and exit 1. Human output goes through ``dsv41_flags.cli.output`` (escaped, never
markup). The API key (``--api-key`` or ``DSV41_API_KEY``) is sent as a bearer key and shown
nowhere.
"""
from __future__ import annotations

import re

import getpass
import socket
from typing import Annotated, Any, Callable, Optional

import typer
from pydantic import Field, StrictBool, ValidationError

from dsv41_flags.secrecy import MASK, masked_url
from dsv41_flags.text import quoted
from dsv41_flags.cli.output import err, out, safe_text
from dsv41_flags.engine import adapter
from dsv41_flags.engines.http_client import Refused
from dsv41_flags.live import SwitchError, check_requested_by, parse_assignment, parse_value
from dsv41_flags.status import (LIST_MAX, WIRE, Count, RankId, Record, StatusAnswer, Text,
                                first_problem)

#: the variable ``--api-key`` defaults to (kept out of shell history)
API_KEY_VAR = "DSV41_API_KEY"
#: default overall deadline of one call (connect + read), seconds: the server's own RPC wait
#: (60 s) and a margin
DEFAULT_TIMEOUT_S = 65.0


class RankApplied(RankId):
    """One rank's outcome of a switch."""

    ok: StrictBool = True
    generation: Optional[Count] = None
    step: Optional[Count] = None
    reason: Text = ""


class ProcessApplied(Record):
    """One process outside the schedulers in a switch's answer (``engines/sglang/peers.py``)."""

    ok: StrictBool
    role: Text = ""
    pid: Count
    generation: Optional[Count] = None
    new: Optional[StrictBool] = None
    reason: Text = ""


class Applied(Record):
    """``POST /dsv41_flags/set`` answered ``ok: true``: the switch, every rank's outcome and
    every other process's (``processes``)."""

    ok: StrictBool
    feature: Text
    old: StrictBool
    new: StrictBool
    generation: Count
    step: Optional[Count] = None
    ranks: Annotated[list[RankApplied], Field(min_length=1, max_length=LIST_MAX)]
    processes: Annotated[list[ProcessApplied], Field(max_length=LIST_MAX)] = []


class Refusal(Record):
    """``POST /dsv41_flags/set`` answered ``ok: false``: why."""

    ok: StrictBool
    error: Text = "(the server gave no reason)"


def _invalid(what: str, exc: ValidationError) -> str:
    """One line: the first problem of ``exc`` with where it is in the answer."""
    return f"the server's {what} answer is not valid: {first_problem(exc)}"


def _rank(entry: RankId) -> str:
    parts = [f"{k[:-5]}{getattr(entry, k)}" for k in ("tp_rank", "pp_rank", "dp_rank")
             if getattr(entry, k) is not None]
    return " ".join(parts) or "rank ?"


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _on(value: bool) -> str:
    return "on" if value else "off"


def _refused_message(exc: Exception, api_key: str | None) -> str:
    """What a 401/403 means to the operator; never the key."""
    status = getattr(exc, "status", "")
    if api_key:
        return (f"the server refused the key given (HTTP {status}): the live routes need the "
                f"server's admin key (--admin-api-key; its --api-key when it has none)")
    return (f"the server refused (HTTP {status}): admin key required (give --api-key or "
            f"{API_KEY_VAR})")


#: a key shorter than this is masked only where it stands alone (no letter, digit, ``_`` or
#: ``-`` on either side): ``A`` would otherwise blank every capital A of an answer
WHOLE_TOKEN_BELOW = 8
_TOKEN_CHAR = r"[A-Za-z0-9_-]"


def _redacted(data: Any, api_key: str | None) -> Any:
    """``data`` (a decoded answer, or text) with every occurrence of ``api_key`` in its strings
    (keys and values, at any depth) replaced by ``MASK``: a server may echo the key it was sent,
    and nothing from a server is printed as received. A key of fewer than
    ``WHOLE_TOKEN_BELOW`` characters is masked where it stands as a whole token only."""
    if not api_key:
        return data
    if isinstance(data, str):
        if len(api_key) >= WHOLE_TOKEN_BELOW:
            return data.replace(api_key, MASK)
        return re.sub(f"(?<!{_TOKEN_CHAR}){re.escape(api_key)}(?!{_TOKEN_CHAR})", MASK, data)
    if isinstance(data, dict):
        return {_redacted(k, api_key): _redacted(v, api_key) for k, v in data.items()}
    if isinstance(data, list):
        return [_redacted(v, api_key) for v in data]
    return data


def _call(send: Callable[[], Any], api_key: str | None) -> tuple[Any, str]:
    """``(answer, error)`` of one call to the server: an error text when it cannot be asked. The
    key sent never comes back in either (``_redacted``)."""
    try:
        return _redacted(send(), api_key), ""
    except Refused as exc:
        return None, _refused_message(exc, api_key)
    except SwitchError as exc:
        return None, _redacted(str(exc), api_key)


def _fail(error: str, as_json: bool, emit_json: Callable[[Any], None], code: int = 1,
          **extra: Any) -> None:
    if as_json:
        emit_json({"ok": False, **extra, "error": error})
    else:
        err.print(f"error: {error}", style="red")
    raise typer.Exit(code)


def check_url(url: str, err, as_json: bool = False, emit_json: Callable[[Any], None] | None = None,
              *, option: str = "--url") -> str:
    """``url`` as it will be used: an ``http://`` or ``https://`` URL of a server, with a host, an
    optional port in 1..65535 and an optional path, no query, fragment, user, space or control
    character. Anything else exits 2 (a usage error: nothing is sent), with a JSON answer under
    ``--json``; a bare ``HOST:PORT`` is answered with the URL to write instead. ``option`` names
    where the URL was given in the message (``--url``, or ``URL`` for a positional argument)."""
    from urllib.parse import urlsplit

    why = ""
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            why = "it does not start with http:// or https://"
        elif not url.isprintable() or any(c.isspace() for c in url):
            why = "it contains a space or a control character"
        elif "@" in parts.netloc:
            why = ("it holds credentials (USER:PASSWORD@, shown as ***): give the server's key "
                   f"with --api-key or {API_KEY_VAR} instead")
        elif not parts.hostname:
            why = "it names no host (HOST or HOST:PORT)"
        elif parts.query or parts.fragment:
            why = "it has a query or a fragment (the server's address only)"
        elif not 0 < (parts.port or 80) < 65536:
            why = "its port is not in 1..65535"
        else:
            parts.hostname.encode("idna")
    except (ValueError, UnicodeError) as exc:  # a bad port, an unclosed [IPv6, an IDNA label
        why = f"it cannot be parsed ({exc})"
    if why:
        plain = "://" not in url and url.replace(".", "").replace(":", "").isalnum()
        written = "" if option == "URL" else f"{option} "
        hint = (f"; write {written}http://{url}" if plain
                else f"; write {written}http://HOST:PORT")
        message = (f"{option} {quoted(masked_url(url))} is not an http:// URL of the engine "
                   f"server: {why}{hint}")
        if as_json and emit_json is not None:
            emit_json({"ok": False, "error": message})
        else:
            err.print(f"error: {message}", style="red")
        raise typer.Exit(2)
    return url.rstrip("/")


def remote_set(assignment: str, url: str, by: str | None, as_json: bool,
               emit_json: Callable[[Any], None], *, api_key: str | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Send the switch to the server (with ``api_key`` as a bearer key when given); print the
    per-rank outcome. Exits 1 when refused (by the ranks, or for want of the admin key),
    unreachable, or when the answer is not a valid one; 2 when ``assignment`` is not NAME=VALUE
    with an on/off value, ``by`` is not a valid ``requested_by`` (``live.check_requested_by``)
    or ``url`` is not an http:// URL (nothing is sent then)."""
    try:
        name, value = parse_assignment(assignment)
        parse_value(name, value)  # a value no rank could take is refused here, before sending
        if by is not None:
            check_requested_by(by)
    except SwitchError as exc:
        _fail(str(exc), as_json, emit_json, code=2)
    url = check_url(url, err, as_json, emit_json)
    data, error = _call(lambda: adapter().remote_switch(url, name, value, by or _who(),
                                                        api_key=api_key, timeout_s=timeout_s),
                        api_key)
    if error:
        _fail(error, as_json, emit_json, feature=name)
    try:
        ok = isinstance(data, dict) and data.get("ok") is True
        answer = (Applied if ok else Refusal).model_validate(data, context=WIRE)
    except ValidationError as exc:
        _fail(_invalid("switch", exc), as_json, emit_json, feature=name)
    failed = [p for p in answer.processes if not p.ok] if isinstance(answer, Applied) else []
    if as_json:
        # the answer as the server gave it, but "ok" says the outcome the exit status says:
        # not ok when a process of the launch did not apply it (listed in "not_applied")
        emit_json({**data, "ok": False, "not_applied": [
            {"role": p.role, "pid": p.pid, "reason": p.reason} for p in failed]} if failed else data)
    elif isinstance(answer, Applied) and data.get("changed") is False:
        out.print(f"{answer.feature}: already {_on(answer.new)}, on {len(answer.ranks)} rank(s): "
                  f"nothing changed, generation {answer.generation}")
    elif isinstance(answer, Applied):
        out.print(f"{answer.feature}: {_on(answer.old)} -> {_on(answer.new)}, generation "
                  f"{answer.generation}, on {len(answer.ranks)} rank(s) at step {answer.step}")
        for r in answer.ranks:
            out.print(f"  {_rank(r)} pid {r.pid}: generation {r.generation} step {r.step}")
        for p in answer.processes:
            out.print(f"  {safe_text(p.role) or 'process'} pid {p.pid}: " + (
                f"generation {p.generation}" if p.ok else f"NOT APPLIED: {safe_text(p.reason)}"))
        out.print("an override until the next launch: settings files decide at boot (and a "
                  "flag service, with a fleet table)")
    else:
        err.print(f"error: {answer.error}", style="red")
    if failed:
        err.print("error: not applied in " + ", ".join(
            f"{safe_text(p.role) or 'process'} pid {p.pid} ({safe_text(p.reason)})" for p in failed),
            style="red")
    if not isinstance(answer, Applied) or failed:
        raise typer.Exit(1)


def remote_status(url: str, as_json: bool, emit_json: Callable[[Any], None], *,
                  api_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Print what each scheduler rank has on now. Exits 1 when the server cannot be asked,
    refuses (for want of the admin key), answers something that is not a valid status, no rank
    answered (said as an error: ``ranks`` empty, ``generations_agree`` null) or its ranks are on
    different generations; 2 when ``url`` is not an http:// URL."""
    url = check_url(url, err, as_json, emit_json)
    data, error = _call(lambda: adapter().remote_status(url, api_key=api_key, timeout_s=timeout_s),
                        api_key)
    if error:
        _fail(error, as_json, emit_json, ranks=[], generations_agree=None)
    try:
        answer = StatusAnswer.model_validate(data, context=WIRE)
    except ValidationError as exc:
        _fail(_invalid("status", exc), as_json, emit_json, ranks=[], generations_agree=None)
    ranks = answer.ranks
    generations = sorted({r.generation for r in ranks})
    agree = len(generations) <= 1 if ranks else None
    silent = (f"no scheduler rank answered {url}: the server holds no rank with dsv41_flags "
              f"active, or none has started yet" if not ranks and not answer.error else "")
    if as_json:
        emit_json({**data, "generations_agree": agree, **({"ok": False, "error": silent} if silent else {})})
    else:
        if answer.error or silent:
            err.print(f"error: {answer.error or silent}", style="red")
        if ranks:
            said = (f"generation {generations[0]} on every rank" if agree else
                    "RANKS DISAGREE: generations " + ", ".join(f"{_rank(r)}: {r.generation}"
                                                               for r in ranks))
            out.print(f"{url}: {len(ranks)} scheduler rank(s), {said}")
            width = max([16] + [len(safe_text(f.name)) for p in (answer.server, *answer.processes, *ranks)
                                if p is not None for f in p.features])
            for p in ((answer.server,) if answer.server is not None else ()) + answer.processes:
                out.print(f"  {safe_text(p.role) or 'process'}  pid {p.pid}  " + (
                    f"generation {p.generation}" if p.ok else f"NOT ANSWERING: {safe_text(p.reason)}")
                    + ("  (the HTTP server)" if p is answer.server else ""))
                for f in p.features:
                    out.print(f"    {safe_text(f.name):<{width}} {safe_text(f.state):<12} "
                              f"{str(f.value):<6} {'live' if f.live else 'boot':<5} from {f.source}")
        for r in ranks:
            out.print(f"  {_rank(r)}  pid {r.pid}  step {r.step}  generation {r.generation}  "
                      f"profile {r.profile}")
            if r.serving is not None:
                other = [f"{safe_text(n)} {safe_text(s)}" for n, s in r.serving.other.items()]
                out.print("    serving: installed " + (", ".join(map(safe_text, r.serving.installed)) or "none")
                          + "; pending (target never imported here) "
                          + (", ".join(map(safe_text, r.serving.pending)) or "none")
                          + (f"; other {', '.join(other)}" if other else ""))
            for f in r.features:
                out.print(f"    {safe_text(f.name):<{width}} {safe_text(f.state):<12} {str(f.value):<6} "
                          f"{'live' if f.live else 'boot':<5} from {f.source}")
            for t in r.switches[-3:]:
                out.print(f"    switch generation {t.generation}: {t.feature} {_on(t.old)} -> "
                          f"{_on(t.new)} by {safe_text(t.requested_by)} at step {t.step} ({t.at})")
        if answer.fleet is not None:
            _print_fleet(answer.fleet)
    others = ((answer.server,) if answer.server is not None else ()) + answer.processes
    silent_processes = [p for p in others if not p.ok]
    apart = [p for p in others if p.ok and agree and p.generation != generations[0]]
    if silent_processes and not as_json:
        err.print("error: not answering: " + ", ".join(
            f"{safe_text(p.role) or 'process'} pid {p.pid}" for p in silent_processes), style="red")
    if apart and not as_json:
        err.print(f"error: the ranks are on generation {generations[0]}, " + ", ".join(
            f"{safe_text(p.role) or 'process'} pid {p.pid} on {p.generation}" for p in apart),
            style="red")
    if not answer.ok or not ranks or agree is False or silent_processes or apart:
        raise typer.Exit(1)


def _print_fleet(fleet) -> None:
    """The server's flag service and each feature's fleet value against the value in effect."""
    state = ("reachable" if fleet.reachable else
             f"UNREACHABLE since {fleet.unreachable_since or '?'}: {safe_text(fleet.problem)}")
    out.print(f"  fleet: {safe_text(fleet.where)}  instance {safe_text(fleet.instance_id)}  "
              f"{state}  switches {fleet.switches}  refused {fleet.refused}  coalesced "
              f"{fleet.coalesced}")
    if fleet.reachable and fleet.problem:
        out.print(f"    {safe_text(fleet.problem)}")
    for row in fleet.features:
        fleet_value = "none" if row.fleet_value is None else _on(row.fleet_value)
        out.print(f"    {safe_text(row.feature):<16} fleet {fleet_value:<5} applied "
                  f"{_on(bool(row.applied)):<4} {'agrees' if row.agrees else 'DIFFERS'}"
                  + (f": {safe_text(row.reason)}" if row.reason else ""))


def fleet_status(urls: list[str], as_json: bool, emit_json: Callable[[Any], None], *,
                 api_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """``dsv41-flags fleet status URL...``: one table of every server's features, fleet value
    against the value in effect. Exits 1 when a server cannot be asked, has no flag service, is
    cut off from it, or runs a value other than its fleet value; 2 for a URL that is not
    http://."""
    from rich.table import Table

    from dsv41_flags.cli.output import console

    from concurrent.futures import ThreadPoolExecutor

    checked = [check_url(url, err, as_json, emit_json, option="URL") for url in urls]

    def ask(url: str):
        return _call(lambda: adapter().remote_status(url, api_key=api_key, timeout_s=timeout_s),
                     api_key)
    # every server at once: N servers that do not answer take one --timeout, not N
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(checked)))) as pool:
        answers = list(pool.map(ask, checked))
    servers = []
    for url, (data, error) in zip(checked, answers):
        fleet = None
        if not error:
            try:
                fleet = StatusAnswer.model_validate(data, context=WIRE).fleet
            except ValidationError as exc:
                error = _invalid("status", exc)
        if not error and fleet is None:
            error = "the server has no flag service (no fleet table in its settings)"
        servers.append((url, fleet, error))
    bad = any(error or not fleet.reachable or not all(r.agrees for r in fleet.features)
              for _, fleet, error in servers)
    if as_json:
        emit_json({"ok": not bad, "servers": [
            {"url": masked_url(url), "error": error,
             "fleet": fleet.model_dump(mode="json") if fleet is not None else None}
            for url, fleet, error in servers]})
        if bad:
            raise typer.Exit(1)
        return
    table = Table()
    for column in ("server", "instance", "feature", "fleet", "applied", "agreement", "why"):
        table.add_column(column, overflow="fold")
    for url, fleet, error in servers:
        shown = safe_text(masked_url(url))
        if error:
            table.add_row(shown, "", "", "", "", "ERROR", safe_text(error))
            continue
        why_all = "" if fleet.reachable else (f"flag service unreachable since "
                                              f"{fleet.unreachable_since}: {fleet.problem}")
        for row in fleet.features:
            table.add_row(shown, safe_text(fleet.instance_id), safe_text(row.feature),
                          "none" if row.fleet_value is None else _on(row.fleet_value),
                          _on(bool(row.applied)), "agrees" if row.agrees and fleet.reachable
                          else "DIFFERS", safe_text(row.reason or why_all))
    import os

    wide = out.is_terminal or os.environ.get("COLUMNS")
    shown_table = console(width=None if wide else 200, soft_wrap=False)
    shown_table.print(table)
    if shown_table.failure is not None:
        out.lost(shown_table.failure)
    disagree = [masked_url(u) for u, f, e in servers
                if e or not f.reachable or not all(r.agrees for r in f.features)]
    if disagree:
        err.print(f"error: {len(disagree)} of {len(servers)} server(s) do not run their fleet "
                  f"values or cannot say: {', '.join(map(safe_text, disagree))}", style="red")
        raise typer.Exit(1)
    out.print(f"{len(servers)} server(s): every feature runs its fleet value")
