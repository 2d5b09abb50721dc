"""Children and forks never run silently unpatched: a fork after a pending install, logging before
any feature code in a child of a launch, a child that did not receive the launch's snapshot, no
framework import once a process runs (a fork then cannot inherit a held import lock), and which
processes the ``dsv41-flags run`` bootstrap activates (``children``)."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from ._child import clean_env, events, run_code, write_project

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")

FEATURE = """
import structlog
from dsv41_flags import Feature
structlog.get_logger().info("feature.module_imported")  # logs while its module is imported
def install(module, ctx):
    ctx.patch(module, "f", lambda orig: (lambda: "patched"))
FEATURE = Feature(name="demo_fix", target={target!r}, install=install, summary="demo", engine="",
                  live={live})
"""


def _project(tmp_path, *, target="demo_target", body="def f():\n    return 'stock'\n",
             strict=True, live=False, log_format="json"):
    """A settings file arming ``demo_fix`` on ``target``; returns the environment for a process."""
    project = write_project(tmp_path, "demo_fix", FEATURE.format(target=target, live=live),
                            f'[default]\ndemo_fix = true\nstrict = {str(strict).lower()}\n'
                            f'features_dir = "FEATURES_DIR"\nlog_format = "{log_format}"\n',
                            target=target, target_source=body)
    env = clean_env()
    path = os.pathsep.join([str(tmp_path)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(DSV41_SETTINGS=str(project.settings), PYTHONPATH=path,
               HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    return env


# ------------------------------------------------------------ a fork after a pending install
PENDING_THEN_FORK = """
import multiprocessing, os, sys, threading, time
import dsv41_flags
importer = threading.Thread(target=lambda: __import__("slow_target"))
importer.start()
while "slow_target" not in sys.modules:  # its body is running (it sleeps)
    time.sleep(0.001)
rt = dsv41_flags.activate()
assert {s.name: s for s in rt.states()}["demo_fix"].state == "pending", rt.states()
importer.join()

def child():
    import slow_target
    st = {s.name: s for s in rt.states()}["demo_fix"]
    os._exit(0 if slow_target.f() == "patched" and st.state == "installed" else 7)

if sys.argv[1] == "os.fork":
    pid = os.fork()
    if pid == 0:
        child()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
else:
    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    code = proc.exitcode
print("child", code)
"""


@pytest.mark.parametrize("how", ["os.fork", "multiprocessing fork"])
def test_a_fork_after_a_pending_install_gives_the_child_the_patch(tmp_path, how):
    env = _project(tmp_path, target="slow_target",
                   body="import time\ntime.sleep(3)\ndef f():\n    return 'stock'\n")
    proc = subprocess.run([sys.executable, "-c", PENDING_THEN_FORK, how], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "child 0", (proc.stdout, proc.stderr)
    assert "feature.installed" in [e.get("event") for e in events(proc.stderr)]


# ------------------------------------------- logging holds from the first line of a launch child
@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_child_of_a_launch_logs_in_its_format_from_the_first_line(tmp_path, log_format):
    env = _project(tmp_path, log_format=log_format)
    parent = run_code("""
        import os, dsv41_flags
        rt = dsv41_flags.activate()
        print(os.environ["DSV41_SNAPSHOT"])
    """, env, tmp_path)
    assert parent.returncode == 0, parent.stderr
    env["DSV41_SNAPSHOT"] = parent.stdout.strip()
    child = run_code("import dsv41_flags\ndsv41_flags.activate()\n", env, tmp_path)
    assert child.returncode == 0, child.stderr
    first = re.sub(r"\x1b\[[0-9;]*m", "", child.stderr.splitlines()[0])  # console colours
    assert "feature.module_imported" in first, child.stderr
    if log_format == "json":
        line = json.loads(first)
        assert line["role"] == "child" and line["pid"] > 0 and line["process"], line
    else:
        assert "role=child" in first and "pid=" in first and "process=" in first, first


# ------------------------------------------------ a child of a launch without the launch's snapshot
MISSING_SNAPSHOT = """
import dsv41_flags.activation as a
rt = a.activate_entry("bootstrap")
import demo_target
print(demo_target.f())
"""


@pytest.mark.parametrize("strict", [True, False])
def test_a_child_of_a_launch_without_the_snapshot_says_so(tmp_path, strict):
    env = _project(tmp_path, strict=strict)
    parent = run_code("""
        import os, dsv41_flags
        dsv41_flags.activate()
        print(os.environ["DSV41_LAUNCH"])
    """, env, tmp_path)
    assert parent.returncode == 0, parent.stderr
    marker = parent.stdout.strip()
    assert marker.split(":")[0].isdigit() and len(marker.split(":")[1]) == 64
    # the child lost DSV41_SNAPSHOT on the way, kept the launch marker; its cwd has other settings
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "settings.toml").write_text(f"[default]\ndemo_fix = false\nstrict = {str(strict).lower()}\n"
                                         f'features_dir = "{tmp_path / "features"}"\n')
    env.pop("DSV41_SETTINGS")
    env.update(DSV41_LAUNCH=marker, DSV41_LOG_FORMAT="json")
    child = run_code(MISSING_SNAPSHOT, env, other)
    found = events(child.stderr)
    if strict:
        assert child.returncode == 3 and child.stdout == "", child.stderr
        error = next(e for e in found if e.get("event") == "flags.error")
        assert "DSV41_SNAPSHOT is missing" in error["cause"] and "DSV41_LAUNCH" in error["cause"]
    else:
        assert child.returncode == 0, child.stderr
        refused = next(e for e in found if e.get("event") == "snapshot.refused")
        assert "DSV41_SNAPSHOT is missing" in refused["reason"]
        assert "fingerprint" in refused["reason"]  # another fingerprint than the launch's


def test_a_launch_marker_with_its_snapshot_is_a_plain_child(tmp_path):
    env = _project(tmp_path)
    parent = run_code("""
        import os, dsv41_flags
        dsv41_flags.activate()
        print(os.environ["DSV41_SNAPSHOT"]); print(os.environ["DSV41_LAUNCH"])
    """, env, tmp_path)
    snapshot, marker = parent.stdout.strip().splitlines()
    env.update(DSV41_SNAPSHOT=snapshot, DSV41_LAUNCH=marker)
    child = run_code(MISSING_SNAPSHOT, env, tmp_path)
    assert child.returncode == 0 and child.stdout.strip() == "patched", child.stderr
    names = [e.get("event") for e in events(child.stderr)]
    assert "snapshot.refused" not in names and "snapshot.mismatch" not in names, child.stderr


# ------------------------------------------------- no framework import once the process runs
NO_LATE_IMPORT = """
import os, signal, sys
import dsv41_flags
rt = dsv41_flags.activate()
import demo_target
rt.switch("demo_fix", False, requested_by="test")
rt.switch("demo_fix", True, requested_by="test")
loaded = {m for m in sys.modules if m.startswith("dsv41_flags")}

def work():
    rt.audit(); rt.states(); rt.report(); rt.recorded_states()
    rt.switch("demo_fix", False, requested_by="test")
    rt.check_switch("demo_fix", True)
    try:
        rt.switch("no_such", True, requested_by="test")
    except Exception:
        pass
    import demo_other  # a second target: its feature installs here
    rt.uninstall("demo_fix")

pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang is killed (SIGALRM) and shows as status -14
    work()
    late = {m for m in sys.modules if m.startswith("dsv41_flags")} - loaded
    os._exit(0 if not late else 9)
_, status = os.waitpid(pid, 0)
work()
late = {m for m in sys.modules if m.startswith("dsv41_flags")} - loaded
print(os.waitstatus_to_exitcode(status), sorted(late))
"""


def test_after_activation_no_framework_module_is_imported_and_a_fork_does_not_hang(tmp_path):
    env = _project(tmp_path, live=True)
    (tmp_path / "demo_other.py").write_text("def g():\n    return 1\n")
    (tmp_path / "features" / "other_fix.py").write_text(textwrap.dedent("""
        from dsv41_flags import Feature
        def install(module, ctx):
            ctx.patch(module, "g", lambda orig: (lambda: 2))
        FEATURE = Feature(name="other_fix", target="demo_other", install=install, summary="s",
                          engine="")
    """))
    with open(tmp_path / "settings.toml", "a") as fh:
        fh.write("other_fix = true\n")
    proc = run_code(NO_LATE_IMPORT, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 []", (proc.stdout, proc.stderr)


def test_bootstrap_leaves_helpers_alone_and_defers_sglang_spawn_children():
    import dsv41_flags.children as _children
    import dsv41_flags.engines.sglang.processes as _sglang

    assert _children.is_multiprocessing_helper(
        ["python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(3)"])
    assert _children.is_spawn_child(
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4, "
         "pipe_handle=6)", "--multiprocessing-fork"])
    assert not _children.is_spawn_child(["python", "-m", "sglang.launch_server"])

    def run_scheduler_process():
        pass

    run_scheduler_process.__module__ = "sglang.srt.managers.scheduler"
    assert _sglang.plugin_will_activate(run_scheduler_process) == _sglang.plugin_installed()
    assert not _sglang.plugin_will_activate(run_scheduler_process, {"SGLANG_PLUGINS": "other"})
    assert not _sglang.plugin_will_activate(print)
