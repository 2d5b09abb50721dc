"""``dsv41-flags set NAME=VALUE --url`` and ``dsv41-flags status --url``: the command-line side
of live switches (issue 12). The transport (HTTP routes of the sglang server) is ``_sglang``'s;
this module only prints."""
from __future__ import annotations

import getpass
import socket
from typing import Any, Callable

import typer

from dsv41_flags.live import SwitchError, parse_assignment, parse_value


def _rank(entry: dict) -> str:
    parts = [f"{k[:-5]}{entry[k]}" for k in ("tp_rank", "pp_rank", "dp_rank") if entry.get(k) is not None]
    return " ".join(parts) or "rank ?"


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def check_url(url: str, err, as_json: bool = False, emit_json: Callable[[Any], None] | None = None) -> str:
    """``url`` as it will be used: an ``http://`` or ``https://`` URL of a server, with a host, an
    optional port in 1..65535 and an optional path, no query, fragment, user, space or control
    character. Anything else exits 2 (a usage error: nothing is sent), with a JSON answer under
    ``--json``; a bare ``HOST:PORT`` is answered with the URL to write instead."""
    from urllib.parse import urlsplit

    why = ""
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            why = "it does not start with http:// or https://"
        elif not url.isprintable() or any(c.isspace() for c in url):
            why = "it contains a space or a control character"
        elif not parts.hostname or "@" in parts.netloc:
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
        hint = f"; write --url http://{url}" if plain else "; write --url http://HOST:PORT"
        message = f"--url {url!r} is not an http:// URL of the engine server: {why}{hint}"
        if as_json and emit_json is not None:
            emit_json({"ok": False, "error": message})
        else:
            err.print(f"error: {message}", style="red")
        raise typer.Exit(2)
    return url.rstrip("/")


def remote_set(assignment: str, url: str, by: str | None, as_json: bool, out, err,
               emit_json: Callable[[Any], None]) -> None:
    """Send the switch to the server; print the per-rank outcome. Exits 1 when refused or
    unreachable, 2 when ``assignment`` is not NAME=VALUE with an on/off value or ``url`` is not
    an http:// URL (nothing is sent then)."""
    try:
        name, value = parse_assignment(assignment)
        parse_value(name, value)  # a value no rank could take is refused here, before sending
    except SwitchError as exc:
        if as_json:
            emit_json({"ok": False, "error": str(exc)})
        else:
            err.print(f"error: {exc}", style="red")
        raise typer.Exit(2) from None
    url = check_url(url, err, as_json, emit_json)
    from dsv41_flags.engines import adapter

    try:
        data = adapter().remote_switch(url, name, value, by or _who())
    except SwitchError as exc:
        data = {"ok": False, "feature": name, "error": str(exc)}
    if as_json:
        emit_json(data)
    elif data.get("ok"):
        ranks = data.get("ranks") or []
        out.print(f"{data['feature']}: {'on' if data['old'] else 'off'} -> "
                  f"{'on' if data['new'] else 'off'}, generation {data['generation']}, on "
                  f"{len(ranks)} rank(s) at step {data.get('step')}")
        for r in ranks:
            out.print(f"  {_rank(r)} pid {r.get('pid')}: generation {r.get('generation')} "
                      f"step {r.get('step')}")
        out.print("an override until the next launch: settings files decide at boot")
    else:
        err.print(f"error: {data.get('error') or data}", style="red")
    if not data.get("ok"):
        raise typer.Exit(1)


def remote_status(url: str, as_json: bool, out, err, emit_json: Callable[[Any], None]) -> None:
    """Print what each scheduler rank (and the server process) has on now. Exits 1 when the server
    cannot be asked or its ranks are on different generations (``generations_agree`` is null
    when no rank answered); 2 when ``url`` is not an http:// URL."""
    url = check_url(url, err, as_json, emit_json)
    from dsv41_flags.engines import adapter

    try:
        data = adapter().remote_status(url)
    except SwitchError as exc:
        data = {"ok": False, "error": str(exc), "ranks": []}
    ranks = data.get("ranks") or []
    generations = sorted({r.get("generation") for r in ranks})
    data["generations_agree"] = len(generations) <= 1 if ranks else None
    if as_json:
        emit_json(data)
    else:
        if data.get("error"):
            err.print(f"error: {data['error']}", style="red")
        if ranks:
            agree = (f"generation {generations[0]} on every rank" if data["generations_agree"]
                     else "RANKS DISAGREE: generations " + ", ".join(
                         f"{_rank(r)}: {r.get('generation')}" for r in ranks))
            out.print(f"{url}: {len(ranks)} scheduler rank(s), {agree}")
        for r in ranks:
            out.print(f"  {_rank(r)}  pid {r.get('pid')}  step {r.get('step')}  "
                      f"generation {r.get('generation')}  profile {r.get('profile')}")
            for f in r.get("features", []):
                out.print(f"    {f['name']:<16} {f['state']:<12} {str(f['value']):<6} "
                          f"{'live' if f.get('live') else 'boot':<5} from {f['source']}")
            for t in r.get("switches", [])[-3:]:
                out.print(f"    switch generation {t['generation']}: {t['feature']} "
                          f"{'on' if t['old'] else 'off'} -> {'on' if t['new'] else 'off'} by "
                          f"{t['requested_by']} at step {t['step']} ({t['at']})")
    if not data.get("ok") or data["generations_agree"] is False:
        raise typer.Exit(1)
