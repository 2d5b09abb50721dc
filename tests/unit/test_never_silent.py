"""Issue 16 (adversarial review, part b): the promise holds against hostile files, level filters,
interpreter options that skip the bootstrap, and a full non-blocking stderr pipe.

1. autotune_keep / read_sidecar: any content or file kind -> a Sidecar or "unreadable: why";
   a feature's patched function that fails reports ``<feature>.error`` and calls the original.
2. the boot report is emitted whatever the level filter (setting or host-configured structlog).
3. ``dsv41-flags run -- python -I r.py`` (-E, -S, joined) is refused in strict mode, warned else.
4. a full non-blocking stderr pipe: the lost ``flags.resolved`` is counted and reported.
"""
import errno
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from structlog.testing import capture_logs

import dsv41_flags
import dsv41_flags.cache_keeping
import dsv41_flags.fingerprint
from dsv41_flags.cache_keeping import Sidecar, read_sidecar, sidecar_path, write_sidecar
from dsv41_flags.files import read_regular
from dsv41_flags.cache_keeping import payload_problem
from dsv41_flags.launcher import bootstrap_bypass, interpreter_options

CLI = str(Path(sys.executable).with_name("dsv41-flags"))
HEX = "ab" * 32


# ------------------------------------------------------------------ 1: total sidecar reading
HOSTILE_SIDECARS = {
    "argv_int": json.dumps({"fingerprint": "x" * 64, "payload": {"argv": 5}}),
    "argv_int_hex": json.dumps({"fingerprint": HEX, "payload": {"argv": 5, "env": {}, "settings": {}}}),
    "env_list": json.dumps({"fingerprint": HEX, "payload": {"env": [1]}}),
    "env_values": json.dumps({"fingerprint": HEX, "payload": {"argv": [], "env": {"A": 1}, "settings": {}}}),
    "settings_nested": json.dumps({"fingerprint": HEX, "payload": {"argv": [], "env": {},
                                                                    "settings": {"K": {"x": [1]}}}}),
    "deep": "[" * 100000,
    "deep_object": '{"fingerprint": ' + "[" * 100000,
    "not_utf8": b"\xff\xfe{}",
    "top_list": "[1, 2]",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SIDECARS))
def test_read_sidecar_is_total_on_hostile_content(tmp_path, name):
    side = tmp_path / "c.launch"
    data = HOSTILE_SIDECARS[name]
    side.write_bytes(data if isinstance(data, bytes) else data.encode())
    got = read_sidecar(side)
    assert got.payload is None and got.digest == "" and str(side) in got.error and "not a sidecar" in got.error
    assert dsv41_flags.cache_keeping.diff(got.payload or {}, {"argv": [], "env": {}, "settings": {}}) is not None


def test_read_sidecar_never_blocks_never_follows_never_loads_too_much(tmp_path):
    fifo = tmp_path / "fifo.launch"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.launch"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "good.json"
    fp = dsv41_flags.fingerprint.Fingerprint(HEX, {"argv": ["x"], "env": {}, "settings": {"K": [1, "a"]}}, {})
    write_sidecar(sidecar_path(good), fp)
    link = tmp_path / "link.launch"
    link.symlink_to(sidecar_path(good))
    big = tmp_path / "big.launch"
    big.write_bytes(b" " * (dsv41_flags.cache_keeping.SIDECAR_MAX_BYTES + 1))
    start = time.monotonic()
    results = {p.name: read_sidecar(p) for p in (fifo, zero, link, big, tmp_path / "missing.launch", tmp_path)}
    assert time.monotonic() - start < 5
    assert all(r.payload is None and r.error for r in results.values()), results
    assert "symbolic link" in results["link.launch"].error
    assert read_sidecar(sidecar_path(good)) == Sidecar(HEX, fp.payload)


def test_read_regular_refuses_what_is_not_a_small_regular_file(tmp_path):
    """The public reader features use (``_files.read_regular``): never blocks, never follows a
    link it must not, never reads past its cap."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    cases = {"FIFO": (fifo, 10, True), "directory": (tmp_path, 10, True),
             "over the limit": (tmp_path / "x", 4, True), "symbolic link": (tmp_path / "l", 5, False)}
    (tmp_path / "x").write_bytes(b"12345")
    (tmp_path / "l").symlink_to(tmp_path / "x")
    for why, (path, cap, follow) in cases.items():
        with pytest.raises(OSError) as exc:
            read_regular(path, max_bytes=cap, follow_symlinks=follow)
        assert why in str(exc.value) and str(path) in str(exc.value)
    assert read_regular(tmp_path / "l", max_bytes=5) == b"12345"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                           max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(payload=json_values | st.fixed_dictionaries({}, optional={"argv": json_values, "env": json_values,
                                                                  "settings": json_values}),
       digest=st.sampled_from([HEX, "x" * 64, 5, None]))
def test_read_sidecar_accepts_only_valid_payloads_and_diff_never_raises(tmp_path_factory, payload, digest):
    side = tmp_path_factory.mktemp("s") / "c.launch"
    side.write_text(json.dumps({"fingerprint": digest, "payload": payload}))
    got = read_sidecar(side)
    assert isinstance(got, Sidecar)
    if got.payload is not None:
        assert payload_problem(got.payload) is None and got.digest == HEX
        dsv41_flags.cache_keeping.diff(got.payload, {"argv": ["a"], "env": {"B": "1"}, "settings": {"K": 1}})
    else:
        assert got.error
    dsv41_flags.cache_keeping.diff(payload, payload)  # even unvalidated: never raises


# ------------------------------------------------- 1: autotune_keep's boot digest on hostile files
@pytest.fixture
def feature(make_runtime):
    rt = make_runtime(None, env={"DSV41_AUTOTUNE_KEEP": "1"})
    return sys.modules["dsv41_flags_features.autotune_keep"], rt.fingerprint


class _Log:
    def __init__(self):
        self.events = []

    def __getattr__(self, level):
        return lambda event, **kw: self.events.append(event)


@pytest.mark.parametrize("kind", ["cache_deep", "cache_fifo", "cache_dev_zero", "sidecar_fifo",
                                  "sidecar_dev_zero", "sidecar_argv_int", "sidecar_env_list"])
def test_boot_digest_sets_hostile_files_aside_without_raising_or_blocking(feature, tmp_path, kind):
    mod, fp = feature
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    side = sidecar_path(cache)
    if kind == "cache_deep":
        cache.write_text("[" * 100000)
    elif kind == "cache_fifo":
        os.mkfifo(cache)
    elif kind == "cache_dev_zero":
        cache.symlink_to("/dev/zero")
    else:
        cache.write_text('{"_metadata": {}, "k": 1}')
        if kind == "sidecar_fifo":
            os.mkfifo(side)
        elif kind == "sidecar_dev_zero":
            side.symlink_to("/dev/zero")
        else:
            side.write_text(HOSTILE_SIDECARS[kind.split("_", 1)[1]])
    log = _Log()
    start = time.monotonic()
    assert mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: pytest.fail("stock digest called")) == ""
    assert time.monotonic() - start < 5
    assert "autotune_keep.set_aside" in log.events and not os.path.lexists(cache)


def test_unmovable_fifo_cache_is_no_cache_not_a_hang(feature, tmp_path, monkeypatch):
    """A FIFO cache in a directory where it cannot be moved: the stock digest would read it
    forever; it is treated as no cache, with an event."""
    mod, fp = feature
    cache = tmp_path / "rank_tp0_pp0_dp0.json"
    os.mkfifo(cache)
    monkeypatch.setattr(os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, "ro")))
    log = _Log()
    assert mod.boot_digest(cache, {}, fp, 3, log, lambda p, e: pytest.fail("stock digest called")) == ""
    assert "autotune_keep.unreadable" in log.events


# ------------------------------------------------------ 1: the guard every feature can use
GUARDED = """
from dsv41_flags import Feature
def install(module, ctx):
    def make(original):
        def step(self, x):
            if x == "bad":
                raise TypeError("malformed input")
            if x == "engine":
                return original(self, x)
            return "patched"
        return step
    ctx.patch(module.Engine, "step", make, guard=True)
    module.helper = ctx.guard(lambda x: 1 / x, lambda x: "fallback", step="helper")
FEATURE = Feature(name="guarded_demo", target=TARGET, install=install, summary="demo", engine="",
                  requires=("Engine.step",))
"""


def test_guarded_patch_reports_and_falls_back_to_the_original(make_runtime, tmp_path, monkeypatch):
    target = f"guard_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text(
        "calls = []\nclass Engine:\n    def step(self, x):\n        calls.append(x)\n"
        "        if x == 'engine':\n            raise ValueError('engine says no')\n        return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "guarded_demo.py").write_text(GUARDED.replace("TARGET", repr(target)))
    rt = make_runtime("[default]\nguarded_demo = true\n", features_dir=feats)
    rt.arm()
    mod = __import__(target)
    assert {s.name: s.state for s in rt.states()}["guarded_demo"] == "installed"
    eng = mod.Engine()
    with capture_logs() as logs:
        assert eng.step("ok") == "patched"
        assert eng.step("bad") == "stock"                 # the original, as without the feature
        with pytest.raises(ValueError, match="engine says no"):
            eng.step("engine")                            # the engine's own error: unchanged, once
        assert mod.helper(0) == "fallback" and mod.helper(2) == 0.5
    assert mod.calls == ["bad", "engine"]
    errors = [e for e in logs if e["event"] == "guarded_demo.error"]
    assert [e["step"] for e in errors] == ["step", "helper"]
    assert errors[0]["cause"] == "TypeError: malformed input" and "original" in errors[0]["action"]
    assert errors[1]["cause"].startswith("ZeroDivisionError")


# --------------------------------------------------------- 2, 3, 4: processes under `run`
@pytest.fixture
def launch(tmp_path):
    target = f"demo_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("class Worker:\n    def forward(self):\n        return 'stock'\n")
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "demo_cap.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature
        def install(module, ctx):
            ctx.log.info("demo_cap.own_info")
            ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched"))
        FEATURE = Feature(name="demo_cap", target={target!r}, install=install, summary="demo",
                          requires=("Worker.forward",), engine="")
    """))
    settings_file = tmp_path / "settings.toml"
    settings_file.write_text(f'[default]\ndemo_cap = true\nfeatures_dir = "{feats}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(settings_file), PYTHONPATH=str(tmp_path), DSV41_LOG_FORMAT="json")
    (tmp_path / "r.py").write_text(f"import {target}\nprint({target}.Worker().forward())\n")
    return type("Launch", (), {"dir": tmp_path, "target": target, "env": env, "settings": settings_file})


def _run(argv, env, cwd, **kw):
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kw)


def _events(stderr):
    out = []
    for line in stderr.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return [e.get("event") for e in out if isinstance(e, dict)]


@pytest.mark.parametrize("how", ["env_warning", "settings_error", "host_structlog_warning"])
def test_report_is_emitted_whatever_the_level_filter(launch, how):
    env = dict(launch.env)
    if how == "env_warning":
        env["DSV41_LOG_LEVEL"] = "warning"
    elif how == "settings_error":
        launch.settings.write_text(launch.settings.read_text() + 'log_level = "error"\n')
    else:  # a host that configured structlog at WARNING first, in its own sitecustomize
        site = launch.dir / "usersite"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import logging, structlog\n"
            "structlog.configure(processors=[structlog.processors.add_log_level,"
            " structlog.processors.JSONRenderer()],"
            " wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),"
            " logger_factory=structlog.PrintLoggerFactory(__import__('sys').stderr))\n")
        env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    proc = _run([CLI, "run", "--", sys.executable, "r.py"], env, launch.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "patched"
    events = _events(proc.stderr)
    assert "flags.resolved" in events and "feature.installed" in events, proc.stderr
    assert "demo_cap.own_info" not in events  # the feature's own info line: filtered as asked


# ------------------------------------------------------------------ 3: interpreter options
@pytest.mark.parametrize("opts", [["-I"], ["-E"], ["-S"], ["-Es"], ["-IS"], ["-sE"], ["-b", "-E"],
                                  ["-X", "dev", "-S"]])
def test_run_refuses_interpreter_options_that_skip_the_bootstrap(launch, opts):
    proc = _run([CLI, "run", "--", sys.executable, *opts, "r.py"], launch.env, launch.dir)
    assert proc.returncode == 1, proc.stderr
    letter = next(o for o in "IES" if any(o in x for x in opts if x.startswith("-") and x != "dev"))
    assert f"option -{letter}" in proc.stderr and "strict" in proc.stderr
    assert proc.stdout == ""  # not started


def test_run_warns_in_non_strict_mode_and_keeps_harmless_options(launch):
    (launch.dir / "plain.py").write_text("import sys\nprint('ran', 'dsv41_flags' in sys.modules)\n")
    proc = _run([CLI, "run", "--", sys.executable, "-I", "plain.py"], {**launch.env, "DSV41_STRICT": "false"},
                launch.dir)
    assert proc.returncode == 0 and "warning" in proc.stderr and "-I" in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["ran", "False"]  # started, unpatched as the warning said
    for opts in (["-s"], ["-WE"], ["-u", "-B"]):
        proc = _run([CLI, "run", "--", sys.executable, *opts, "r.py"],
                    {**launch.env, "PYTHONNOUSERSITE": "1"}, launch.dir)
        assert proc.returncode == 0, (opts, proc.stderr)
        assert proc.stdout.strip() == "patched", opts


def test_interpreter_options_are_read_as_cpython_reads_them(tmp_path):
    assert interpreter_options(["python3.11", "-Es", "-X", "dev", "r.py", "-S"]) == ["E", "s", "X"]
    assert interpreter_options(["python", "-c", "x", "-E"]) == ["c"]
    assert interpreter_options(["python", "-WE", "r.py"]) == ["W"]
    assert interpreter_options(["sglang", "-E"]) is None
    assert bootstrap_bypass(["python", "-m", "sglang.launch_server", "-E"], {}) is None
    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env python3 -I\nprint(1)\n")
    script.chmod(0o755)
    assert "-I" in bootstrap_bypass([str(script)], {})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert bootstrap_bypass([str(fifo)], {}) is None  # never blocks on what is not a file


# ------------------------------------------------------------- 4: a full non-blocking pipe
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


def test_full_nonblocking_stderr_pipe_loss_is_counted_and_reported(launch):
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    filled = 0
    try:
        while True:
            filled += os.write(w, b"x" * 65536)
    except BlockingIOError:
        pass
    env = {**launch.env, "DSV41_DEMO_CAP": "false"}
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, cwd=launch.dir, stdin=subprocess.PIPE,
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
