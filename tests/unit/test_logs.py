"""The structlog pipeline (``logs.py``): logging never breaks the host (stream current at write
time, errors swallowed and reported once, a full non-blocking pipe's loss counted and reported,
strict JSON whatever a feature logs, a console renderer that cannot raise), and the boot report is
emitted whatever level filter the settings or a host's own structlog or logging set."""
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dsv41_flags.logs import HEALTH

from ._child import CLI, clean_env, event_names, run_cmd, run_code, write_project


def _refuse(constant):
    raise ValueError(f"non-strict JSON constant {constant}")


def strict_loads(line: str):
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` (what strict parsers do)."""
    return json.loads(line, parse_constant=_refuse)


#: ``io_feat``: runs ``{body}`` in its install, then patches ``Engine.step`` to add 1
IO_FEATURE = """
from dsv41_flags import Feature

class Odd:
    def __repr__(self):
        raise RuntimeError("repr refuses")
    __str__ = __repr__

def install(module, ctx):
{body}
    ctx.patch(module.Engine, "step", lambda orig: (lambda self: orig(self) + 1))

FEATURE = Feature(name="io_feat", target="tgt_io", install=install, summary="io test")
"""


def _project(tmp_path: Path, install_body: str, settings: str = "") -> Path:
    """A tmp project: target module ``tgt_io`` (``Engine.step() -> 1``), feature ``io_feat``
    patching it with ``install_body`` run before the patch, settings.toml arming it."""
    write_project(tmp_path, "io_feat", IO_FEATURE.replace("{body}", textwrap.indent(textwrap.dedent(install_body), "    ")),
                  f"[default]\nio_feat = true\nstrict = true\n{settings}", target="tgt_io",
                  target_source="class Engine:\n    def step(self):\n        return 1\n")
    return tmp_path


def _run(tmp_path: Path, code: str, **env) -> subprocess.CompletedProcess:
    return run_code(code, clean_env(**{**env, "PYTHONPATH": str(tmp_path)}), tmp_path)


def test_closed_stderr_buffer_never_breaks_the_import_and_the_loss_is_reported(tmp_path):
    """Sys.stderr replaced by a buffer, activate(), the buffer closed, then the import of
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


HOSTILE = """
ctx.log.info("io_feat.values", ratio=float("nan"), big=float("inf"), small=-float("inf"),
             d={(1, 2): "a", None: 1, 3.5: float("nan")}, s={1, 2}, o=Odd(),
             nested=[{"k": (float("nan"),)}])
"""


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_whatever_a_feature_logs_the_install_stands_and_lines_are_strict(tmp_path, log_format):
    """NaN, non-string keys, objects whose str/repr raise: the install is not rolled
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


@pytest.mark.parametrize("how", ["env_warning", "settings_error", "host_structlog_warning"])
def test_report_is_emitted_whatever_the_level_filter(run_program, how):
    env = dict(run_program.env)
    if how == "env_warning":
        env["DSV41_LOG_LEVEL"] = "warning"
    elif how == "settings_error":
        run_program.settings.write_text(run_program.settings.read_text() + 'log_level = "error"\n')
    else:  # a host that configured structlog at WARNING first, in its own sitecustomize
        site = run_program.dir / "usersite"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import logging, structlog\n"
            "structlog.configure(processors=[structlog.processors.add_log_level,"
            " structlog.processors.JSONRenderer()],"
            " wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),"
            " logger_factory=structlog.PrintLoggerFactory(__import__('sys').stderr))\n")
        env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    proc = run_cmd([CLI, "run", "--", sys.executable, "r.py"], env, run_program.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "patched"
    events = event_names(proc.stderr)
    assert "flags.resolved" in events and "feature.installed" in events, proc.stderr
    assert "demo_cap.own_info" not in events  # the feature's own info line: filtered as asked


CHILD = """
import sys, json
import dsv41_flags
from dsv41_flags.logs import HEALTH
rt = dsv41_flags.activate()
print(json.dumps(HEALTH.as_dict()), flush=True)
sys.stdin.readline()                  # the parent drained the pipe
rt.log.info("after.drain")
print(json.dumps(HEALTH.as_dict()), flush=True)
"""


@pytest.mark.parametrize("unbuffered", ["", "1"])   # -u: sys.stderr.buffer is the FileIO itself
def test_full_nonblocking_stderr_pipe_loss_is_counted_and_reported(run_program, unbuffered):
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    filled = 0
    try:
        while True:
            filled += os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    env = {**run_program.env, "DSV41_DEMO_CAP": "false", "PYTHONUNBUFFERED": unbuffered}
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=run_program.dir, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=w, text=True)
    os.close(w)
    try:
        first = json.loads(child.stdout.readline())
        took = time.monotonic() - start
        drained = b""
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)
        try:
            while True:
                chunk = os.read(r, 1 << 20)
                if not chunk:
                    break
                drained += chunk
        except BlockingIOError:
            pass
        child.stdin.write("go\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
        child.wait(timeout=60)
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        rest = b""
        while True:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            rest += chunk
    finally:
        os.close(r)
        child.kill()
    assert b"flags.resolved" not in drained and len(drained) >= filled  # it was really full
    assert first["errors"] >= 1 and "not written" in first["last_error"], first
    assert took < 60
    lines = [json.loads(x) for x in rest.decode().splitlines() if x.startswith("{")]
    reported = [e for e in lines if e["event"] == "log.errors"]
    assert reported and reported[0]["errors"] >= 1, rest
    assert "after.drain" in [e["event"] for e in lines]
    assert second["errors"] == first["errors"]  # reported once, nothing more lost


STDLIB_HOST = """
import logging, structlog, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(levelname)s %(message)s")
structlog.configure(processors=[structlog.stdlib.filter_by_level, structlog.processors.JSONRenderer()],
                    logger_factory=structlog.stdlib.LoggerFactory(), wrapper_class=structlog.stdlib.BoundLogger)
from dsv41_flags.logs import get_logger
get_logger().info("flags.resolved", armed=[])
get_logger(report=False).info("feature.own_info")
get_logger(report=False).warning("feature.own_warning")
"""


def test_report_passes_a_host_stdlib_logging_setup_at_warning():
    """A host routing structlog into ``logging`` at WARNING (filter_by_level, stdlib logger level):
    the report still reaches the host's handlers; the features' own info lines do not."""
    proc = subprocess.run([sys.executable, "-c", STDLIB_HOST], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["INFO", "WARNING"], lines
    assert "flags.resolved" in lines[0] and "feature.own_warning" in lines[1]
