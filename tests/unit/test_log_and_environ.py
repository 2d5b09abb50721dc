"""Issue 13, inputs 9, 10, 11: logging never breaks the host (stream current at write time,
errors swallowed and reported once, strict JSON whatever a feature logs, a console renderer that
cannot raise) and settings loading that never touches ``os.environ``."""
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from structlog.testing import capture_logs

from dsv41_flags.logs import HEALTH, strict_dumps
from dsv41_flags.runtime import build

REPO = Path(__file__).resolve().parents[2]


def _refuse(constant):
    raise ValueError(f"non-strict JSON constant {constant}")


def strict_loads(line: str):
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` (what strict parsers do)."""
    return json.loads(line, parse_constant=_refuse)


def _project(tmp_path: Path, install_body: str, settings: str = "") -> Path:
    """A tmp project: target module ``tgt_io`` (``Engine.step() -> 1``), feature ``io_feat``
    patching it with ``install_body`` run before the patch, settings.toml arming it."""
    (tmp_path / "tgt_io.py").write_text("class Engine:\n    def step(self):\n        return 1\n")
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "io_feat.py").write_text(textwrap.dedent("""
        from dsv41_flags import Feature

        class Odd:
            def __repr__(self):
                raise RuntimeError("repr refuses")
            __str__ = __repr__

        def install(module, ctx):
        {body}
            ctx.patch(module.Engine, "step", lambda orig: (lambda self: orig(self) + 1))

        FEATURE = Feature(name="io_feat", target="tgt_io", install=install, summary="io test")
    """).replace("{body}", textwrap.indent(textwrap.dedent(install_body), "    ")))
    (tmp_path / "settings.toml").write_text(f"[default]\nio_feat = true\nstrict = true\n{settings}")
    return tmp_path


def _run(tmp_path: Path, code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    full.update(env, PYTHONPATH=str(tmp_path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------------------------- input 9
def test_closed_stderr_buffer_never_breaks_the_import_and_the_loss_is_reported(tmp_path):
    """Input 9: sys.stderr replaced by a buffer, activate(), the buffer closed, then the import of
    the target: the import succeeds and the feature is installed; the lost lines are counted and
    reported once on the next stream that can be written."""
    proj = _project(tmp_path, 'ctx.log.info("io_feat.ready", note="installing")\n')
    proc = _run(proj, """
        import io, json, sys
        real = sys.stderr
        buf = io.StringIO()
        sys.stderr = buf
        import dsv41_flags
        rt = dsv41_flags.activate(["settings.toml"])
        early = buf.getvalue()
        buf.close()                      # the host closes the stream it installed
        import tgt_io                    # the hook fires: install + events to a closed stream
        state = {s.name: s.state for s in rt.states()}
        after = io.StringIO()
        sys.stderr = after               # a writable stream again (looked up at write time)
        rt.log.info("host.next")
        sys.stderr = real
        print(json.dumps({"step": tgt_io.Engine().step(), "state": state, "early": early,
                          "after": after.getvalue(), "report": rt.report().get("log_errors")}))
    """, DSV41_LOG_FORMAT="json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["step"] == 2 and out["state"]["io_feat"] == "installed"
    assert any(strict_loads(l)["event"] == "flags.resolved" for l in out["early"].splitlines())
    after = [strict_loads(l) for l in out["after"].splitlines()]
    assert [e["event"] for e in after] == ["host.next", "log.errors"]
    dropped = after[1]
    # feature.installed and io_feat.ready were lost, once each; reported exactly once
    assert dropped["errors"] == 2 and "closed file" in dropped["last_error"]
    assert dropped["role"] == "launcher" and dropped["pid"] > 0
    assert out["report"]["errors"] == 2


def test_events_follow_sys_stderr_replaced_after_configure(tmp_path):
    """The stream is looked up at write time, not bound when structlog is configured."""
    proj = _project(tmp_path, "")
    proc = _run(proj, """
        import io, sys, json
        import dsv41_flags
        rt = dsv41_flags.activate(["settings.toml"])
        sys.stderr, real = io.StringIO(), sys.stderr
        buf = sys.stderr
        import tgt_io
        sys.stderr = None                # no stream at all: the line is lost, nothing raises
        rt.log.info("lost.line")
        sys.stderr = real
        print(buf.getvalue())
    """, DSV41_LOG_FORMAT="json")
    assert proc.returncode == 0, proc.stderr
    events = [strict_loads(l)["event"] for l in proc.stdout.splitlines() if l.strip()]
    assert events == ["feature.installed"]
    assert "flags.resolved" in proc.stderr and "feature.installed" not in proc.stderr


# --------------------------------------------------------------------------------- input 10
HOSTILE = """
ctx.log.info("io_feat.values", ratio=float("nan"), big=float("inf"), small=-float("inf"),
             d={(1, 2): "a", None: 1, 3.5: float("nan")}, s={1, 2}, o=Odd(),
             nested=[{"k": (float("nan"),)}])
"""


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_whatever_a_feature_logs_the_install_stands_and_lines_are_strict(tmp_path, log_format):
    """Input 10: NaN, non-string keys, objects whose str/repr raise: the install is not rolled
    back, strict mode does not stop the boot, every JSON line parses strictly, and the console
    renderer does not raise either."""
    proj = _project(tmp_path, HOSTILE)
    proc = _run(proj, """
        import dsv41_flags
        rt = dsv41_flags.activate(["settings.toml"])
        import tgt_io
        print(tgt_io.Engine().step(), next(s for s in rt.states() if s.name == "io_feat").state)
    """, DSV41_LOG_FORMAT=log_format)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "installed"]
    assert "io_feat.values" in proc.stderr and "feature.installed" in proc.stderr
    assert "feature.failed" not in proc.stderr and "Traceback" not in proc.stderr
    if log_format == "console":  # the renderer raised on Odd: the line is strict JSON instead
        fallback = [strict_loads(l) for l in proc.stderr.splitlines() if l.startswith("{")]
        assert [e["event"] for e in fallback] == ["io_feat.values"]
        assert fallback[0]["render_error"] == "RuntimeError: repr refuses"
        assert "log.errors" in proc.stderr
    if log_format == "json":
        lines = [strict_loads(l) for l in proc.stderr.splitlines()]
        values = next(e for e in lines if e["event"] == "io_feat.values")
        assert values["ratio"] == "NaN" and values["big"] == "Infinity" and values["small"] == "-Infinity"
        assert values["d"] == {"(1, 2)": "a", "null": 1, "3.5": "NaN"}
        assert values["s"] == [1, 2] and values["o"] == "<unrepresentable Odd>"
        assert values["nested"] == [{"k": ["NaN"]}]
        assert values["feature"] == "io_feat" and values["role"] == "launcher"


def test_process_fields_come_from_a_processor_seen_by_capture_logs(make_runtime):
    """pid / process / role / ranks are added by the runtime's context processor at emit time
    (no re-binding): ranks added later reach later events; capture_logs sees them."""
    rt = make_runtime("[default]\n")
    rt.context.update(role="scheduler")
    with capture_logs() as logs:
        rt.log.info("one")
        rt.context.update(tp_rank=1)
        rt.log.info("two", pid=-1)       # the event's own field wins
    assert logs[0]["role"] == "scheduler" and "tp_rank" not in logs[0]
    assert logs[1]["tp_rank"] == 1 and logs[1]["pid"] == -1 and logs[0]["pid"] == os.getpid()
    assert logs[0]["process"] == "MainProcess"


def test_a_failing_processor_never_raises_into_the_caller(make_runtime):
    """A processor of the configured chain (the host's, say) that raises: counted, not raised."""
    rt = make_runtime("[default]\n")

    def broken(logger, method, event_dict):
        raise TypeError("host processor bug")

    before = HEALTH.failures
    with capture_logs(processors=[broken]):
        rt.log.info("x")
        rt.log.bind(feature="f").error("y", d={(1, 2): 1})
    assert HEALTH.failures == before + 2 and "host processor bug" in HEALTH.last_error
    with capture_logs() as logs:
        rt.log.info("rate %d", "abc")     # positional formatting that fails: counted, not raised
        rt.log.info("rate %d", 3)
    assert HEALTH.failures == before + 3 and [e["event"] for e in logs][0] == "rate 3"
    HEALTH.reported = HEALTH.failures  # leave no pending report for other tests


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (st.lists(children, max_size=3) | st.tuples(children, children)
                      | st.dictionaries(st.none() | st.integers() | st.floats() | st.text(max_size=3)
                                        | st.tuples(st.integers(), st.floats()), children, max_size=3)),
    max_leaves=12)


@hsettings(max_examples=150, deadline=None)
@given(json_values)
def test_strict_dumps_is_strict_json_for_anything(value):
    text = strict_dumps({"event": "x", "v": value})
    parsed = strict_loads(text)
    assert parsed["event"] == "x"
    if isinstance(value, float) and not math.isfinite(value):
        assert parsed["v"] in ("NaN", "Infinity", "-Infinity")


def test_strict_dumps_survives_cycles_and_deep_nesting():
    a: list = []
    a.append(a)
    deep: list = []
    cur = deep
    for _ in range(200):
        cur.append([])
        cur = cur[0]
    assert strict_loads(strict_dumps({"a": a, "deep": deep}))["a"] == ["<cycle>"]


# --------------------------------------------------------------------------------- input 11
def test_settings_loading_never_touches_os_environ(tmp_path, monkeypatch):
    """Input 11: another thread writes and reads os.environ while settings load with an explicit
    environment and with Dynaconf's own variables present: no variable is lost, os.environ is the
    same object with the same content, and Dynaconf's variables change nothing."""
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nfolded_fence = false\nautotune_keep = true\n[tp4]\nfolded_fence = true\n")
    other = tmp_path / "other.toml"
    other.write_text("[default]\nautotune_keep = false\nfolded_fence = true\n")
    for name, value in {"DYNACONF_FOLDED_FENCE": "1", "SETTINGS_FILE_FOR_DYNACONF": str(other),
                        "INCLUDES_FOR_DYNACONF": str(other), "ENVIRONMENTS_FOR_DYNACONF": "false",
                        "ENV_FOR_DYNACONF": "tp4", "MERGE_ENABLED_FOR_DYNACONF": "false",
                        "DSV41_AUTOTUNE_KEEP": "0"}.items():
        monkeypatch.setenv(name, value)
    environ_object, before = os.environ, dict(os.environ)
    stop, lost, written = threading.Event(), [], []

    def writer():
        i = 0
        while not stop.is_set():
            name = f"T13_IO_{i % 400}"
            os.environ[name] = str(i)
            if os.environ.get(name) != str(i):
                lost.append(name)
            written.append(name)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for i in range(8):
            explicit = build([settings], "tp4" if i % 2 else None,
                             environ={"DSV41_AUTOTUNE_KEEP": "1", "DYNACONF_X": "1",
                                      "ENV_FOR_DYNACONF": "tp4"},
                             features_dir=REPO / "features", use_snapshot=False,
                             configure_logging=False)
            ambient = build([settings], None, features_dir=REPO / "features", use_snapshot=False,
                            configure_logging=False)
    finally:
        stop.set()
        thread.join(10)
    assert written and not lost
    for name in set(written):
        assert name in os.environ
        monkeypatch.delenv(name)
    assert os.environ is environ_object and dict(os.environ) == before
    # Dynaconf's own variables changed nothing; DSV41_* came from the mapping given
    values = explicit.resolution.values
    assert values["FOLDED_FENCE"].value is True and values["FOLDED_FENCE"].source.endswith("[tp4]")
    assert values["AUTOTUNE_KEEP"].value is True
    assert values["AUTOTUNE_KEEP"].source == "env DSV41_AUTOTUNE_KEEP"
    assert [s for s, _ in values["AUTOTUNE_KEEP"].chain] == [
        "declared default", f"{settings} [default]", "env DSV41_AUTOTUNE_KEEP"]
    amb = ambient.resolution.values
    assert amb["FOLDED_FENCE"].value is False and amb["FOLDED_FENCE"].source == f"{settings} [default]"
    assert amb["AUTOTUNE_KEEP"].value is False and amb["AUTOTUNE_KEEP"].chain[-1] == (
        "env DSV41_AUTOTUNE_KEEP", "0")
    assert any("SETTINGS_FILE_FOR_DYNACONF" in n for n in ambient.resolution.notes)


# --------------------------------------------------------------------------------- input 12
def test_guard_mode_is_compared_like_any_key_and_the_strictest_wins(make_runtime):
    """Input 12 (logic; the engine tier runs it on 2 gloo ranks through sglang's own path): the
    mode is part of the view, a disagreement on it is a row of the table, and every rank acts on
    the strictest mode any rank holds."""
    from dsv41_flags.rank_guard import compare, effective_mode, rank_view

    on = make_runtime("[default]\nautotune_keep = true\nrank_guard = \"raise\"\n")
    off = make_runtime("[default]\nautotune_keep = true\nrank_guard = \"off\"\n")
    views = [rank_view(on), rank_view(off)]
    assert [v["rank_guard"] for v in views] == ["raise", "off"]
    assert compare(views) == [("rank_guard", {0: "raise", 1: "off"})]
    assert effective_mode(views) == "raise"
    assert effective_mode([rank_view(off), rank_view(off)]) == "off"
    assert compare([rank_view(off), rank_view(off)]) == []
    warn = make_runtime("[default]\nautotune_keep = false\n", env={"DSV41_RANK_GUARD": "warn"})
    assert effective_mode([rank_view(off), rank_view(warn)]) == "warn"
    assert [k for k, _ in compare([rank_view(on), rank_view(warn)])] == [
        "armed", "rank_guard", "AUTOTUNE_KEEP"]
    # a rank whose activation failed (non-strict, no runtime) still answers: a mismatch, and it
    # defers to the other ranks' mode
    from dsv41_flags.rank_guard import unavailable_view

    views = [rank_view(on), unavailable_view("SettingsError: bad value")]
    assert compare(views)[0] == ("armed", {0: ["autotune_keep"],
                                           1: "<not activated: SettingsError: bad value>"})
    assert effective_mode(views) == "raise"


def test_fingerprint_table_through_a_variable_is_refused_not_ignored(make_runtime):
    """With Dynaconf blind to variables, ``DSV41_FINGERPRINT`` would be silently unread: it is an
    error naming the variable and where to set the table instead."""
    from dsv41_flags import SettingsError

    with pytest.raises(SettingsError, match=r"DSV41_FINGERPRINT.*\[default.fingerprint\]"):
        make_runtime("[default]\n", env={"DSV41_FINGERPRINT": '{volatile = ["X"]}'})


def test_strict_dumps_survives_hostile_containers_and_huge_ints():
    class BadDict(dict):
        def items(self):
            raise RuntimeError("no items")

    class Unsortable:
        def __str__(self):
            raise RuntimeError("no str")
        __repr__ = __str__

    out = strict_loads(strict_dumps({"d": BadDict(a=1), "s": {Unsortable(), 1}, "i": 10 ** 5000,
                                     "k": {frozenset({1}): 2}}))
    assert out["d"] == "{'a': 1}" and out["i"].startswith("<int of ") and out["k"] == {"frozenset({1})": 2}
    assert sorted(map(str, out["s"])) == ["1", "<unrepresentable Unsortable>"]
