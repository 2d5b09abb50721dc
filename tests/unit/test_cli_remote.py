"""``dsv41-flags set --url`` and ``status --url`` against a tiny local HTTP server that answers
whatever the test says: every answer is checked before it is shown (one clear line and exit 1
for a bad one, never a traceback), one deadline bounds the whole call, a body that never ends
or is huge is cut at the size cap, the API key is sent as sglang's bearer key and printed
nowhere, and a refusal for want of the key says so."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.engines.http_client import MAX_ANSWER_BYTES

from ._child import CLI, REPO, clean_env, run_cmd

RANK = {"tp_rank": 0, "pp_rank": 0, "pid": 11, "step": 5, "generation": 1, "profile": "default",
        "features": [{"name": "folded_fence", "state": "installed", "value": True, "live": True,
                      "source": "live switch generation 1 by alice"}],
        "switches": [{"feature": "folded_fence", "old": False, "new": True, "generation": 1,
                      "requested_by": "alice", "step": 4, "at": "2026-12-01T00:00:00"}]}
STATUS = {"ok": True, "ranks": [RANK, {**RANK, "tp_rank": 1, "pid": 12}], "server": {"pid": 10, "generation": 1}}
APPLIED = {"ok": True, "feature": "folded_fence", "old": False, "new": True, "generation": 1,
           "step": 4, "ranks": [{"tp_rank": 0, "pid": 11, "generation": 1, "step": 4, "ok": True}]}


class Server:
    """One answer for every request: ``status`` and ``body`` (bytes, or a callable writing to
    the socket file itself); ``seen`` records each request's path and headers."""

    def __init__(self) -> None:
        self.status, self.body, self.seen = 200, b"{}", []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                owner.seen.append({"path": self.path, "headers": dict(self.headers),
                                   "body": self.rfile.read(length) if length else b""})
                if callable(owner.body):
                    owner.body(self)
                    return
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, data, status=200):
        self.status = status
        self.body = data if isinstance(data, bytes) or callable(data) else json.dumps(data).encode()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def cli(monkeypatch, tmp_path):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)

    def run(*args, env=None):
        return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    return run


def lines(result) -> list[str]:
    return result.output.splitlines()


# ------------------------------------------------------------------ valid answers
def test_status_lists_every_rank(cli, server):
    server.answer(STATUS)
    r = cli("status", "--url", server.url)
    assert r.exit_code == 0, r.output
    assert "2 scheduler rank(s), generation 1 on every rank" in r.output
    assert sum(1 for line in lines(r) if line.startswith("  tp")) == 2
    assert "pid 10  generation" in r.output and "(the HTTP server)" in r.output
    data = json.loads(cli("status", "--url", server.url, "--json").stdout)
    assert data["generations_agree"] is True and len(data["ranks"]) == 2
    server.answer({**STATUS, "ranks": [{**RANK, "serving": {"installed": ["folded_fence"],
                                                            "pending": ["autotune_keep"], "other": {}}}]})
    r = cli("status", "--url", server.url)
    assert "serving: installed folded_fence; pending (target never imported here) autotune_keep" \
        in r.output, r.output


def test_set_prints_every_rank_and_sends_the_switch(cli, server):
    server.answer(APPLIED)
    r = cli("set", "folded_fence=on", "--url", server.url, "--by", "alice")
    assert r.exit_code == 0, r.output
    assert "folded_fence: off -> on, generation 1, on 1 rank(s) at step 4" in r.output
    sent = json.loads(server.seen[-1]["body"])
    assert server.seen[-1]["path"] == "/dsv41_flags/set"
    assert sent == {"name": "folded_fence", "value": "on", "requested_by": "alice"}


def test_a_refused_switch_is_its_reason_and_exit_1(cli, server):
    server.answer({"ok": False, "feature": "folded_fence", "error": "rank tp1: drifted"}, 409)
    r = cli("set", "folded_fence=on", "--url", server.url)
    assert r.exit_code == 1 and "error: rank tp1: drifted" in r.output


# ------------------------------------------------------------------ hostile answers
BAD_STATUS = [
    ({"ok": True, "ranks": [1]}, "ranks.0"),
    ({"ok": True, "ranks": {"a": 1}}, "ranks"),
    ({"ok": True, "ranks": "x"}, "ranks"),
    ({"ok": True, "ranks": [{**RANK, "features": [{"name": "f", "value": True}]}]}, "state"),
    # a state is a word of dsv41_flags.state.State, never free text
    ({"ok": True, "ranks": [{**RANK, "features": [{**RANK["features"][0], "state": "on fire"}]}]},
     "features.0.state"),
    ({"ok": True, "ranks": [{**RANK, "generation": "1"}]}, "generation"),
    ({"ok": True, "ranks": [{**RANK, "generation": -1}]}, "generation"),
    ({"ok": True, "ranks": [{**RANK, "tp_rank": True}]}, "tp_rank"),
    ({"ok": True, "ranks": [{**RANK, "switches": [{"feature": "f"}]}]}, "switches.0"),
    ({"ok": True, "ranks": [{**RANK, "profile": "p" * 5000}]}, "profile"),
    ({"ok": True, "ranks": [RANK] * 5000}, "ranks"),
    ({"ranks": []}, "ok"),
    ({"ok": "yes", "ranks": []}, "ok"),
    ([1, 2], "the answer"),
    ("text", "the answer"),
    (None, "the answer"),
    (1e400, "the answer"),
]


@pytest.mark.parametrize("answer,where", BAD_STATUS, ids=[w + str(i) for i, (_, w) in enumerate(BAD_STATUS)])
def test_a_bad_status_answer_is_one_line_and_exit_1(cli, server, answer, where):
    server.answer(answer)
    r = cli("status", "--url", server.url)
    assert r.exit_code == 1
    assert len(lines(r)) == 1 and lines(r)[0].startswith("error: the server's status answer is not "
                                                         "valid: ") and where in r.output, r.output
    data = json.loads(cli("status", "--url", server.url, "--json").stdout)
    assert data["ok"] is False and "not valid" in data["error"] and data["ranks"] == []


BAD_SET = [
    ({"ok": True}, "feature"),
    ({"ok": True, "feature": "folded_fence", "old": False, "new": True, "generation": 1, "ranks": []},
     "ranks"),
    ({**APPLIED, "ranks": [1]}, "ranks.0"),
    ({**APPLIED, "ranks": "all"}, "ranks"),
    ({**APPLIED, "old": "off"}, "old"),
    ({"ok": False, "error": ["x"]}, "error"),
    ({"ok": 1}, "ok"),
    ([], "the answer"),
]


@pytest.mark.parametrize("answer,where", BAD_SET, ids=[w + str(i) for i, (_, w) in enumerate(BAD_SET)])
def test_a_bad_switch_answer_is_one_line_and_exit_1(cli, server, answer, where):
    server.answer(answer)
    r = cli("set", "folded_fence=on", "--url", server.url)
    assert r.exit_code == 1
    assert len(lines(r)) == 1 and "the server's switch answer is not valid" in r.output
    assert where in r.output, r.output
    data = json.loads(cli("set", "folded_fence=on", "--url", server.url, "--json").stdout)
    assert data["ok"] is False and "not valid" in data["error"]


@pytest.mark.parametrize("body,needle", [
    (b"<html>502</html>", "not a JSON answer"),
    (b"\xff\xfe{}", "not a JSON answer"),
    (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    (b"1" * 10_000, "not a JSON answer"),
])
def test_an_answer_that_is_not_json_is_one_line(cli, server, body, needle):
    server.answer(body)
    for command in (("status", "--url", server.url), ("set", "folded_fence=on", "--url", server.url)):
        r = cli(*command)
        assert r.exit_code == 1 and len(lines(r)) == 1 and needle in r.output, r.output


def _endless(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    chunk = b" " * (1 << 16)
    try:
        while True:
            handler.wfile.write(chunk)
    except OSError:
        pass


def _trickle(handler):
    handler.send_response(200)
    handler.send_header("Content-Length", "1000")
    handler.end_headers()
    try:
        for _ in range(100):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.3)
    except OSError:
        pass


def test_a_body_that_never_ends_is_cut_at_the_cap(cli, server):
    server.answer(_endless)
    r = cli("status", "--url", server.url, "--timeout", "60")
    assert r.exit_code == 1 and len(lines(r)) == 1
    assert f"larger than {MAX_ANSWER_BYTES} bytes" in r.output


def test_a_huge_json_answer_is_refused_at_the_cap(cli, server):
    server.answer({"ok": True, "ranks": [], "pad": "x" * (MAX_ANSWER_BYTES + 10)})
    r = cli("status", "--url", server.url, "--json")
    assert r.exit_code == 1 and "larger than" in json.loads(r.stdout)["error"]


def test_one_deadline_bounds_a_server_that_trickles(cli, server):
    server.answer(_trickle)   # each byte well within any per-read timeout, the whole far longer
    started = time.monotonic()
    r = cli("status", "--url", server.url, "--timeout", "1.5")
    took = time.monotonic() - started
    assert r.exit_code == 1 and "no complete answer within 1.5 s" in r.output
    assert took < 15   # the trickle alone would take 30 s


def test_an_unreachable_server_is_one_line(cli):
    import socket

    with socket.socket() as s:     # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("status", "--url", f"http://127.0.0.1:{port}")
    assert r.exit_code == 1 and len(lines(r)) == 1 and "cannot reach" in r.output


# ------------------------------------------------------------------ the key
@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_key_is_sent_as_a_bearer_key_and_printed_nowhere(cli, server, how):
    key = "S3CRET-admin-key"
    args, env = (["--api-key", key], None) if how == "option" else ([], {"DSV41_API_KEY": key})
    for answer, command in ((STATUS, ["status", "--url", server.url]),
                            (APPLIED, ["set", "folded_fence=on", "--url", server.url])):
        server.answer(answer)
        for extra in ([], ["--json"]):
            r = cli(*command, *args, *extra, env=env)
            assert r.exit_code == 0, r.output
            assert server.seen[-1]["headers"].get("Authorization") == f"Bearer {key}"
            assert key not in r.output
        server.answer({"error": "Unauthorized"}, 401)
        r = cli(*command, *args, env=env)
        assert r.exit_code == 1 and key not in r.output and "refused the key given" in r.output


@pytest.mark.parametrize("answer", [
    {"ok": False, "error": "you sent Bearer S3CRET-admin-key"},
    {"ok": True, "ranks": [], "error": "", "S3CRET-admin-key": 1},
    b"garbage Bearer S3CRET-admin-key",
])
def test_a_key_the_server_echoes_back_is_never_printed(cli, server, answer):
    key = "S3CRET-admin-key"
    for status in (200, 500):
        server.answer(answer, status)
        for command in (["status", "--url", server.url], ["set", "folded_fence=on", "--url", server.url]):
            for extra in ([], ["--json"]):
                r = cli(*command, "--api-key", key, *extra)
                assert "Traceback" not in r.output and key not in r.output, (command, r.output)


def test_a_switch_to_the_current_value_says_nothing_changed(cli, server):
    server.answer({**APPLIED, "old": True, "new": True, "changed": False})
    r = cli("set", "folded_fence=on", "--url", server.url)
    assert r.exit_code == 0 and "already on" in r.output and "nothing changed" in r.output, r.output


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_for_want_of_the_key_says_how_to_give_it(cli, server, status):
    server.answer({"error": "Unauthorized"}, status)
    for command in (["status", "--url", server.url], ["set", "folded_fence=on", "--url", server.url]):
        r = cli(*command)
        assert r.exit_code == 1 and len(lines(r)) == 1
        assert ("the server refused (HTTP %d): admin key required (give --api-key or DSV41_API_KEY)"
                % status) in r.output
        data = json.loads(cli(*command, "--json").stdout)
        assert data["ok"] is False and "admin key required" in data["error"]
    assert "Authorization" not in server.seen[-1]["headers"]


def test_the_key_is_not_in_the_help(cli):
    r = cli("set", "--help", env={"DSV41_API_KEY": "S3CRET-in-env"})
    assert "S3CRET" not in r.output and "DSV41_API_KEY" in r.output


# ------------------------------------------------------------------ hostile text, shown safely
HOSTILE = [
    "\n  tp0 pp0  pid 1  step 9  generation 7  profile forged",
    "\r  tp9 pp0  pid 1",
    "\x1b[2J\x1b[31mred\x1b]0;title\x07",
    "\x9b31mC1 CSI\x85NEL",
    "\u202eevil\u2066iso\u2069",
    "line\u2028sep\u2029para",
    "zero\u200bwidth\ufeff",
    "nul\x00del\x7f",
    "[/]",
    "[bold red]markup[/bold red]",
    "sglang[all]==0.5.24",
    ":thumbs_up: emoji",
    "\udcff surrogate",
]


def _hostile_status(text):
    rank = {**RANK, "profile": text,
            "features": [{**RANK["features"][0], "name": text, "source": text}],
            "switches": [{**RANK["switches"][0], "requested_by": text, "feature": text, "at": text}]}
    return {"ok": True, "ranks": [rank]}


def _assert_shown_safely(output: str, text: str):
    import unicodedata

    assert not [c for c in output if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")]
    if text.isprintable():
        assert text in output   # markup, brackets and emoji codes as written


@pytest.mark.parametrize("text", HOSTILE)
def test_status_shows_hostile_text_escaped_on_its_own_line(cli, server, text):
    server.answer(_hostile_status(text))
    r = cli("status", "--url", server.url)
    if "\udcff" in text:   # not Unicode text at all: refused as an invalid answer, one line
        assert r.exit_code == 1 and len(lines(r)) == 1 and "not valid" in r.output
        return
    assert r.exit_code == 0, r.output
    _assert_shown_safely(r.output, text)
    # one header, one rank line, one feature line, one switch line: nothing forged
    assert len(lines(r)) == 4 and sum(1 for line in lines(r) if line.startswith("  tp")) == 1


@pytest.mark.parametrize("text", HOSTILE)
def test_set_shows_hostile_text_escaped(cli, server, text):
    server.answer({**APPLIED, "feature": text})
    r = cli("set", "folded_fence=on", "--url", server.url)
    _assert_shown_safely(r.output, text)
    assert len(lines(r)) == (1 if "\udcff" in text else 3)
    server.answer({"ok": False, "error": text})
    r = cli("set", "folded_fence=on", "--url", server.url)
    assert r.exit_code == 1 and len(lines(r)) == 1
    _assert_shown_safely(r.output, text)


#: what a 404 must name: the process has no routes, both causes (no live feature there; tokenizer
#: workers under the plain plugin) and the fix of the second (a 404 carries no server options)
NO_ROUTES = ("404", "no dsv41_flags routes", "installed in the server's environment",
             "live feature", "--tokenizer-worker-num", "tokenizer workers", "plain sglang plugin",
             "dsv41-flags run --")


@pytest.mark.parametrize("body", [b'{"detail": "Not Found"}', b"<html>404</html>"])
def test_a_server_without_the_routes_says_so(cli, server, body):
    server.answer(body, 404)
    r = cli("status", "--url", server.url)
    assert r.exit_code == 1 and len(lines(r)) == 1 and "no dsv41_flags routes" in r.output
    assert all(part in r.output for part in NO_ROUTES), r.output
    assert "nothing was changed" not in r.output             # status changes nothing anyway


def test_a_switch_a_server_without_the_routes_refuses_names_both_causes_and_the_fix(cli, server):
    """A tokenizer worker of ``--tokenizer-worker-num 2`` under the plain plugin answers 404 (it
    has no routes: the server tier shows it). The command cannot tell that from a server without
    the package, so it names both, says nothing changed, and exits 1 (``--json`` too)."""
    server.answer(b'{"detail": "Not Found"}', 404)
    r = cli("set", "folded_fence=on", "--url", server.url)
    assert r.exit_code == 1 and len(lines(r)) == 1, r.output
    assert all(part in r.output for part in NO_ROUTES) and "nothing was changed" in r.output
    r = cli("set", "folded_fence=on", "--url", server.url, "--json")
    answer = json.loads(r.output)
    assert r.exit_code == 1 and answer["ok"] is False, answer
    assert all(part in answer["error"] for part in NO_ROUTES), answer
    assert [seen["path"] for seen in server.seen] == ["/dsv41_flags/set"] * 2


@pytest.mark.parametrize("value", ["0", "-1", "3601", "nan", "soon"])
def test_a_timeout_that_is_no_number_of_seconds_is_a_usage_error(cli, value):
    r = cli("status", "--url", "http://127.0.0.1:1", "--timeout", value)
    assert r.exit_code == 2 and "--timeout" in r.output


# ------------------------------------------------------------- the key goes to --url and nowhere else
def test_a_redirect_is_not_followed_so_the_key_stays_with_the_url(server, cli):
    other = Server()
    try:
        other.answer(STATUS)

        def redirect(handler):
            handler.send_response(302)
            handler.send_header("Location", other.url + "/dsv41_flags/status")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        server.answer(redirect)
        r = cli("status", "--url", server.url, "--api-key", "K3YSECRET", "--json")
        assert r.exit_code == 1 and other.seen == []
        assert "K3YSECRET" not in r.stdout + r.stderr
    finally:
        other.httpd.shutdown()
        other.httpd.server_close()


@pytest.mark.parametrize("key", ["K3YSECRET\nX", "K3YSECRET\r", "K3Y SECRET"])
def test_a_key_with_a_control_character_is_refused_and_never_shown(server, cli, key):
    server.answer(STATUS)
    r = cli("status", "--url", server.url, "--api-key", key, "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["ok"] is False
    assert "K3Y" not in r.stdout + r.stderr and server.seen == []


def test_non_finite_numbers_from_the_server_still_give_json(server, cli):
    server.answer(b'{"ok": true, "ranks": [], "x": NaN, "y": Infinity}')
    r = cli("status", "--url", server.url, "--json")
    answer = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    # the non-finite numbers are kept as their text, the rest of the answer as sent
    assert (answer["x"], answer["y"]) == ("NaN", "Infinity") and answer["ranks"] == []
    assert r.exit_code == 1 and answer["ok"] is False and answer["generations_agree"] is None


@pytest.mark.parametrize("answer", [{"ok": True, "ranks": []}, {"ok": True}, {"ok": True, "ranks": [], "server": {"pid": 10}}],
                         ids=["empty", "no-ranks-key", "server-only"])
def test_a_status_answer_with_no_rank_says_so_and_exits_1(cli, server, answer):
    server.answer(answer)
    r = cli("status", "--url", server.url)
    assert r.exit_code == 1
    assert r.stdout == "" and lines(r) == [f"error: no scheduler rank answered {server.url}: the server "
                                           f"holds no rank with dsv41_flags active, or none has started yet"]
    r = cli("status", "--url", server.url, "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["ok"] is False and "no scheduler rank answered" in data["error"]
    assert data.get("ranks", []) == []
    assert data["generations_agree"] is None


@pytest.mark.parametrize("args,needle", [
    (["set", "folded_fence=maybe", "--url", "http://127.0.0.1:9"], "the value is not one of"),
    (["set", "folded_fence=", "--url", "http://127.0.0.1:9"], "the value is not one of"),
    (["set", "folded_fence=on", "--url", "127.0.0.1:30000"], "write --url http://127.0.0.1:30000"),
    (["status", "--url", "127.0.0.1:30000"], "write --url http://127.0.0.1:30000"),
    (["status", "--url", "ftp://h:1"], "is not an http:// URL"),
])
def test_set_and_remote_status_refuse_what_no_server_could_take_before_sending(args, needle):
    proc = run_cmd([CLI, *args], clean_env(), REPO, timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr and "cannot reach" not in proc.stderr


def test_remote_status_with_no_rank_answering_does_not_claim_agreement():
    proc = run_cmd([CLI, "status", "--url", "http://127.0.0.1:9", "--json"], clean_env(), REPO, timeout=60)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["ok"] is False and data["generations_agree"] is None


@pytest.mark.parametrize("url", ["http://a b", "http://127.0.0.1:abc", "http://:80", "http://user@",
                                 "http://127.0.0.1:99999", "http://127.0.0.1:9?a=b#c", " http://127.0.0.1:9",
                                 "http://127.0.0.1:9\n", "http://[::1", "file:///etc/passwd",
                                 "http://" + "a" * 70 + ".com"])
def test_a_url_no_server_could_have_is_refused_before_sending(url):
    for args in (["set", "folded_fence=on", "--url", url, "--json"], ["status", "--url", url, "--json"]):
        proc = run_cmd([CLI, *args], clean_env(), REPO, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        data = json.loads(proc.stdout)
        assert data["ok"] is False and "is not an http:// URL of the engine server" in data["error"]


def test_set_and_status_list_every_process_outside_the_schedulers(cli, server):
    """The HTTP process and every other process of the launch (``processes``) are printed with
    their role, pid and generation, as ``set`` answered them and as ``status --url`` reads them."""
    detok = {"ok": True, "role": "detokenizer", "pid": 31, "generation": 1, "new": True}
    server.answer({**APPLIED, "processes": [{**detok, "role": "launcher", "pid": 10}, detok]})
    r = cli("set", "folded_fence=on", "--url", server.url, "--by", "t")
    assert r.exit_code == 0, r.output
    assert "  launcher pid 10: generation 1" in r.output and "  detokenizer pid 31: generation 1" in r.output
    server.answer({**STATUS, "processes": [{**RANK, "pid": 31, "role": "detokenizer",
                                            "tp_rank": None, "pp_rank": None}]})
    r = cli("status", "--url", server.url)
    assert r.exit_code == 0, r.output
    assert "  detokenizer  pid 31  generation" in r.output
    server.answer({**APPLIED, "processes": [{"ok": "yes", "pid": 1}]})
    r = cli("set", "folded_fence=on", "--url", server.url, "--by", "t")
    assert r.exit_code == 1 and "processes.0.ok" in r.output


def test_a_short_key_is_masked_where_it_stands_alone_never_inside_words(cli, server):
    """The quickstart's key ``A``: ``AUTOTUNE_KEEP`` and ``ALICE`` stay readable, the key echoed
    on its own is masked; a long key is masked wherever it appears."""
    server.answer({"ok": False, "error": "set AUTOTUNE_KEEP = true; by ALICE; got key A; Bearer A."})
    r = cli("set", "autotune_keep=on", "--url", server.url, "--by", "t", "--api-key", "A")
    assert "AUTOTUNE_KEEP" in r.output and "ALICE" in r.output
    assert "got key ***" in r.output and "Bearer ***." in r.output
    server.answer({"ok": False, "error": "echo xxSECRETADMINxx"})
    r = cli("set", "autotune_keep=on", "--url", server.url, "--by", "t", "--api-key", "SECRETADMIN")
    assert "SECRETADMIN" not in r.output and "xx***xx" in r.output


def test_a_process_that_did_not_apply_the_switch_fails_set_and_status(cli, server):
    """An answer that says ok but lists a process that did not apply it: exit 1, the reason
    printed; a silent process in a status answer is named, never shown as generation 0."""
    server.answer({**APPLIED, "processes": [{"ok": False, "role": "detokenizer", "pid": 5,
                                              "reason": "boom"}]})
    r = cli("set", "folded_fence=on", "--url", server.url, "--by", "t")
    assert r.exit_code == 1 and "NOT APPLIED: boom" in r.output and "detokenizer pid 5 (boom)" in r.output
    r = cli("set", "folded_fence=on", "--url", server.url, "--by", "t", "--json")
    data = json.loads(r.stdout)   # "ok" says what the exit status says
    assert r.exit_code == 1 and data["ok"] is False, data
    assert data["not_applied"] == [{"role": "detokenizer", "pid": 5, "reason": "boom"}]
    server.answer({**STATUS, "processes": [{"ok": False, "role": "detokenizer", "pid": 5,
                                            "reason": "no answer within 10 s"}]})
    r = cli("status", "--url", server.url)
    assert r.exit_code == 1 and "NOT ANSWERING: no answer within 10 s" in r.output
