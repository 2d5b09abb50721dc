"""What keeps ``dsv41-flags status`` fast (issue 11, bench row 1d), each with the behaviour it must
keep: plain parameters coerced without pydantic exactly as typer coerces them; the static drift
check kept in the cache and never stale, never in the way (corrupt, read-only, full, foreign);
the engine version looked up once."""
import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import typer.main
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from dsv41_flags import Feature
from dsv41_flags.cli import _PlainValues, _plain_kind, app
from dsv41_flags.drift import _installed_version, engine_version
from dsv41_flags.upgrade_gate.static_check import check_feature

from ..conftest import REPO_SETTINGS


# ------------------------------------------------------------------ typer without pydantic
def _plain_params():
    group = typer.main.get_command(app)
    out = []
    for cmd in [group] + list(group.commands.values()):
        ctx = cmd.context_class(cmd, info_name=cmd.name)
        for param in cmd.get_params(ctx):
            if _plain_kind(param):
                out.append((cmd, ctx, param))
    return out


PLAIN = _plain_params()


def test_every_plain_parameter_has_the_pydantic_free_coercion():
    kinds = {(cmd.name, p.name): _plain_kind(p) for cmd, _, p in PLAIN}
    assert kinds[("status", "settings")] == "path-list" and kinds[("status", "profile")] == "str"
    assert kinds[("fingerprint", "write")] == "path" and kinds[("check", "engine")] == "str-list"
    assert kinds[("status", "help")] == "bool"
    assert all(isinstance(p._runtime_param, _PlainValues) for _, _, p in PLAIN)


def _outcome(runtime, value, param, ctx):
    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return ("error", exc.format_message())
    except Exception as exc:  # noqa: BLE001 - typer's own failure (a NUL byte): the same one
        return ("raised", type(exc).__name__, str(exc))
    return (type(got).__name__, [type(x).__name__ for x in got] if isinstance(got, list) else None,
            got)


EDGE = ["", "x", "-", ".", "~/x", "a//b/", " spaced ", "ü", "\udcff", "\x00", "settings.toml",
        "/etc/passwd", "/nonexistent/dir/file"]


@pytest.mark.parametrize("value", EDGE + [None, True, False, b"bytes", ("a", "b"), ()])
def test_plain_coercion_is_typers_for_edge_values(value):
    for cmd, ctx, param in PLAIN:
        mine = _outcome(param._runtime_param, value, param, ctx)
        typers = _outcome(build_runtime_param(param.type_descriptor), value, param, ctx)
        assert mine == typers, (cmd.name, param.name, value)


@hsettings(max_examples=40, deadline=None)
@given(st.one_of(st.text(), st.lists(st.text(), max_size=3).map(tuple)))
def test_plain_coercion_is_typers_for_any_text(value):
    for cmd, ctx, param in PLAIN:
        assert _outcome(param._runtime_param, value, param, ctx) == \
            _outcome(build_runtime_param(param.type_descriptor), value, param, ctx)


PROBE = """
import json, sys
from dsv41_flags.cli import app
try:
    app(["status", "--json", "-s", sys.argv[1]])
except SystemExit:
    pass
mods = [m for m in sys.modules if m.split(".")[0] in ("pydantic", "dsv41_flags", "sglang", "torch")]
sys.stderr.write("MODULES " + json.dumps(sorted(mods)) + "\\n")
"""






# ------------------------------------------------------------------ the static check's cache
































# ------------------------------------------------------------------ the engine version
def test_engine_version_is_looked_up_once_per_name_and_path(monkeypatch):
    import importlib.metadata

    calls = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: calls.append(n) or real(n))
    _installed_version.cache_clear()
    f = Feature(name="pk", target="json", install=lambda m, c: None, summary="s",
                engine="packaging>=1")
    first = engine_version(f)
    assert first == real("packaging") and engine_version(f) == first and calls == ["packaging"]
    monkeypatch.syspath_prepend("/nonexistent-dsv41-path")   # another import path: asked again
    assert engine_version(f) == first and calls == ["packaging", "packaging"]
    _installed_version.cache_clear()
