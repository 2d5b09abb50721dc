"""How the command line's parameters reach the commands: typer's own coercion, through click's
public ``make_context`` (``ctx.params``, ``ctx.args``): a path option is a ``Path`` (a list of
them when repeatable), a text option the text as typed (markup and brackets untouched), the
words after ``--`` kept apart, a value the system refuses a clear usage error."""
from pathlib import Path

import pytest
import typer
import typer.main
from hypothesis import given, settings as hsettings, strategies as st

from dsv41_flags.cli import app

GROUP = typer.main.get_command(app)


def params(*args: str):
    """``(ctx.params, ctx.args)`` typer gives the command ``args[0]`` for ``args[1:]``."""
    cmd = GROUP.get_command(None, args[0])
    ctx = cmd.make_context(args[0], list(args[1:]))
    return ctx.params, ctx.args


def test_repeatable_settings_are_paths_and_the_profile_is_text():
    got, rest = params("status", "-s", "a.toml", "--settings", "b/c.toml", "-p", "tp3", "--json")
    assert got["settings"] == [Path("a.toml"), Path("b/c.toml")]
    assert all(type(p) is type(Path()) for p in got["settings"])
    assert got["profile"] == "tp3" and got["as_json"] is True and got["url"] is None and rest == []


def test_absent_options_take_their_defaults():
    got, _ = params("check")
    assert not got["settings"] and got["profile"] is None and got["engine"] in (None, [], ())
    assert got["all_"] is False and got["live"] is False and got["as_json"] is False


@pytest.mark.parametrize("spec", ["[/]", "sglang[all]==0.5.24", "[red]x[/red]", "a b", "ü",
                                  "", "-", "~/x"])
def test_text_options_are_kept_as_typed(spec):
    got, _ = params("check", "--engine", spec, "--engine", "sglang==0.5.23")
    assert got["engine"] == [spec, "sglang==0.5.23"]
    assert params("status", "--profile", spec)[0]["profile"] == spec


def test_a_path_option_is_one_path_and_the_launch_command_stays_apart():
    got, rest = params("fingerprint", "--write", "side.json", "--explain", "--", "python", "-m",
                       "sglang.launch_server", "--port", "1")
    assert got["write"] == Path("side.json") and got["explain_"] is True and got["diff"] is None
    assert rest == ["python", "-m", "sglang.launch_server", "--port", "1"]


@pytest.mark.parametrize("raw", ["~/x", "a//b/", " spaced ", "ü", "\udcff", "/nonexistent/dir/f"])
def test_a_path_is_never_expanded_nor_checked(raw):
    assert params("status", "-s", raw)[0]["settings"] == [Path(raw)]


def test_a_nul_byte_in_a_path_is_a_usage_error_naming_the_option():
    with pytest.raises(typer.BadParameter) as info:
        params("status", "-s", "a\x00b")
    assert "settings" in info.value.format_message() or "null" in info.value.format_message()


@hsettings(max_examples=40, deadline=None)
@given(st.text().filter(lambda t: "\x00" not in t and not t.startswith("-")))
def test_any_text_reaches_the_command_unchanged(text):
    assert params("status", "--profile", text)[0]["profile"] == text
    assert params("check", "--engine", text)[0]["engine"] == [text]
    if text:
        assert params("status", "-s", text)[0]["settings"] == [Path(text)]


def test_a_bad_flag_value_is_exit_2_through_the_runner():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["status", "--no-such-option"])
    assert r.exit_code == 2 and "No such option" in r.output


USAGE_ERRORS = [
    (["status", "--json", "--bogus"], "--bogus", "No such option: --bogus"),
    (["set", "--json"], "assignment", "Missing argument"),
    (["check", "--json", "--engine"], "--engine", "requires an argument"),
    (["status", "--json", "--url", "http://127.0.0.1:9", "--timeout", "abc"], "--timeout", "abc"),
    (["nosuch", "--json"], "", "No such command 'nosuch'"),
] + [(["status", "--json", "--url", "http://127.0.0.1:9", "--timeout", t], "--timeout",
      f"{t} is not a number of seconds in (0, 3600]") for t in ("0", "-1", "nan", "inf", "3601")]


@pytest.mark.parametrize("args,key,message", USAGE_ERRORS, ids=[" ".join(a[:1] + a[-2:]) for a, _, _ in USAGE_ERRORS])
def test_a_usage_error_under_json_is_one_json_object_with_exit_2(args, key, message):
    import json
    from typer.testing import CliRunner
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    answer = json.loads(r.stdout)
    assert answer["ok"] is False and len(answer["problems"]) == 1
    problem = answer["problems"][0]
    assert problem["key"] == key and problem["origin"] == "command line"
    assert message in problem["message"] or (t := args[-1]) in problem["message"]


@pytest.mark.parametrize("args", [a for a, _, _ in USAGE_ERRORS], ids=[" ".join(a[:1] + a[-2:]) for a, _, _ in USAGE_ERRORS])
def test_a_usage_error_without_json_is_text_on_stderr_with_exit_2(args):
    from typer.testing import CliRunner
    r = CliRunner().invoke(app, [a for a in args if a != "--json"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "Error:" in r.stderr
