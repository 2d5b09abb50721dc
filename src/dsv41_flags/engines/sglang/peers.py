"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

A live switch in the processes of a launch outside the scheduler ranks: the HTTP server process
(where the routes and the tokenizer manager run), the detokenizer, the data-parallel controller
and, under ``dsv41-flags run``, multi-tokenizer workers.

Each such process with a live feature declared is a *peer*: a daemon thread answers on a ZMQ REP
socket ``ipc://<launch directory>/<role>-<pid>``. The launch directory is private to the user
(``<tmp>/dsv41_flags-<uid>/launch-<launch pid>``, mode 0700, owner checked) and named by the
launch's pid, which every process of the launch knows (``Runtime.launch_pid``, ``DSV41_LAUNCH``).
The HTTP process finds the peers by listing it.

A switch (``switch_launch``: the one order, for the HTTP route's ``http.switch_groups`` and the
offline Engine's ``rpc.switch_engine``): after the ranks' vote, every peer and the process that
asks (the HTTP process, the Engine's) vote (``check``), so a process that refuses, or one that
does not answer within ``PEER_TIMEOUT_S``, refuses the switch before any rank applies it; then
the ranks apply it at one step; then each peer applies it with the ranks' generation and request
id, at its own safe point (between two calls of the feature: a call in progress keeps the value
it read, ``live.gated``). A peer that fails then makes every rank and every peer that applied it
roll back. A process that sglang does not let the plugin into (tokenizer workers of
``--tokenizer-worker-num N`` under the plain plugin) holds no feature; under ``dsv41-flags run``
each worker is a peer (role ``tokenizer_worker``), and a switch of a feature patched in the HTTP
process is refused when fewer than N workers voted (``unreached``).
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import StrictBool, ValidationError

from dsv41_flags.engines.sglang.roles import TOKENIZER_WORKER
from dsv41_flags.errors import FlagsError, SwitchError
from dsv41_flags.state import State
from dsv41_flags.status import WIRE, Count, ProcessStatus, Record, Text, first_problem
from dsv41_flags.text import exception_text
from dsv41_flags.wire import dumps

#: seconds the HTTP process waits for one peer's answer
PEER_TIMEOUT_S = 10.0
#: the longest request or answer accepted on a peer socket (bytes)
MAX_MESSAGE = 1 << 20
#: the longest ``ipc://`` path a Unix socket takes (``sun_path`` less its terminator)
MAX_SOCKET_PATH = 107
PHASES = ("check", "apply", "rollback", "status")


class PeerAnswer(Record):
    """What a peer answers to ``check``, ``apply`` and ``rollback`` (``answer``), as received:
    the fields below are checked (``status.WIRE`` bounds), any other is dropped."""

    ok: StrictBool
    role: Text = ""
    pid: Optional[Count] = None
    generation: Optional[Count] = None
    old: Optional[StrictBool] = None
    new: Optional[StrictBool] = None
    changed: Optional[StrictBool] = None
    undone: Optional[StrictBool] = None
    state: Optional[State] = None
    reason: Text = ""


def checked(data: Any, phase: str) -> dict:
    """A peer's decoded answer to ``phase``, validated (``PeerAnswer``; ``ProcessStatus`` for
    ``status``) and reduced to the declared fields; ``{"ok": False, "reason"}`` naming the first
    problem when it is not a valid answer."""
    model = ProcessStatus if phase == "status" else PeerAnswer
    try:
        valid = model.model_validate(data, context=WIRE)
    except ValidationError as exc:
        return {"ok": False, "reason": f"not a valid answer: {first_problem(exc)}"[:300]}
    return valid.model_dump(mode="json", include=set(model.model_fields))


def launch_directory(launch_pid: int, *, create: bool) -> Path:
    """``<tmp>/dsv41_flags-<uid>/launch-<launch_pid>``, made 0700 when ``create``. Raises
    SwitchError when the user's directory is not a directory owned by this user with no access
    for others (it would let another user answer for a process)."""
    base = Path(tempfile.gettempdir()) / f"dsv41_flags-{os.getuid()}"
    here = base / f"launch-{launch_pid}"
    if create:
        base.mkdir(mode=0o700, exist_ok=True)
    try:
        info = base.lstat()
    except FileNotFoundError:
        return here
    _private(base, info)
    if create:
        here.mkdir(mode=0o700, exist_ok=True)
    try:
        _private(here, here.lstat())
    except FileNotFoundError:
        pass
    return here


def _private(path: Path, info: os.stat_result) -> None:
    """Raises SwitchError unless ``path`` (``info``: its lstat) is a directory, not a link, owned
    by this user, with no access for others (else another user could answer for a process)."""
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SwitchError(f"{path} is not a private directory of this user (owner uid "
                          f"{info.st_uid}, mode {stat.filemode(info.st_mode)}); live switches "
                          f"outside the schedulers need it: remove it")


def _who(rt) -> dict[str, Any]:
    return {k: v for k, v in rt.context.as_fields().items() if k != "process"}


def answer(rt, request: dict) -> dict:
    """This process's answer to one peer request ``{"phase", "name", "value", "requested_by",
    "request_id", "generation", "undo"}`` (``phase`` one of ``PHASES``): ``{"ok", pid, role,
    "generation", "old", "new", "state"}`` or ``{"ok": False, "reason"}``. ``check`` changes
    nothing; ``apply`` switches with the given generation; ``rollback`` undoes request ``undo``
    when it is this process's last switch; ``status`` is ``status.process_status``."""
    from dsv41_flags.status import process_status

    who = {**_who(rt), "generation": rt.live.generation}
    phase = request.get("phase")
    try:
        if phase == "status":
            from dsv41_flags.engines.sglang.metrics import update_process_safely

            update_process_safely(rt)
            return {"ok": True, **process_status(rt).model_dump(mode="json")}
        if phase not in PHASES:
            raise SwitchError(f"phase {str(phase)[:20]!r} is not one of {', '.join(PHASES)}")
        name, value = request.get("name"), request.get("value")
        requested_by = request.get("requested_by") or ""
        if phase == "rollback":
            last = rt.live.history[-1] if rt.live.history else None
            undone = last is not None and last.request_id == request.get("undo")
            if undone:
                rt.rollback(last, f"a process of the launch could not apply request "
                                  f"{request.get('undo')}")
            return {"ok": True, **who, "undone": undone, "generation": rt.live.generation}
        feature, new = rt.check_switch(name, value, requested_by)
        state = {s.name: str(s.state) for s in rt.states()}.get(feature.name)
        vote = {"ok": True, **who, "old": rt.value(feature), "new": new, "state": state}
        if phase == "check":
            return vote
        toggle = rt.switch(name, value, requested_by=requested_by,
                           generation=request.get("generation"), step=None,
                           request_id=request.get("request_id") or "")
        return {**vote, "generation": toggle.generation, "changed": toggle.changed}
    except FlagsError as exc:
        return {"ok": False, **who, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - answered, never raised into the listener
        return {"ok": False, **who, "reason": exception_text(exc)}


class Listener:
    """This process's peer socket and its daemon thread (``start``): one per process."""

    def __init__(self, rt, directory: Path) -> None:
        import zmq

        self.rt = rt
        self.path = directory / f"{rt.context.fields.get('role') or 'process'}-{os.getpid()}"
        if len(str(self.path)) > MAX_SOCKET_PATH:
            raise SwitchError(f"the peer socket path {self.path} is longer than a Unix socket "
                              f"takes ({MAX_SOCKET_PATH}); set TMPDIR to a shorter directory")
        self.socket = zmq.Context.instance().socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        self.socket.bind(f"ipc://{self.path}")
        self.pid = os.getpid()
        atexit.register(self.close)

    def start(self) -> None:
        threading.Thread(target=self._serve, name="dsv41-flags-peer", daemon=True).start()

    def _serve(self) -> None:
        """Answer every request, one at a time, for the life of the process: a request that is
        not a JSON object (or too deep to decode) is answered as such; only the end of the
        process's ZMQ context stops the thread."""
        import zmq

        while True:
            try:
                raw = self.socket.recv()
            except zmq.ContextTerminated:
                return
            except zmq.ZMQError:
                continue
            try:
                request = json.loads(raw)
                reply = answer(self.rt, request) if isinstance(request, dict) else \
                    {"ok": False, "reason": "a request is a JSON object"}
            except Exception as exc:  # noqa: BLE001 - answered, the thread goes on
                reply = {"ok": False, "reason": f"unreadable request ({exception_text(exc)[:100]})"}
            try:
                self.socket.send(dumps(reply).encode())
            except zmq.ContextTerminated:
                return
            except zmq.ZMQError:
                continue

    def close(self) -> None:
        """Remove this process's socket; the launching process removes the launch directory."""
        if os.getpid() != self.pid:   # a forked child never removes its parent's socket
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        if self.rt.launch_pid == self.pid:
            shutil.rmtree(self.path.parent, ignore_errors=True)


def listen(rt) -> bool:
    """Make this process a peer of its launch (once): bind its socket, start its thread. Returns
    False where there is nothing to do (a scheduler, which switches over sglang's RPC path; no
    launch pid; listening already). Raises SwitchError (directory, socket path) or zmq's error."""
    if rt.context.fields.get("role") == "scheduler" or rt.launch_pid is None \
            or rt.live.transport.get("peer"):
        return False
    from dsv41_flags.engines.sglang.metrics import update_process_safely

    listener = Listener(rt, launch_directory(rt.launch_pid, create=True))
    rt.live.transport["peer"] = listener
    listener.start()
    update_process_safely(rt)
    rt.state_listeners.append(lambda st: update_process_safely(rt))
    return True


def peer_sockets(launch_pid: int) -> list[tuple[str, int, Path]]:
    """``(role, pid, path)`` of every peer of the launch but this process, live or gone: a
    socket no process listens on is kept (``exited`` names its process in every answer, so a
    peer that died is never dropped without a word); the launch directory goes with the
    launch."""
    directory = launch_directory(launch_pid, create=False)
    found = []
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    for path in entries:
        role, _, pid_text = path.name.rpartition("-")
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        found.append((role, int(pid_text), path))
    return found


#: the reason of a peer whose socket no process listens on any more
EXITED = "the process exited (its socket no longer answers): it runs no feature; restart the server"


def _listening(path: Path) -> bool:
    """True when a process accepts connections on the Unix socket ``path``; a file left by a
    process that is gone (its pid perhaps reused since) refuses them at once."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def ask(path: Path, request: dict, timeout_s: float = PEER_TIMEOUT_S) -> dict:
    """One request to the peer at ``path``; its answer (``checked``), or ``{"ok": False,
    "reason"}`` when it did not answer within ``timeout_s`` seconds or answered something that
    is not a valid answer (wrong types, too deep, too large: ``MAX_MESSAGE``)."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    try:
        sock.connect(f"ipc://{path}")
        sock.send(json.dumps(request).encode())
        if not sock.poll(int(timeout_s * 1000)):
            return {"ok": False, "reason": f"no answer within {timeout_s:g} s"}
        return checked(json.loads(sock.recv()), str(request.get("phase")))
    except Exception as exc:  # noqa: BLE001 - anything a peer sends is its refusal, never ours
        return {"ok": False, "reason": f"unreadable answer ({exception_text(exc)[:200]})"}
    finally:
        sock.close()


def call_all(rt, request: dict) -> list[dict]:
    """``request`` answered by this process (``answer``) and by every peer of the launch, in
    that order; each answer carries ``role`` and ``pid``."""
    answers = [answer(rt, request)]
    if rt.launch_pid is None:
        return answers
    for role, pid, path in peer_sockets(rt.launch_pid):
        if not _listening(path):   # gone: named, never asked, never a vote against a switch
            answers.append({"ok": False, "exited": True, "role": role, "pid": pid,
                            "reason": EXITED})
            continue
        reply = ask(path, request)
        answers.append({**reply, "role": role, "pid": pid})   # who it is: the socket's name
    return answers


def vote(rt, params: dict, tokenizer_workers: int = 1) -> tuple[list[dict], str | None]:
    """Phase 1 outside the schedulers: ``(answers, refusal)`` of this process and every peer for
    ``params`` (``name``, ``value``, ``requested_by``); ``refusal`` says which process refused,
    is silent, or cannot be reached (``unreached``: tokenizer workers of ``tokenizer_workers``
    that answered no vote, counted only when the feature's patch is in place here, i.e. its
    target runs where requests are tokenized), else None."""
    votes = call_all(rt, {"phase": "check", **params})
    # a peer that exited runs nothing: it does not stop a switch (a kill switch must still
    # reach the live ones) and is named in the answer as not switched
    blocked = [v for v in votes if not v.get("ok") and not v.get("exited")]
    if votes[0].get("state") in (State.INSTALLED, State.BYPASSED):
        reached = sum(1 for v in votes if v.get("role") == TOKENIZER_WORKER
                      and (v.get("ok") or v.get("exited")))
        blocked += unreached(tokenizer_workers, reached)
    if not blocked:
        return votes, None
    return votes, (f"switch {params['name']}={params['value']!r} refused before any rank applied "
                   f"it: " + "; ".join(f"{label(v)}: {v.get('reason')}" for v in blocked))


def behind(votes: list[dict], generation: int) -> str | None:
    """Which processes are not on the ranks' ``generation`` (a refusal), or None."""
    others = [v for v in votes if v.get("generation") != generation and not v.get("exited")]
    if not others:
        return None
    return (f"the ranks are on generation {generation}, "
            + ", ".join(f"{label(v)} on {v.get('generation')}" for v in others))


def apply(rt, params: dict, generation: int, request_id: str) -> tuple[list[dict], str | None]:
    """Phase 2 outside the schedulers, after every rank applied the switch as ``generation``:
    ``(answers, failure)``; on a failure every process that applied it here has rolled back
    (the caller rolls back the ranks)."""
    applied = call_all(rt, {"phase": "apply", "generation": generation, "request_id": request_id,
                            **params})
    failed = [a for a in applied if not a.get("ok") and not a.get("exited")]
    if not failed:
        return applied, None
    call_all(rt, {"phase": "rollback", "undo": request_id, **params})
    return applied, "; ".join(f"{label(a)}: {a.get('reason')}" for a in failed)


def switch_launch(rt, params: dict, *, check: Callable[[], dict],
                  apply_ranks: Callable[[int], dict], rollback_ranks: Callable[[str], dict],
                  tokenizer_workers: int = 1) -> dict:
    """The order of a live switch across every process of the launch, for every caller (the
    HTTP route's ``http.switch_groups``, the offline Engine's ``rpc.switch_engine``): the ranks
    reached by the three callables, this process and its peers here. ``params``: ``{name, value,
    requested_by}``. The callables answer as ``rpc.scheduler_set`` does (one TP group's answer,
    or several merged: ``{ok, request_id, groups, ranks, error}``):

    1. ``check()``: the ranks vote (``phase="check"``); a refusal is returned as it came;
    2. this process and every peer vote (``vote``); a refusal (``tokenizer_workers``:
       ``unreached``) is ``{**check, "processes", "ok": False, "error"}``: no rank applied it;
    3. ranks on more than one generation, or a process on another generation than theirs
       (``behind``), refuse it the same way ("refused, nothing changed");
    4. ``apply_ranks(generation)``: every rank applies it (``generation``: the one they voted
       on); a failure is returned as it came when one group answered (``groups``: its ranks
       rolled back together), else goes on to 6;
    5. every peer applies it with the ranks' new generation and ``request_id`` (``apply``);
       success returns the ranks' answer with ``processes``;
    6. a failure (a peer: those that applied it rolled back already; a group) calls
       ``rollback_ranks(request_id)`` and returns ``{**applied, "ok": False, "rolled_back":
       its ranks, "error": "...; every process that applied it rolled back"}``.

    Raises what the callables raise (SwitchError: no answer in time) and SwitchError from
    ``call_all`` (the launch directory is not private)."""
    ranks = check()
    if not ranks.get("ok"):
        return ranks
    votes, refusal = vote(rt, params, tokenizer_workers)
    ranks = {**ranks, "processes": votes}
    if refusal:   # nothing changed: the check's would-be change is not said as one
        return {**ranks, "ok": False, "changed": False, "error": refusal}
    generations = sorted({r.get("generation") for r in ranks["ranks"]})
    apart = (f"the data-parallel groups are on different generations {generations}"
             if len(generations) > 1 else behind(votes, generations[0]))
    if apart:
        return {**ranks, "ok": False, "changed": False, "error": (
            f"switch {params['name']}={params['value']!r} refused, nothing changed: {apart}")}
    # applied even when every rank has that value already: each rank then records the request
    # (feature.toggle_unchanged) and keeps its generation
    applied = apply_ranks(generations[0])
    request_id = applied.get("request_id") or ""
    failure = None
    if applied.get("ok"):
        generation = max(r.get("generation") or 0 for r in applied["ranks"])
        applied["processes"], failure = apply(rt, params, generation, request_id)
        if failure is None:
            return applied
    elif (applied.get("groups") or 1) == 1:
        return applied
    undo = rollback_ranks(request_id)
    return {**applied, "ok": False, "changed": False, "rolled_back": undo.get("ranks") or [],
            "error": f"{failure or applied.get('error')}; every process that applied it rolled back"}


def label(entry: dict) -> str:
    """``detokenizer pid 42``: a process in a message; ``1 of 2 tokenizer_worker processes``
    for an ``unreached`` entry (no pid)."""
    if entry.get("pid") is None and entry.get("count"):
        return f"{entry['count']} of {entry.get('of')} {entry.get('role')} processes"
    return f"{entry.get('role') or 'process'} pid {entry.get('pid')}"


def unreached(tokenizer_workers: int, reached: int = 0) -> list[dict]:
    """The tokenizer workers a switch cannot reach: with ``--tokenizer-worker-num N`` (N > 1)
    sglang starts N HTTP processes and 0.5.23 calls ``load_plugins()`` in none of them, so under
    the plain plugin no feature is installed there; under ``dsv41-flags run`` each is a peer
    (role ``tokenizer_worker``). ``reached``: how many of them voted (this process included).
    Returns ``[]`` when every worker is reached (or N <= 1), else one entry ``{"ok": False,
    "role", "count", "of", "reason"}``."""
    missing = tokenizer_workers - max(0, reached)
    if tokenizer_workers <= 1 or missing <= 0:
        return []
    return [{"ok": False, "role": TOKENIZER_WORKER, "count": missing, "of": tokenizer_workers,
             "reason": f"--tokenizer-worker-num {tokenizer_workers}: {missing} of the "
                       f"{tokenizer_workers} tokenizer workers answered no vote (one still "
                       f"starting, or one the framework never entered: sglang does not load "
                       f"plugins in its tokenizer workers, only dsv41-flags run -- and dsv41-flags "
                       f"serve activate them), so a feature whose target runs there cannot be "
                       f"switched in every worker; try again once every worker serves, or relaunch "
                       f"under dsv41-flags serve"}]
