"""Post-import hooks (``dsv41_flags.hooks``): a callback runs once its target is imported and
completed, never on a module whose body is still running, and the probe that tells the two apart
never loads a module itself. Through whole processes: a feature whose target another thread is
still importing installs when that import completes, and drift found at a later import (or when
another thread's import completes) stops a strict process with exit status 3 and a
``flags.error`` event, never a traceback."""
from __future__ import annotations

import sys
import threading
import types
import uuid

import pytest

from dsv41_flags.hooks import ImportWait, register_post_import_hook

from ._child import FEATURE, events, run_py


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write importable modules into a fresh directory on sys.path; each gets a unique name. A
    module body can wait on a gate (``gate.wait``) released by the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []
    gate = types.ModuleType(f"gate_{uuid.uuid4().hex[:8]}")
    gate.release = threading.Event()
    gate.entered = threading.Event()
    sys.modules[gate.__name__] = gate

    def make(body: str) -> str:
        name = f"hooked_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(body.replace("GATE", gate.__name__))
        made.append(name)
        return name

    yield types.SimpleNamespace(make=make, gate=gate)
    gate.release.set()
    for name in made + [gate.__name__]:
        sys.modules.pop(name, None)


SLOW = ("import GATE\nfirst = 1\nGATE.entered.set()\n"
        "assert GATE.release.wait(10)\nlast = 2\n")


def test_a_completed_module_runs_the_callback_at_once_in_this_thread(modules):
    name = modules.make("x = 1\n")
    __import__(name)
    seen = []
    assert register_post_import_hook(lambda m: seen.append((m.x, threading.get_ident())), name) is None
    assert seen == [(1, threading.get_ident())]


def test_a_module_not_imported_yet_runs_the_callback_at_its_import(modules):
    name = modules.make("x = 1\n")
    seen = []
    assert register_post_import_hook(lambda m: seen.append(m.x), name) is None
    assert seen == []
    __import__(name)
    assert seen == [1]


def test_an_import_in_progress_in_another_thread_is_waited_for_never_patched_half_way(modules):
    name = modules.make(SLOW)
    importer = threading.Thread(target=__import__, args=(name,))
    importer.start()
    assert modules.gate.entered.wait(10)            # its body runs, half done
    seen, done = [], threading.Event()
    wait = register_post_import_hook(lambda m: (seen.append(m.last), done.set()), name)
    assert isinstance(wait, ImportWait) and not wait.completed.is_set() and seen == []
    modules.gate.release.set()
    importer.join(10)
    assert done.wait(10) and seen == [2]            # the body had completed: `last` is there
    assert wait.completed.is_set() and wait.module is sys.modules[name]


def test_an_import_in_progress_further_up_this_threads_stack_is_waited_for(modules):
    hook_name = f"{__name__}_hooks_for_self"
    seen = []
    body = ("import sys\nfirst = 1\n"
            "from dsv41_flags.hooks import register_post_import_hook\n"
            f"WAIT = register_post_import_hook(lambda m: sys.modules[{hook_name!r}].append(m.last), __name__)\n"
            "last = 2\n")
    sys.modules[hook_name] = seen  # the callback's sink
    try:
        name = modules.make(body)
        module = __import__(name)
        assert isinstance(module.WAIT, ImportWait)  # registered while its own body ran
        assert module.WAIT.completed.wait(10)
        module.WAIT.thread.join(10)
        assert seen == [2]
    finally:
        sys.modules.pop(hook_name, None)


def test_a_failed_import_in_progress_is_never_retried_by_the_probe_and_the_next_import_fires(modules):
    runs = f"{__name__}_runs_{uuid.uuid4().hex[:6]}"
    sys.modules[runs] = []
    try:
        name = modules.make(f"import sys\nsys.modules[{runs!r}].append(1)\n" + SLOW
                            + "if len(sys.modules[%r]) == 1:\n    raise ImportError('first import fails')\n" % runs)
        failed = []
        importer = threading.Thread(target=lambda: failed.append(_import_error(name)))
        importer.start()
        assert modules.gate.entered.wait(10)
        seen = []
        wait = register_post_import_hook(lambda m: seen.append(m.last), name)
        assert isinstance(wait, ImportWait)
        modules.gate.release.set()
        importer.join(10)
        assert wait.completed.wait(10) and wait.module is None
        wait.thread.join(10)
        assert failed == ["first import fails"] and seen == []
        assert sys.modules[runs] == [1]              # the probe did not run the body again
        __import__(name)                             # the next import completes: the hook fires
        assert seen == [2] and sys.modules[runs] == [1, 1]
    finally:
        sys.modules.pop(runs, None)


def test_other_threads_import_normally_while_a_probe_waits(modules):
    slow = modules.make(SLOW)
    importer = threading.Thread(target=__import__, args=(slow,))
    importer.start()
    assert modules.gate.entered.wait(10)
    wait = register_post_import_hook(lambda m: None, slow)
    assert isinstance(wait, ImportWait)
    other = modules.make("y = 3\n")
    got = []
    t = threading.Thread(target=lambda: got.append(__import__(other).y))
    t.start()
    t.join(10)
    assert got == [3]                                # the probe's guard refuses only its own imports
    modules.gate.release.set()
    importer.join(10)
    assert wait.completed.wait(10)


def _import_error(name: str) -> str:
    try:
        __import__(name)
    except ImportError as exc:
        return str(exc)
    return "imported"


#: the start of a program whose target module's import is held half-way by ``demo_gate``: the
#: body sets ``entered`` and waits for ``release`` (threading events, never a timer)
GATE = """
        import sys, threading, types
        gate = sys.modules["demo_gate"] = types.ModuleType("demo_gate")
        gate.entered, gate.release = threading.Event(), threading.Event()
"""
#: a target module body held by the gate half-way
HELD = ("import demo_gate\ndemo_gate.entered.set()\ndemo_gate.release.wait(60)\n"
        "class Worker:\n    def forward(self):\n        return 'stock'\n")


def _probe_threads(target: str) -> str:
    """Program text: join the hooks' probe thread of ``target`` (``ImportWait.thread``, named
    ``dsv41-flags-wait-<target>``), which installs once the import it waits for completes."""
    return (f"for w in [w for w in threading.enumerate() if w.name == 'dsv41-flags-wait-{target}']:\n"
            f"            w.join(60)")


def test_target_still_importing_in_another_thread_installs_when_the_import_completes(project):
    (project.dir / f"{project.target}.py").write_text(
        "class Worker:\n    def forward(self):\n        return 'stock'\n" + HELD)
    proc = run_py(project, GATE + f"""
        import dsv41_flags
        t = threading.Thread(target=__import__, args=({project.target!r},)); t.start()
        gate.entered.wait(60)                        # its import has begun, and is held
        rt = dsv41_flags.activate()
        print(next(s for s in rt.states() if s.name == "demo_patch").state)
        gate.release.set()
        t.join(60)
        {_probe_threads(project.target)}
        import {project.target} as m
        print(next(s for s in rt.states() if s.name == "demo_patch").state, m.Worker().forward())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["pending", "installed patched n=5"]
    pending = [e for e in events(proc.stderr) if e["event"] == "feature.pending"]
    assert pending and "is still being imported" in pending[0]["reason"]


def test_strict_drift_at_a_later_import_stops_with_exit_3_and_an_event(project):
    (project.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(project.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    proc = run_py(project, f"""
        import dsv41_flags
        dsv41_flags.activate()
        try:
            import {project.target}
        except BaseException as exc:            # a host cannot swallow it and run unpatched
            print("CAUGHT", type(exc).__name__)
        print("RAN ON")
    """)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "RAN ON" not in proc.stdout and "CAUGHT" not in proc.stdout
    assert "Traceback" not in proc.stderr
    ev = events(proc.stderr)
    names = [e["event"] for e in ev]
    assert "feature.drifted" in names
    err = [e for e in ev if e["event"] == "flags.error"][-1]
    assert err["entry"] == "import of demo_patch's target" and "Worker.gone" in err["cause"]
    assert err["outcome"].startswith("stopped: exit status 3")


def test_strict_drift_found_when_another_threads_import_completes_stops_with_exit_3(project):
    (project.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(project.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    (project.dir / f"{project.target}.py").write_text(HELD)
    proc = run_py(project, GATE + f"""
        import dsv41_flags
        t = threading.Thread(target=__import__, args=({project.target!r},)); t.start()
        gate.entered.wait(60)                        # its import has begun, and is held
        dsv41_flags.activate()
        gate.release.set()
        t.join(60)
        {_probe_threads(project.target)}             # the probe finds the drift: exit 3 there
        print("RAN ON")
    """)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "RAN ON" not in proc.stdout and "Traceback" not in proc.stderr
    err = [e for e in events(proc.stderr) if e["event"] == "flags.error"][-1]
    assert "Worker.gone" in err["cause"] and err["outcome"].startswith("stopped: exit status 3")
