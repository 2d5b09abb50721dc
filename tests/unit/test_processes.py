"""Every process: snapshot handed to spawn children, launcher, once per process; a
child whose feature declaration differs from the launch's is refused, naming the field.

Each test runs its "launching process" as a fresh interpreter so the test process's own
environment and runtime stay untouched."""
import json
import os
import sys
import textwrap

import pytest

from ._child import CLI, events, make_project, run_cmd

#: ``demo_patch`` without options: ``Worker.forward`` returns ``"patched"``
PATCHED = """
from dsv41_flags import Feature
def install(module, ctx):
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched"))
FEATURE = Feature(name="demo_patch", target=TARGET, install=install,
                  summary="demo", requires=("Worker.forward",), engine="")
"""


@pytest.fixture
def launch(tmp_path):
    """A settings file, a features dir with one feature patching a demo module ``demo_engine``,
    and an env: ``(directory, settings path, env)``."""
    project = make_project(tmp_path, "demo_patch", PATCHED, "[default]\ndemo_patch = true\n",
                           target="demo_engine")
    return tmp_path, project.settings, project.env


CHILD = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys
    def child(q):
        import dsv41_flags
        rt = dsv41_flags.activate()
        import demo_engine
        q.put({"pid": os.getpid(), "forward": demo_engine.Worker().forward(),
               "from_snapshot": rt.from_snapshot,
               "states": [s.model_dump(mode="json") for s in rt.states()]})
    if __name__ == "__main__":
        import dsv41_flags
        dsv41_flags.activate()
        MUTATE
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        print(json.dumps(q.get(timeout=60)))
        p.join(60)
""")


def test_spawn_child_installs_from_snapshot_and_logs_its_own_event(launch):
    tmp, settings, env = launch
    # the settings file changes after the parent resolved: the child must not see it
    script = CHILD.replace("MUTATE", f"open({str(settings)!r}, 'w').write('[default]\\ndemo_patch = false\\n')")
    (tmp / "parent.py").write_text(script)
    proc = run_cmd([sys.executable, str(tmp / "parent.py")], env, tmp)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["forward"] == "patched" and result["from_snapshot"] is True
    assert {s["name"]: s["state"] for s in result["states"]}["demo_patch"] == "installed"
    installed = [e for e in events(proc.stderr) if e["event"] == "feature.installed"]
    assert [e["pid"] for e in installed] == [result["pid"]]          # the child said it itself
    resolved = [e for e in events(proc.stderr) if e["event"] == "flags.resolved"]
    assert len(resolved) == 2 and resolved[1]["from_snapshot"] is True
    assert resolved[0]["role"] == "launcher" and resolved[1]["role"] != "launcher"


def test_child_without_snapshot_resolves_itself(launch):
    tmp, settings, env = launch
    # a process that is no child of the launch: neither the snapshot nor the launch marker (a
    # child with the marker but no snapshot says so instead: tests/unit/test_children.py)
    (tmp / "parent.py").write_text(CHILD.replace(
        "MUTATE", "os.environ.pop('DSV41_SNAPSHOT'); os.environ.pop('DSV41_LAUNCH')"))
    proc = run_cmd([sys.executable, str(tmp / "parent.py")], env, tmp)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["from_snapshot"] is False and result["forward"] == "patched"


def test_launcher_reaches_a_spawned_grandchild(launch):
    tmp, settings, env = launch
    code = textwrap.dedent("""
        import multiprocessing as mp, os
        def grandchild():
            import demo_engine, dsv41_flags
            print("GRANDCHILD", os.getpid(), demo_engine.Worker().forward(),
                  next(s for s in dsv41_flags.current_runtime().states() if s.name == "demo_patch").state, flush=True)
        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=grandchild)
            p.start(); p.join(60)
            raise SystemExit(7)
    """)
    (tmp / "prog.py").write_text(code)
    proc = run_cmd([CLI, "run", "--", sys.executable, str(tmp / "prog.py")], env, tmp)
    assert proc.returncode == 7, proc.stderr                  # exit code passes through
    line = [l for l in proc.stdout.splitlines() if l.startswith("GRANDCHILD")][0]
    _, pid, forward, state = line.split()
    assert forward == "patched" and state == "installed"
    assert any(e["event"] == "feature.installed" and e["pid"] == int(pid) for e in events(proc.stderr))


def test_launcher_chains_existing_sitecustomize(launch):
    tmp, settings, env = launch
    other = tmp / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    env["PYTHONPATH"] = f"{tmp}{os.pathsep}{other}"
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c",
                           "import os, dsv41_flags; print(os.environ.get('OTHER_SITE'), "
                           "dsv41_flags.current_runtime() is not None)"], env, tmp, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran", "True"]


def test_launcher_refuses_bad_settings_before_starting(launch):
    tmp, settings, env = launch
    env["DSV41_DEMO_PATCH"] = "maybe"
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", "print('STARTED')"], env, tmp, timeout=60)
    assert proc.returncode == 1 and "STARTED" not in proc.stdout
    assert "DSV41_DEMO_PATCH='maybe'" in proc.stderr


def test_plugin_and_launcher_in_one_process_activate_once(launch):
    tmp, settings, env = launch
    code = ("import dsv41_flags, dsv41_flags_plugin as p\n"
            "a = dsv41_flags.current_runtime(); p.load(); b = dsv41_flags.activate()\n"
            "print(a is b and a is not None)\n")
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", code], env, tmp, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
    assert len([e for e in events(proc.stderr) if e["event"] == "flags.resolved"]) == 1


def test_role_and_ranks_read_from_the_sglang_process_entry():
    from dsv41_flags.engines.sglang.processes import caller_context

    def load_plugins():          # what sglang's loader looks like from our entry point
        return caller_context()

    def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank):
        return load_plugins()

    assert run_scheduler_process(None, None, 0, 3, 0, 1, None) == \
        {"role": "scheduler", "tp_rank": 3, "moe_ep_rank": 0, "pp_rank": 1}

    def run_detokenizer_process(server_args, port_args):
        return load_plugins()

    assert run_detokenizer_process(None, None) == {"role": "detokenizer"}


@pytest.mark.parametrize("armed", [False, True])
def test_no_import_finder_added_when_nothing_is_armed(launch, armed):
    tmp, settings, env = launch
    settings.write_text(f"[default]\ndemo_patch = {str(armed).lower()}\n")
    code = ("import sys; before = list(sys.meta_path)\n"
            "import dsv41_flags; dsv41_flags.activate()\n"
            "print([type(f).__name__ for f in sys.meta_path if f not in before])\n")
    proc = run_cmd([sys.executable, "-c", code], env, tmp, timeout=60)
    assert proc.returncode == 0, proc.stderr
    added = eval(proc.stdout.strip())
    # the shipped folded_fence is a live feature: installed (bypassed) even when off, so its
    # target gets a hook and the finder is there whether or not demo_patch is armed
    assert added == ["ImportHookFinder"]


#: field expressions evaluated in the launch (CHILD false) and in its child (CHILD true): the same
#: verified bytes declare something else in the child. Unchecked, a target would never be hooked
#: (silently unpatched), requires / engine would raise an internal traceback out of the target's
#: import, and fixed_in / live would run a declaration nobody checked.
DIFFERS = {
    "target_invalid": 'target=(T if not CHILD else "no..such")',
    "target_empty": 'target=(T if not CHILD else "")',
    "requires_malformed": 'requires=(("Worker.forward",) if not CHILD else ("Worker.forward(((",))',
    "engine_invalid": 'engine=("" if not CHILD else "sglang>=garbage!!")',
    "engine_no_name": 'engine=("" if not CHILD else ">=1")',
    "fixed_in_invalid": 'fixed_in=("" if not CHILD else "~=1")',
    "live_differs": 'live=CHILD',
}


#: ``demo_cap`` with the fields of one ``DIFFERS`` case; ``FIELDS`` is replaced by them
DIFFERING = """
import os
from dsv41_flags import Feature
CHILD = bool(os.environ.get("DSV41_SNAPSHOT"))
T = TARGET
def install(module, ctx):
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched"))
FEATURE = Feature(name="demo_cap", install=install, summary="demo", FIELDS)
"""


def _launch(tmp_path, field_expr: str, strict: bool):
    fields = {"target": "target=T", "requires": 'requires=("Worker.forward",)', "engine": 'engine=""'}
    fields[field_expr.split("=")[0]] = field_expr
    project = make_project(tmp_path, "demo_cap", DIFFERING.replace("FIELDS", ", ".join(fields.values())),
                           f'[default]\ndemo_cap = true\nstrict = {str(strict).lower()}\n'
                           f'features_dir = "FEATURES_DIR"\n')
    (tmp_path / "r.py").write_text(f"import {project.target}\nprint({project.target}.Worker().forward())\n")
    proc = run_cmd([CLI, "run", "--", sys.executable, "r.py"], project.env, tmp_path)
    events = []
    for line in proc.stderr.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            assert "Traceback" not in line, proc.stderr  # never an internal traceback
    return proc, events


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("case", sorted(DIFFERS))
def test_a_child_whose_declaration_differs_from_the_launch_says_so(tmp_path, case, strict):
    proc, events = _launch(tmp_path, DIFFERS[case], strict)
    names = [e.get("event") for e in events]
    if strict:
        assert proc.returncode == 3 and proc.stdout == "", proc.stderr
        error = next(e for e in events if e.get("event") == "flags.error")
        assert "demo_cap.py" in error["cause"]
        field = DIFFERS[case].split("=")[0]
        if "declares something else here than in the launch: " in error["cause"]:
            assert f"{field} = " in error["cause"]  # names the field that differs
        else:  # validated in the child as in the launch: the invalid field is named
            assert "DeclarationError" in error["cause"] and "feature 'demo_cap'" in error["cause"]
            assert field.replace("_", " ").split()[0] in error["cause"]
    else:  # refused, then resolved locally: validated there (flags.error) or run as checked there
        assert "snapshot.refused" in names or "flags.error" in names, proc.stderr
        if proc.stdout.strip() == "stock":
            assert proc.returncode == 3 or {"feature.drifted", "feature.failed"} & set(names), proc.stderr
