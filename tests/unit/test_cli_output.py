"""The CLI's one way to write for a human (``dsv41_flags.cli.output``): control characters
escaped, markup never read, one print one line; and the commands that show outside data
(file names, engine specs, settings values, keys) through it."""
import io
import json
import unicodedata

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.cli.output import console, safe_text

from .test_cli_remote import HOSTILE

UNSAFE = ("Cc", "Cf", "Zl", "Zp", "Cs")


def shown(*objects, **kwargs) -> str:
    buf = io.StringIO()
    console(file=buf, width=200).print(*objects, **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize("text", HOSTILE)
def test_a_print_is_one_line_with_no_control_character(text):
    got = shown(f"x {text} y", style="red")
    assert got.endswith("\n") and got.count("\n") == 1
    assert not [c for c in got[:-1] if unicodedata.category(c) in UNSAFE]
    assert safe_text(text) in got


@pytest.mark.parametrize("text,expected", [
    ("a\nb", "a\\nb"), ("a\rb", "a\\rb"), ("a\tb", "a\\tb"), ("\x1b[31m", "\\x1b[31m"),
    ("\x9b", "\\x9b"), ("\x7f", "\\x7f"), ("\x00", "\\x00"), ("\u202e", "\\u202e"),
    ("\u2028", "\\u2028"), ("\ufeff", "\\ufeff"), ("\U000e0041", "\\U000e0041"),
    ("\udcff", "\\udcff"), ("[/]", "[/]"), ("sglang[all]==0.5.24", "sglang[all]==0.5.24"),
    ("ü ß 中文 \u00a0nbsp", "ü ß 中文 \u00a0nbsp"), (":smile:", ":smile:"), (42, "42"),
])
def test_safe_text_escapes_exactly_the_unsafe_characters(text, expected):
    assert safe_text(text) == expected


@pytest.mark.parametrize("text", ["[/]", "[bold]x[/bold]", "sglang[all]==0.5.24", ":smile:", "[red"])
def test_markup_and_emoji_codes_print_as_written(text):
    assert shown(text) == text + "\n"


@pytest.fixture
def cli(monkeypatch, tmp_path):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def run(*args, env=None):
        return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    return run


NAMES = ["x\x1b[31m[red]sglang[all]==0.5.24", "[/]", "a\nfolded_fence     armed", "\u202eevil"]


@pytest.mark.parametrize("name", NAMES)
def test_an_engine_spec_is_shown_as_written(cli, tmp_path, name):
    """``check --engine``: the release's label (a file name here) is a column header and never
    markup; its control characters are escaped (a directory that is no source tree: unreadable)."""
    spec = name
    if "/" not in name:   # a directory of that name: the label is its path
        (tmp_path / name).mkdir()
        spec = str(tmp_path / name)
    r = cli("check", "--all", "--engine", spec)
    assert r.exit_code == 1, r.output
    assert not [c for c in r.output if c != "\n" and unicodedata.category(c) in UNSAFE]
    if name.isprintable():
        assert name in r.output.replace("\n", "") or name[:10] in r.output


@pytest.mark.parametrize("name", NAMES)
def test_a_settings_file_name_and_value_are_shown_escaped(cli, tmp_path, name):
    # (no glob character in the file name: the settings loader globs it)
    settings = tmp_path / ("".join(c for c in name if c not in "/[]*?") + ".toml")
    value = name.replace("\\", "").replace('"', "")
    settings.write_text(f'[default]\nfolded_fence = "{value.encode("unicode_escape").decode()}"\n')
    for command in (["status", "-s", str(settings)], ["validate", "-s", str(settings)],
                    ["explain", "folded_fence", "-s", str(settings)]):
        r = cli(*command)
        assert r.exit_code == 1, r.output   # the value is no on/off word
        assert not [c for c in r.output if c != "\n" and unicodedata.category(c) in UNSAFE], command
        assert "Traceback" not in r.output
    js = cli("status", "--json", "-s", str(settings))
    assert json.loads(js.stdout)["ok"] is False


def test_explain_of_an_unknown_hostile_key_is_one_line(cli):
    r = cli("explain", "a\n\x1b[31mb[/]")
    assert r.exit_code == 1 and len(r.output.splitlines()) == 1 and "\x1b" not in r.output
