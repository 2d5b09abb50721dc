"""Text from outside (a request's ``requested_by``, a variable, a settings value, a command-line
argument) reaches an event line or an error only made safe: control characters escaped in
console events, ``requested_by`` with one refused on every switch path, and every error that
quotes such a value quotes it bounded (``text.quoted``)."""
import io
import re
import json

import pytest
import structlog
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.engines.sglang.http import BadRequest, parse_set_request
from dsv41_flags.errors import SwitchError
from dsv41_flags.live import check_requested_by
from dsv41_flags.text import quoted

CONTROLS = ["\x1b[31mred", "two\nlines", "nul\x00", "bidi\u202eevil", "csi\x9b2J", "cr\rover",
            "sep\u2028line", "zw\u200bsp", "del\x7f", "tab\there"]


@pytest.mark.parametrize("who", CONTROLS)
def test_requested_by_with_a_control_character_is_refused_naming_the_field(who):
    with pytest.raises(SwitchError, match="requested_by holds the control character"):
        check_requested_by(who)


@pytest.mark.parametrize("who", CONTROLS)
def test_the_http_route_refuses_a_control_character_in_requested_by(who):
    body = json.dumps({"name": "folded_fence", "value": "on", "requested_by": who}).encode()
    with pytest.raises(SwitchError) as caught:
        parse_set_request(body, "127.0.0.1")
    assert "requested_by" in str(caught.value)
    assert isinstance(caught.value, (BadRequest, SwitchError))       # the route answers 400 for both


@pytest.mark.parametrize("who", ["\x1b[31mred", "two\nlines", "bidi\u202eevil"])
def test_set_refuses_a_control_character_in_by_before_sending(who, monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("DSV41_")]:
        monkeypatch.delenv(key)
    r = CliRunner().invoke(app, ["set", "folded_fence=on", "--url", "http://127.0.0.1:9", "--by", who])
    assert r.exit_code == 2
    assert "requested_by holds the control character" in r.output
    assert "\x1b" not in r.output and "\u202e" not in r.output


@pytest.mark.parametrize("who", ["alice", "bob@host-1", "ü 中文", "http 10.0.0.1"])
def test_printable_requested_by_is_kept(who):
    assert check_requested_by(who) == who


@pytest.fixture
def console_log():
    from dsv41_flags import logs
    structlog.reset_defaults()
    stream = io.StringIO()
    logs.configure("console", stream=stream)
    yield stream
    structlog.reset_defaults()


@pytest.mark.parametrize("text", CONTROLS)
def test_a_console_event_shows_outside_text_escaped_on_one_line(console_log, text):
    structlog.get_logger().info(f"switch.refused{text}", feature=text, requested_by=text,
                                reason={"why": [text]}, **{f"key{text}": 1})
    line = console_log.getvalue()
    assert line.count("\n") == 1 and line.endswith("\n")
    shown = line.replace("\x1b[", "")          # the renderer's own colour codes
    for ch in ("\x00", "\r", "\u202e", "\x9b", "\u2028", "\u200b", "\x7f"):
        assert ch not in shown
    assert "\x1b[31mred" not in line


BIG = "x" * 100_000


def _cli(args, env):
    import os
    return CliRunner().invoke(app, args, env={**{k: None for k in os.environ if k.startswith("DSV41_")}, **env})


@pytest.mark.parametrize("args,env", [
    (["status"], {"DSV41_ENV": BIG}),
    (["status", "--json"], {"DSV41_ENV": BIG}),
    (["status"], {"DSV41_FOLDED_FENCE": BIG}),
    (["status"], {"DSV41_AUTOTUNE_KEEP_KEEP_OLD": BIG}),
    (["status"], {"DSV41_STRICT": BIG}),
    (["set", f"folded_fence={BIG}", "--url", "http://127.0.0.1:9"], {}),
    (["set", BIG, "--url", "http://127.0.0.1:9"], {}),
    (["status", "--url", "http://127.0.0.1:9", "--timeout", BIG], {}),
    (["status", "--json", "--url", "http://127.0.0.1:9", "--timeout", BIG], {}),
    (["status", "--url", "http://" + BIG], {}),
    (["explain", BIG], {}),
], ids=["profile", "profile-json", "flag", "option", "strict", "switch-value", "assignment",
        "timeout", "timeout-json", "url", "explain-key"])
def test_an_error_quotes_a_huge_outside_value_bounded(args, env):
    r = _cli(args, env)
    assert r.exit_code != 0
    assert len(r.output) < 4000, r.output[:400]
    assert re.search(r"\(1000\d\d (chars|characters)\)", r.output), r.output[:600]


def test_a_settings_file_value_is_quoted_bounded(tmp_path):
    (tmp_path / "settings.toml").write_text(f'[default]\nfolded_fence = "{BIG}"\n')
    r = _cli(["status", "--settings", str(tmp_path / "settings.toml")], {})
    assert r.exit_code == 1 and len(r.output) < 4000, r.output[:400]


@pytest.mark.parametrize("value,expected", [
    ("short", "'short'"), ("x" * 200, repr("x" * 200)), ("x" * 201, repr("x" * 200) + "… (201 chars)"),
    (list(range(100)), None), ("a\x1bb", "'a\\x1bb'"),
])
def test_quoted_is_the_repr_up_to_the_limit_then_the_length(value, expected):
    got = quoted(value)
    if expected is not None:
        assert got == expected
    assert len(got) <= 200 + len("… (999999 chars)") + 2


@pytest.mark.parametrize("exc,shown", [
    (MemoryError(), "MemoryError"), (RecursionError(), "RecursionError"),
    (ValueError("bad"), "ValueError: bad")])
def test_a_reason_names_the_exception_and_never_ends_in_a_bare_colon(exc, shown):
    from dsv41_flags.text import exception_text

    assert exception_text(exc) == shown
