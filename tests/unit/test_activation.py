"""``activate()`` (``activation.py``) and the error policy (``error_policy.py``) of every entry (the
plugin, the bootstrap, a direct call: a ``flags.error`` event, exit status 3 in strict mode, a
fallback said otherwise), once per process (threads, fork, retry, a fork or an interrupt during
activation), the plugin policy any engine adapter gets from the core, roles and ranks read before
the first event, the audit, and a child from the snapshot importing only what it uses.

Tests that need a whole process (activate, fork, threads, the plugin and bootstrap entries) run
it as a fresh interpreter, so the test process's own environment and runtime stay untouched."""
from __future__ import annotations

import json
import os
import sys

import pytest

from dsv41_flags.launcher import BOOTSTRAP_DIR
from dsv41_flags.assembly import build

from ..conftest import REPO_SETTINGS
from ._child import FEATURE, REPO, clean_env, event_names, events, run_cmd, run_code, run_py


# ------------------------------------------------------------------ error policy, every entry
def test_malformed_snapshot_under_the_plugin_entry_stops_with_an_event(project):
    proc = run_py(project, """
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """, DSV41_SNAPSHOT='{"v":1}')
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["entry"] == "sglang-plugin" and err["strict"] is True and "schema version" in err["cause"]
    assert err["pid"] > 0 and err["role"] and "Traceback" not in proc.stderr


def test_malformed_snapshot_under_the_bootstrap_never_runs_unpatched(project):
    code = "print('RAN')"
    proc = run_py(project, code, DSV41_SNAPSHOT='{"v":1}', PYTHONPATH=f"{BOOTSTRAP_DIR}{os.pathsep}{project.dir}")
    assert proc.returncode == 3 and "RAN" not in proc.stdout
    assert "Error in sitecustomize" not in proc.stderr and "Traceback" not in proc.stderr
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["entry"] == "bootstrap" and "DSV41_SNAPSHOT refused" in err["cause"]
    # non-strict: resolved here, runs, says so
    relaxed = project.dir / "relaxed.toml"
    relaxed.write_text("[default]\nstrict = false\ndemo_patch = true\n")
    proc = run_py(project, f"import {project.target} as m, dsv41_flags; print(m.Worker().forward(), "
                        f"dsv41_flags.current_runtime().from_snapshot)",
                  DSV41_SNAPSHOT='{"v":1}', DSV41_SETTINGS=str(relaxed),
                  PYTHONPATH=f"{BOOTSTRAP_DIR}{os.pathsep}{project.dir}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["patched", "n=4", "False"]
    assert [e["event"] for e in events(proc.stderr)][:2] == ["flags.resolved", "snapshot.refused"]


#: the plugin entry in a process whose resolution raises a ZeroDivisionError (an internal error)
BROKEN_RESOLUTION = """
import dsv41_flags.assembly as r
def broken(*a, **k):
    raise ZeroDivisionError("internal")
r.resolve_launch = broken
import dsv41_flags_plugin as _plugin
_plugin.load()
print("BOOTED")
"""


def test_any_exception_while_activating_is_a_flags_error_and_exit_3(project):
    # an install that raises something that is not a FlagsError, target already imported
    (project.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(project.target)).replace(
        'n = ctx.options["n"]', 'raise MemoryError("boom")'))
    proc = run_py(project, f"""
        import {project.target}
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert "MemoryError: boom" in err["cause"]
    assert {s["name"]: s["state"] for s in err["states"]}["demo_patch"] == "failed"
    # a non-FlagsError raised by the framework's own code path (an unreadable features dir entry)
    proc = run_py(project, BROKEN_RESOLUTION)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["internal"] is True and "ZeroDivisionError: internal" in err["cause"]
    # non-strict: the process runs, the event says nothing is applied
    proc = run_py(project, BROKEN_RESOLUTION, DSV41_STRICT="0")
    assert proc.returncode == 0 and "BOOTED" in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["strict"] is False and "no feature is applied" in err["outcome"]


def test_settings_error_under_the_plugin_is_a_structured_event(project):
    proc = run_py(project, "import dsv41_flags_plugin as plugin\nplugin.load()\nprint('BOOTED')\n",
                  DSV41_DEMO_PATCH="maybe")
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["error_type"] == "SettingsError" and "DSV41_DEMO_PATCH='maybe'" in err["cause"]
    assert err["entry"] == "sglang-plugin" and err["pid"] and err["level"] == "error"


# ------------------------------------------------------------------ once per process, truly
def test_two_threads_activate_once(project):
    proc = run_py(project, f"""
        import threading, dsv41_flags, {project.target} as m
        barrier = threading.Barrier(8)
        got = []
        def go():
            barrier.wait()
            got.append(dsv41_flags.activate())
        ts = [threading.Thread(target=go) for _ in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(len({{id(r) for r in got}}), m.Worker().forward())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "patched", "n=5"]
    names = [e["event"] for e in events(proc.stderr)]
    assert names.count("flags.resolved") == 1 and names.count("feature.installed") == 1


def test_forked_child_owns_its_runtime(project):
    proc = run_py(project, f"""
        import os, json, dsv41_flags
        rt = dsv41_flags.activate()                       # armed, target not imported yet
        pid = os.fork()
        if pid == 0:
            import {project.target} as m                     # the inherited hook fires here
            again = dsv41_flags.activate()                # as sglang's plugin loader would
            print(json.dumps({{"child": os.getpid(), "same": again is dsv41_flags.current_runtime(),
                              "out": m.Worker().forward(),
                              "state": next(s for s in again.states() if s.name == "demo_patch").state}}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({{"parent_state": next(s for s in rt.states() if s.name == "demo_patch").state}}))
    """)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(l) for l in proc.stdout.splitlines()]
    c = lines[0]
    assert c["same"] and c["out"] == "patched n=5" and c["state"] == "installed"
    assert lines[1]["parent_state"] == "armed"
    ev = events(proc.stderr)
    installed = [e for e in ev if e["event"] == "feature.installed"]
    assert len(installed) == 1 and installed[0]["pid"] == c["child"] and installed[0]["role"] == "child"
    resolved = [(e["pid"], e["role"]) for e in ev if e["event"] == "flags.resolved"]
    assert resolved == [(resolved[0][0], "launcher"), (c["child"], "child")]


def test_failed_activation_raises_again_on_retry(project):
    (project.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(project.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    proc = run_py(project, f"""
        import {project.target}, dsv41_flags
        for attempt in (1, 2):
            try:
                dsv41_flags.activate()
                print("RETURNED", attempt)
            except dsv41_flags.FlagsError as exc:
                print("RAISED", attempt, type(exc).__name__)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["RAISED 1 DriftError", "RAISED 2 ActivationError"]
    assert [e["event"] for e in events(proc.stderr)].count("flags.error") == 2


def test_uninstall_before_import_disarms(project):
    proc = run_py(project, f"""
        import dsv41_flags
        rt = dsv41_flags.activate()
        rt.uninstall()
        import {project.target} as m
        print(m.Worker().forward(), next(s for s in rt.states() if s.name == "demo_patch").state)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stock", "uninstalled"]
    assert "feature.installed" not in [e["event"] for e in events(proc.stderr)]


def test_audit_lost_follows_what_the_engine_would_call(project):
    proc = run_py(project, f"""
        import dsv41_flags, {project.target} as m
        rt = dsv41_flags.activate()
        assert next(s for s in rt.audit() if s.name == "demo_patch").state == "installed"
        class Worker:                       # the class itself replaced in the module
            def forward(self):
                return "other"
        m.Worker = Worker
        st = next(s for s in rt.audit() if s.name == "demo_patch")
        print(st.state, st.detail)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["lost", "Worker.forward"]


# ------------------------------------------------------------------ roles and ranks
def test_plugin_reads_ranks_before_the_first_event(project):
    proc = run_py(project, f"""
        import {project.target}
        import dsv41_flags_plugin as _plugin
        def load_plugins():
            _plugin.load()
        def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank, pipe):
            load_plugins()
        run_scheduler_process(None, None, 0, 1, 0, None, None)
    """)
    assert proc.returncode == 0, proc.stderr
    ev = [e for e in events(proc.stderr) if e["event"] in ("flags.resolved", "feature.installed")]
    assert [e["event"] for e in ev] == ["flags.resolved", "feature.installed"]
    assert all(e["role"] == "scheduler" and e["tp_rank"] == 1 and e["pp_rank"] == 0 for e in ev)


#: a second engine, as the core sees it: hook points that record their calls (``FAIL``: the
#: serving hook raises), activated through the core's plugin policy (``activation.activate_plugin``)
TOY_ENGINE = """
import json, {target}
from dsv41_flags.activation import activate_plugin
from dsv41_flags.engine import EngineAdapter
calls = []
def hook(name, exc=None):
    def call(arg):
        calls.append(name)
        if exc is not None:
            raise exc
        return True
    return call
engine = EngineAdapter(name="toyengine", default_range="", no_world_roles=frozenset({{"frontend"}}),
                       process_context=lambda: {{"role": ROLE, "tp_rank": 1}},
                       on_world_ready=hook("world"), arm_live=hook("live"),
                       on_serving=hook("serving", RuntimeError("no event loop") if FAIL else None))
activate_plugin(engine)
activate_plugin(engine)  # an engine's plugin loader may run twice in one process
print(json.dumps(calls))
print({target}.Worker().forward())
"""


#: each activation: the live transport (the shipped ``folded_fence`` is live), the serving hook,
#: then the rank guard (once: it is registered); the hooks' own idempotence is the adapter's
TWICE = ["live", "serving", "world", "live", "serving"]


@pytest.mark.parametrize("role, fail, strict, expected", [
    ("worker", False, True, TWICE),
    ("frontend", False, True, ["live", "serving", "live", "serving"]),  # no world: no guard
    ("worker", True, True, None),                                       # a hook raises: exit 3
    ("worker", True, False, TWICE),                                     # non-strict: runs on
])
def test_a_second_engine_gets_the_whole_plugin_policy_from_the_core(project, role, fail, strict, expected):
    code = TOY_ENGINE.format(target=project.target).replace("ROLE", repr(role)).replace("FAIL", str(fail))
    proc = run_py(project, code, **({} if strict else {"DSV41_STRICT": "0"}))
    ev = events(proc.stderr)
    resolved = [e for e in ev if e["event"] == "flags.resolved"]
    assert len(resolved) == 1 and resolved[0]["role"] == role and resolved[0]["tp_rank"] == 1
    errors = [e for e in ev if e["event"] == "flags.error"]
    if expected is None:
        assert proc.returncode == 3 and proc.stdout == "" and len(errors) == 1
    else:
        assert proc.returncode == 0, proc.stderr
        calls, forward = proc.stdout.splitlines()
        assert json.loads(calls) == expected and forward == "patched n=5"
        assert len(errors) == (2 if fail else 0)
    for err in errors:
        assert err["entry"] == "toyengine-plugin" and "RuntimeError: no event loop" in err["cause"]
        assert err["role"] == role and err["strict"] is strict


def test_non_strict_falls_back_on_an_unexpected_snapshot_failure(project):
    """Non-strict, any failure of the codec (a SnapshotError, whatever raised it) falls back to
    resolving in this process and says so in ``snapshot.refused``."""
    proc = run_py(project, """
        import dsv41_flags
        rt = dsv41_flags.activate()
        print(rt.from_snapshot, bool(rt.snapshot_refused))
    """, DSV41_SNAPSHOT=f"file:{project.dir}#sha256={'0' * 64}", DSV41_STRICT="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
    refused = [e for e in events(proc.stderr) if e["event"] == "snapshot.refused"]
    assert refused and "is a directory, not a regular file" in refused[0]["reason"]


def test_fork_during_activation_fails_the_child_with_an_event(project):
    """Another thread is activating (its flags.resolved write sleeps 0.4 s) when the process
    forks: the child never gets the half-built runtime as 'armed'; activate() raises
    ActivationError with a flags.error event naming the cause."""
    proc = run_py(project, f"""
        import os, sys, time, json, threading, dsv41_flags
        class Slow:
            def __init__(self, inner): self.inner = inner
            def write(self, text): time.sleep(0.4); return self.inner.write(text)
            def flush(self): return self.inner.flush()
            def __getattr__(self, name): return getattr(self.inner, name)
        sys.stderr = Slow(sys.stderr)
        t = threading.Thread(target=dsv41_flags.activate); t.start()
        time.sleep(0.25)
        pid = os.fork()
        if pid == 0:
            try:
                dsv41_flags.activate(); out = "returned"
            except dsv41_flags.FlagsError as exc:
                out = type(exc).__name__
            import {project.target} as m
            print(json.dumps({{"child": os.getpid(), "out": out, "call": m.Worker().forward()}}),
                  flush=True)
            os._exit(0)
        os.waitpid(pid, 0); t.join()
        import {project.target} as m
        print(json.dumps({{"parent": m.Worker().forward()}}), flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    c, p = [json.loads(line) for line in proc.stdout.splitlines()]
    assert c["out"] == "ActivationError" and c["call"] == "stock"
    assert p["parent"] == "patched n=5"
    errors = [e for e in events(proc.stderr) if e["event"] == "flags.error" and e["pid"] == c["child"]]
    assert errors and "forked while another thread" in errors[0]["cause"]


def test_keyboard_interrupt_during_activation_is_latched_and_reported(project):
    (project.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(project.target)).replace(
        '    n = ctx.options["n"]', '    raise KeyboardInterrupt'))
    proc = run_py(project, f"""
        import {project.target}, dsv41_flags
        for attempt in (1, 2):
            try:
                dsv41_flags.activate(); print("RETURNED", attempt)
            except KeyboardInterrupt:
                print("INTERRUPTED", attempt)
            except dsv41_flags.FlagsError as exc:
                print("RAISED", attempt, type(exc).__name__)
        print(dsv41_flags.current_runtime())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["INTERRUPTED 1", "RAISED 2 ActivationError", "None"]
    errors = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert errors[0]["error_type"] == "KeyboardInterrupt" and errors[0]["outcome"].startswith("interrupted")
    assert len(errors) == 2


def test_direct_activate_failure_says_it_raised_to_the_caller(tmp_path):
    code = ("import dsv41_flags\n"
            "try:\n    dsv41_flags.activate()\n"
            "except Exception as exc:\n    print('caught', type(exc).__name__)\n"
            "print('still running')\n")
    proc = run_cmd([sys.executable, "-c", code], clean_env(DSV41_SETTINGS=str(REPO / "settings.toml"),
                                                 DSV41_FOLDED_FENCE="maybe", DSV41_LOG_FORMAT="json"), tmp_path)
    assert proc.returncode == 0 and "caught SettingsError" in proc.stdout and "still running" in proc.stdout
    (err,) = [json.loads(x) for x in proc.stderr.splitlines()
              if x.startswith("{") and json.loads(x)["event"] == "flags.error"]
    assert err["entry"] == "activate"
    assert err["outcome"].startswith("raised SettingsError to the caller of activate() (strict mode")
    assert "exit status" not in err["outcome"]


#: what a child activating from the snapshot must not import (it uses none of it)
CHILD_MUST_NOT_IMPORT = ("dynaconf", "tomllib", "typer", "click", "dsv41_flags.settings",
                         "dsv41_flags.cli", "dsv41_flags.upgrade_gate.static_check",
                         "dsv41_flags.upgrade_gate", "multiprocessing")


CHILD = """
import json, sys
import dsv41_flags
rt = dsv41_flags.activate()
print(json.dumps({"from_snapshot": rt.from_snapshot, "armed": [f.name for f in rt.armed()],
                  "modules": sorted(sys.modules)}))
"""


def test_child_from_snapshot_imports_only_what_it_uses():
    """A child activating from the launch's snapshot (both features armed) imports no settings
    loader, no TOML parser and no CLI."""
    env = clean_env(DSV41_FOLDED_FENCE="1", DSV41_AUTOTUNE_KEEP="1", DSV41_LOG_FORMAT="json")
    parent = build([REPO / "settings.toml"], None, environ=env, argv=["serve"],
                   features_dir=REPO / "features", use_snapshot=False, configure_logging=False)
    env["DSV41_SNAPSHOT"] = parent.snapshot()
    proc = run_cmd([sys.executable, "-c", CHILD], env, REPO)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["from_snapshot"] and data["armed"] == ["autotune_keep", "folded_fence"]
    present = [m for m in CHILD_MUST_NOT_IMPORT
               if m in data["modules"] or any(x.startswith(m + ".") for x in data["modules"])]
    assert present == []


def test_second_activate_with_other_arguments_warns():
    code = ("import dsv41_flags, json\n"
            "a = dsv41_flags.activate()\n"
            "b = dsv41_flags.activate(profile='tp4')\n"
            "print(a is b, a.resolution.profile)\n")
    proc = run_code(code, clean_env(DSV41_SETTINGS=str(REPO_SETTINGS), DSV41_LOG_FORMAT="json"), None, timeout=60)
    assert proc.stdout.split() == ["True", "default"]
    assert "activate.arguments_ignored" in event_names(proc.stderr)
