"""A live switch reaches the launch's processes outside the schedulers (``engines/sglang/peers.py``):
a real second process (a fresh interpreter activated from the launch's snapshot, role
``detokenizer``) answers on its peer socket; the launching process votes and applies with it, and
the child's patched call changes after the switch. A process that is gone, a directory that is not
private and a topology the plugin cannot enter each say so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from dsv41_flags.engines.sglang import peers
from dsv41_flags.errors import SwitchError

from ._child import FEATURE, REPO, make_project, parent

LIVE = FEATURE.replace('engine="",', 'engine="", live=True,')
SETTINGS = '[default]\ndemo_patch = false\nfeatures_dir = "FEATURES_DIR"\n'
CHILD = """
    import sys
    import dsv41_flags
    from dsv41_flags.engines.sglang.peers import listen
    rt = dsv41_flags.activate(role="detokenizer")
    import {target} as target
    listen(rt)
    print("ready", flush=True)
    for line in sys.stdin:
        print(target.Worker().forward(), flush=True)
"""


@pytest.fixture
def short_tmp(monkeypatch):
    """A short temporary directory for the launch directories (a Unix socket path is short)."""
    path = tempfile.mkdtemp(prefix="pe", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def launch(tmp_path, short_tmp):
    """``(runtime of this process, the child process)``: this process resolved and armed the
    launch; the child activated from its snapshot as a detokenizer and listens."""
    project = make_project(tmp_path, "demo_patch", LIVE, SETTINGS)
    sys.path.insert(0, str(tmp_path))
    rt = parent(project)
    rt.arm()
    __import__(project.target)
    # this checkout's package first in the child too (the environment's editable install may
    # point at another checkout, whose snapshot rules differ)
    env = {**project.env, "TMPDIR": short_tmp,
           "PYTHONPATH": os.pathsep.join([project.env["PYTHONPATH"], str(REPO / "src")])}
    rt.export(env)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD.format(target=project.target))],
                            env=env, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        yield rt, proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
        sys.path.remove(str(tmp_path))
        rt.uninstall()


def child_call(proc) -> str:
    proc.stdin.write("call\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_a_switch_votes_and_applies_in_every_process_of_the_launch(launch):
    rt, proc = launch
    request = {"name": "demo_patch", "value": "on", "requested_by": "test"}
    votes = peers.call_all(rt, {"phase": "check", **request})
    assert [(v["ok"], v["role"], v["new"]) for v in votes] == [(True, "launcher", True),
                                                               (True, "detokenizer", True)]
    assert votes[1]["pid"] == proc.pid and child_call(proc) == "stock"       # nothing changed yet
    applied = peers.call_all(rt, {"phase": "apply", "generation": 1, "request_id": "r1", **request})
    assert [(a["ok"], a["generation"], a["changed"]) for a in applied] == [(True, 1, True)] * 2
    assert child_call(proc) == "patched n=4"
    undone = peers.call_all(rt, {"phase": "rollback", "undo": "r1", **request})
    assert [u["undone"] for u in undone] == [True, True] and child_call(proc) == "stock"
    status = peers.call_all(rt, {"phase": "status"})
    demo = {f["name"]: f for f in status[1]["features"]}["demo_patch"]
    assert status[1]["role"] == "detokenizer" and demo["value"] is False


def test_a_process_that_refuses_is_named_with_its_reason(launch):
    rt, proc = launch
    votes = peers.call_all(rt, {"phase": "check", "name": "no_such", "value": "on",
                                "requested_by": "t"})
    assert [v["ok"] for v in votes] == [False, False]
    assert "no_such" in votes[1]["reason"] and peers.label(votes[1]) == f"detokenizer pid {proc.pid}"


def test_a_gone_process_is_named_never_dropped_and_a_silent_one_is_named(launch, short_tmp):
    """A peer killed while serving is named in every answer as exited (not asked: no wait),
    and does not stop a switch from reaching the processes that live."""
    rt, proc = launch
    pid = proc.pid
    proc.kill()
    proc.wait(timeout=30)
    answers = peers.call_all(rt, {"phase": "status"})
    gone = [a for a in answers if a.get("pid") == pid]
    assert gone == [{"ok": False, "exited": True, "role": "detokenizer", "pid": pid,
                     "reason": peers.EXITED}], answers
    votes, refusal = peers.vote(rt, {"phase": "check", **REQUEST})
    assert refusal is None, refusal
    import zmq

    silent = zmq.Context.instance().socket(zmq.REP)        # bound, never answers
    path = peers.launch_directory(rt.launch_pid, create=True) / f"detokenizer-{os.getppid()}"
    silent.bind(f"ipc://{path}")
    try:
        answer = peers.ask(path, {"phase": "status"}, timeout_s=0.2)
        assert answer == {"ok": False, "reason": "no answer within 0.2 s"}
    finally:
        silent.close(linger=0)


def test_a_launch_directory_others_may_enter_is_refused(short_tmp):
    base = os.path.join(short_tmp, f"dsv41_flags-{os.getuid()}")
    os.mkdir(base, 0o700)
    os.chmod(base, 0o777)
    with pytest.raises(SwitchError, match="not a private directory"):
        peers.launch_directory(1, create=True)


def test_tokenizer_workers_the_plugin_never_enters_are_named():
    assert peers.unreached(1) == [] and peers.unreached(2, reached=2) == []
    (entry,) = peers.unreached(2)
    assert entry["ok"] is False and "--tokenizer-worker-num 2" in entry["reason"]
    assert "dsv41-flags run --" in entry["reason"]
    (entry,) = peers.unreached(3, reached=1)           # one worker activated, two did not
    assert (entry["count"], entry["of"]) == (2, 3) and "2 of the 3" in entry["reason"]
    assert peers.label(entry) == "2 of 3 tokenizer_worker processes"


def test_a_switch_patched_here_is_refused_while_a_tokenizer_worker_is_unreached(launch):
    """The feature's patch is in place in this process (its target runs where requests are
    tokenized) and the launch has 2 tokenizer workers of which none is a peer: refused before
    any rank, naming them; with no worker (1) it goes on."""
    rt, proc = launch
    request = {"name": "demo_patch", "value": "on", "requested_by": "test"}
    votes, refusal = peers.vote(rt, request, tokenizer_workers=2)
    assert votes[0]["state"] == "bypassed" and votes[0]["ok"] is True
    assert refusal is not None and "2 of 2 tokenizer_worker processes" in refusal, refusal
    assert "refused before any rank applied it" in refusal and "dsv41-flags run" in refusal
    assert peers.vote(rt, request, tokenizer_workers=1)[1] is None
    assert child_call(proc) == "stock"                                   # nothing applied


def test_a_request_too_deep_to_decode_is_answered_and_the_listener_goes_on(launch):
    rt, proc = launch
    import zmq

    (_, pid, path), = peers.peer_sockets(rt.launch_pid)
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{path}")
        sock.send(b"[" * 100000 + b"]" * 100000)
        assert sock.poll(10000), "the listener did not answer"
        assert "unreadable request" in sock.recv().decode()
    finally:
        sock.close()
    assert peers.ask(path, {"phase": "status"})["ok"] is True            # still serving


@pytest.mark.parametrize("reply", [
    b"[" * 100000 + b"]" * 100000,                        # too deep to decode
    b'{"ok": true, "generation": NaN}',                   # not JSON
    b'{"ok": "yes"}',                                     # wrong type
    b'{"ok": true, "generation": -1}',                    # out of range
    b'[1, 2]',                                            # not an object
])
def test_a_peer_answer_that_is_not_valid_is_its_refusal_never_a_traceback(short_tmp, reply):
    import threading

    import zmq

    path = peers.launch_directory(os.getpid() + 1, create=True) / f"evil-{os.getppid()}"
    server = zmq.Context.instance().socket(zmq.REP)
    server.setsockopt(zmq.LINGER, 0)
    server.bind(f"ipc://{path}")

    def serve_once():
        server.recv()
        server.send(reply)
    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    try:
        answer = peers.ask(path, {"phase": "apply", "name": "x", "value": True})
    finally:
        thread.join(10)
        server.close()
    assert answer["ok"] is False and answer["reason"], answer
    assert set(answer) == {"ok", "reason"}


def test_a_socket_no_process_listens_on_is_named_exited_at_once(short_tmp):
    """A file left behind by a process whose pid is now another process's (pid reuse): no
    listener, so it is not asked (no 10 s wait): it is named as exited."""
    import socket as socket_module

    directory = peers.launch_directory(os.getpid() + 1, create=True)
    stale = directory / f"detokenizer-{os.getppid()}"        # a live pid, no listener
    s = socket_module.socket(socket_module.AF_UNIX)
    s.bind(str(stale))
    s.close()                                                # bound, never listening
    assert peers.peer_sockets(os.getpid() + 1) == [("detokenizer", os.getppid(), stale)]
    assert stale.exists()   # kept: every answer of the launch names its process as exited


# ---------------------------------------------------------------- the order (peers.switch_launch)
# ``http.switch_groups`` and ``rpc.switch_engine`` both run ``switch_launch``; here the ranks are
# the order's three callables (answers shaped as ``rpc.scheduler_set``'s), the peers are real:
# this process, the child detokenizer and, where a branch needs one, a scripted peer socket.
REQUEST = {"name": "demo_patch", "value": "on", "requested_by": "test"}


class Ranks:
    """The ranks' side of one switch, as the callables see it: ``calls`` records each step."""

    def __init__(self, groups: int = 1, apply_ok: bool = True) -> None:
        self.groups, self.apply_ok, self.calls = groups, apply_ok, []

    def check(self) -> dict:
        self.calls.append(("check",))
        return {"ok": True, "request_id": "c-1", "groups": self.groups,
                "ranks": [{"generation": 0}] * self.groups}

    def apply(self, generation: int) -> dict:
        self.calls.append(("apply", generation))
        if not self.apply_ok:
            return {"ok": False, "request_id": "r-7", "groups": self.groups,
                    "error": "switch rolled back on every rank: tp0: boom",
                    "ranks": [{"generation": generation}] * self.groups}
        return {"ok": True, "request_id": "r-7", "groups": self.groups, "generation": 1,
                "ranks": [{"generation": 1}] * self.groups}

    def rollback(self, request_id: str) -> dict:
        self.calls.append(("rollback", request_id))
        return {"ok": True, "ranks": [{"undone": True, "generation": 0}]}

    def run(self, rt) -> dict:
        return peers.switch_launch(rt, REQUEST, check=self.check, apply_ranks=self.apply,
                                   rollback_ranks=self.rollback)


@pytest.fixture
def scripted(launch):
    """``start(answers)``: a peer socket of the launch that answers each phase with
    ``answers[phase]``; yields ``start``, stops the peer afterwards."""
    import threading

    import zmq

    rt, _ = launch
    stop = threading.Event()
    threads = []

    def start(answers: dict) -> str:
        path = peers.launch_directory(rt.launch_pid, create=True) / f"scripted-{os.getppid()}"
        server = zmq.Context.instance().socket(zmq.REP)
        server.setsockopt(zmq.LINGER, 0)
        server.bind(f"ipc://{path}")

        def serve():
            try:
                while not stop.is_set():
                    if server.poll(50):
                        phase = json.loads(server.recv())["phase"]
                        server.send(json.dumps(answers[phase]).encode())
            finally:
                server.close()
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return f"scripted pid {os.getppid()}"

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)


def test_the_order_applies_on_the_ranks_then_every_peer_with_the_ranks_request_id(launch):
    rt, proc = launch
    ranks = Ranks()
    answer = ranks.run(rt)
    assert ranks.calls == [("check",), ("apply", 0)] and answer["ok"] is True
    assert [(p["role"], p["generation"], p["changed"]) for p in answer["processes"]] == [
        ("launcher", 1, True), ("detokenizer", 1, True)]
    assert child_call(proc) == "patched n=4" and rt.live.history[-1].request_id == "r-7"


def test_a_peer_that_refuses_refuses_the_switch_before_any_rank_applies_it(launch, scripted):
    rt, proc = launch
    who = scripted({"check": {"ok": False, "reason": "not today"}})
    ranks = Ranks()
    answer = ranks.run(rt)
    assert ranks.calls == [("check",)] and answer["ok"] is False
    assert answer["error"] == (f"switch demo_patch='on' refused before any rank applied it: "
                               f"{who}: not today")
    assert [p["ok"] for p in answer["processes"]] == [True, True, False]
    assert child_call(proc) == "stock" and rt.live.generation == 0


def test_a_peer_on_another_generation_refuses_the_switch_and_nothing_changes(launch, scripted):
    rt, proc = launch
    who = scripted({"check": {"ok": True, "generation": 3}})
    ranks = Ranks()
    answer = ranks.run(rt)
    assert ranks.calls == [("check",)] and answer["ok"] is False
    assert answer["error"] == (f"switch demo_patch='on' refused, nothing changed: the ranks are "
                               f"on generation 0, {who} on 3")
    assert child_call(proc) == "stock" and rt.live.generation == 0


def test_a_peer_that_fails_to_apply_rolls_back_every_rank_and_every_peer(launch, scripted):
    rt, proc = launch
    who = scripted({"check": {"ok": True, "generation": 0},
                    "apply": {"ok": False, "reason": "cannot here"},
                    "rollback": {"ok": True, "undone": False}})
    ranks = Ranks()
    answer = ranks.run(rt)
    assert ranks.calls == [("check",), ("apply", 0), ("rollback", "r-7")]
    assert answer["ok"] is False and answer["rolled_back"] == [{"undone": True, "generation": 0}]
    assert answer["error"] == f"{who}: cannot here; every process that applied it rolled back"
    assert [p["ok"] for p in answer["processes"]] == [True, True, False]     # they had applied it
    assert child_call(proc) == "stock" and rt.live.generation == 0 and not rt.live.history


def test_a_group_that_fails_to_apply_rolls_back_the_other_groups_and_no_peer_applies(launch):
    rt, proc = launch
    ranks = Ranks(groups=2, apply_ok=False)
    answer = ranks.run(rt)
    assert ranks.calls == [("check",), ("apply", 0), ("rollback", "r-7")]
    assert answer["error"].endswith("tp0: boom; every process that applied it rolled back")
    alone = Ranks(groups=1, apply_ok=False)     # one group: its ranks rolled back together
    assert alone.run(rt)["error"] == "switch rolled back on every rank: tp0: boom"
    assert alone.calls == [("check",), ("apply", 0)]
    assert child_call(proc) == "stock" and rt.live.generation == 0


def test_the_ranks_refusal_is_the_answer_and_no_peer_is_asked(launch):
    rt, proc = launch
    refusal = {"ok": False, "error": "switch demo_patch='on' refused", "ranks": []}
    answer = peers.switch_launch(rt, REQUEST, check=lambda: refusal,
                                 apply_ranks=pytest.fail, rollback_ranks=pytest.fail)
    assert answer is refusal and "processes" not in answer
