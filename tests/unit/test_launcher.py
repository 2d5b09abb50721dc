"""``dsv41-flags run`` and its interpreter-start bootstrap: a user's raising sitecustomize, an
interpreter that cannot import dsv41_flags, interpreter options that skip the bootstrap, a missing
command, spawned children and multiprocessing's helpers."""

import os
import subprocess
import sys
import textwrap

import pytest

from dsv41_flags.launcher import bootstrap_bypass, interpreter_options, interpreter_problem, launch_environ

from ..conftest import REPO_SETTINGS
from ._child import CLI, clean_env, events, run_cmd


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_run_spawn_child_and_resource_tracker(project, method):
    """Under ``dsv41-flags run``: a spawned (or forkserver) child whose target is not an sglang
    entry activates before its target runs (role child, once); multiprocessing's resource tracker
    and forkserver never activate."""
    (project.dir / "prog.py").write_text(textwrap.dedent(f"""
        import multiprocessing as mp, os
        def work():
            import {project.target} as m, dsv41_flags
            print("CHILD", os.getpid(), m.Worker().forward().replace(" ", "_"), flush=True)
        if __name__ == "__main__":
            ctx = mp.get_context("METHOD")
            sem = ctx.Semaphore()                 # starts the resource tracker
            p = ctx.Process(target=work)
            p.start(); p.join(60)
    """).replace("METHOD", method))
    proc = run_cmd([CLI, "run", "--", sys.executable, str(project.dir / "prog.py")], project.env, project.dir)
    assert proc.returncode == 0, proc.stderr
    _, pid, out = [l for l in proc.stdout.splitlines() if l.startswith("CHILD")][0].split()
    assert out == "patched_n=5"
    resolved = [e for e in events(proc.stderr) if e["event"] == "flags.resolved"]
    assert [e["role"] for e in resolved] == ["launcher", "child"]      # no resource tracker
    assert resolved[1]["pid"] == int(pid)


@pytest.mark.parametrize("how", ["subclass", "pool"])
def test_run_spawn_child_of_a_process_subclass_or_a_pool_activates_before_its_code(project, how):
    """Under ``dsv41-flags run``, a spawned child activates when its process object arrives (the
    mark its parent put on it), whatever runs there: a Process subclass with its own ``run``, a
    Pool worker."""
    (project.dir / "prog.py").write_text(textwrap.dedent(f"""
        import multiprocessing as mp, os
        def work(_=None):
            import {project.target} as m
            return f"CHILD {{os.getpid()}} " + m.Worker().forward().replace(" ", "_")
        class Mine(mp.get_context("spawn").Process):
            def run(self):
                print(work(), flush=True)
        if __name__ == "__main__":
            if "HOW" == "subclass":
                p = Mine(); p.start(); p.join(60)
            else:
                with mp.get_context("spawn").Pool(1) as pool:
                    print(pool.apply(work, (1,)), flush=True)
    """).replace("HOW", how))
    proc = run_cmd([CLI, "run", "--", sys.executable, str(project.dir / "prog.py")], project.env, project.dir)
    assert proc.returncode == 0, proc.stderr
    _, pid, out = [l for l in proc.stdout.splitlines() if l.startswith("CHILD")][0].split()
    assert out == "patched_n=5"
    resolved = [e for e in events(proc.stderr) if e["event"] == "flags.resolved"]
    assert [e["role"] for e in resolved] == ["launcher", "child"]
    assert resolved[1]["pid"] == int(pid)



@pytest.mark.parametrize("opts", [["-I"], ["-E"], ["-S"], ["-Es"], ["-IS"], ["-sE"], ["-b", "-E"],
                                  ["-X", "dev", "-S"]])
def test_run_refuses_interpreter_options_that_skip_the_bootstrap(run_program, opts):
    proc = run_cmd([CLI, "run", "--", sys.executable, *opts, "r.py"], run_program.env, run_program.dir)
    assert proc.returncode == 1, proc.stderr
    letter = next(o for o in "IES" if any(o in x for x in opts if x.startswith("-") and x != "dev"))
    assert f"option -{letter}" in proc.stderr and "strict" in proc.stderr
    assert proc.stdout == ""  # not started


def test_run_warns_in_non_strict_mode_and_keeps_harmless_options(run_program):
    (run_program.dir / "plain.py").write_text("import sys\nprint('ran', 'dsv41_flags' in sys.modules)\n")
    proc = run_cmd([CLI, "run", "--", sys.executable, "-I", "plain.py"], {**run_program.env, "DSV41_STRICT": "false"},
                run_program.dir)
    assert proc.returncode == 0 and "warning" in proc.stderr and "-I" in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["ran", "False"]  # started, unpatched as the warning said
    for opts in (["-s"], ["-WE"], ["-u", "-B"]):
        proc = run_cmd([CLI, "run", "--", sys.executable, *opts, "r.py"],
                    {**run_program.env, "PYTHONNOUSERSITE": "1"}, run_program.dir)
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


def test_raising_user_sitecustomize_is_reported_once_and_the_program_runs(program):
    usersite = program.dir / "usersite"
    usersite.mkdir()
    (usersite / "sitecustomize.py").write_text('raise ValueError("boom")\n')
    env = {**program.env, "PYTHONPATH": f"{usersite}{os.pathsep}{program.dir}"}
    # the command's environment as run builds it (the CLI process itself would also run the
    # user's sitecustomize, as plain Python does: that is not the program's report)
    child_env = launch_environ(environ=env, argv=[sys.executable, "-c", "print('ran')"])
    code = (f"import sys, dsv41_flags, {program.target} as t\n"
            "print('ran', dsv41_flags.current_runtime() is not None, t.Worker().forward())")
    proc = run_cmd([sys.executable, "-c", code], child_env, program.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran True patched 'x'\n"
    text = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert text == ["Error in sitecustomize; set PYTHONVERBOSE for traceback:", "ValueError: boom"]
    assert "KeyError" not in proc.stderr
    names = [e["event"] for e in events(proc.stderr)]
    assert names == ["flags.resolved", "sitecustomize.failed", "feature.installed"]
    # and through the CLI: the program runs, its own report is the same
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", code], env, program.dir)
    assert proc.returncode == 0 and proc.stdout == "ran True patched 'x'\n", proc.stderr
    assert proc.stderr.count("Error in sitecustomize") == 2   # the CLI process, then the program
    assert "KeyError" not in proc.stderr


@pytest.fixture
def foreign_python(tmp_path):
    """A directory whose ``python3`` is the base interpreter (no dsv41_flags installed there)."""
    bindir = tmp_path / "sysbin"
    bindir.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)
    (bindir / "python3").symlink_to(base)
    probe = subprocess.run([str(bindir / "python3"), "-c", "import dsv41_flags"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the base interpreter imports dsv41_flags here")
    return bindir


def test_run_refuses_an_interpreter_without_dsv41_flags_in_strict_mode(program, foreign_python):
    env = {**program.env, "PATH": f"{foreign_python}{os.pathsep}{program.env['PATH']}"}
    proc = run_cmd([CLI, "run", "--", "python3", "-c", "print('ran')"], env, program.dir)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (f"the interpreter {foreign_python / 'python3'} cannot import dsv41_flags" in proc.stderr
            and "activate that environment" in proc.stderr)
    assert "not starting python3: feature(s) demo_fix armed and strict mode is on" in proc.stderr
    # non-strict: a warning, and the program starts
    proc = run_cmd([CLI, "run", "--", "python3", "-c", "print('ran')"], {**env, "DSV41_STRICT": "0"}, program.dir)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    assert "warning: the interpreter" in proc.stderr and "starting anyway" in proc.stderr
    # nothing armed: nothing to check, nothing said
    program.settings.write_text("[default]\ndemo_fix = false\n")
    proc = run_cmd([CLI, "run", "--", "python3", "-c", "print('ran')"], env, program.dir)
    assert proc.returncode == 0 and "cannot import dsv41_flags" not in proc.stderr


def test_interpreter_problem_only_for_python_commands(foreign_python):
    env = {"PATH": str(foreign_python)}
    assert interpreter_problem(["python3", "-c", "1"], env)
    assert interpreter_problem([sys.executable, "-c", "1"], dict(os.environ)) is None
    assert interpreter_problem(["pythonx"], env) is None and interpreter_problem(["sh"], env) is None
    assert interpreter_problem(["python3.99"], env) is None   # not found: exec reports it


def test_run_missing_command_exits_127():
    proc = run_cmd([CLI, "run", "-s", str(REPO_SETTINGS), "--", "no_such_cmd_xyz"], clean_env(), None,
                   timeout=60)
    assert proc.returncode == 127 and "command not found: no_such_cmd_xyz" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ run: the user's own sitecustomize, drift first, spawned children
from ._child import demo_launch  # noqa: E402
from dsv41_flags.launcher import BOOTSTRAP_DIR, python_path  # noqa: E402


@pytest.fixture
def launch(tmp_path):
    """A target module, a features dir with one feature ``cap_new_tokens`` (options ``cap``,
    ``ratio``), settings and a clean env (``_child.demo_launch``)."""
    return demo_launch(tmp_path)


def test_user_sitecustomize_path_edits_and_identity_are_kept(launch):
    usersite, extra = launch.dir / "usersite", launch.dir / "extra"
    usersite.mkdir()
    extra.mkdir()
    (extra / "thatmodule.py").write_text("VALUE = 'found'\n")
    (usersite / "sitecustomize.py").write_text(
        f"import sys\nsys.path.append({str(extra)!r})\nMARK = 'user'\n")
    env = {**launch.env, "PYTHONPATH": f"{usersite}{os.pathsep}{launch.dir}"}
    code = ("import sys, sitecustomize, thatmodule, dsv41_flags\n"
            "print(thatmodule.VALUE, sitecustomize.MARK, sitecustomize.__file__,"
            " dsv41_flags.current_runtime() is not None)\n"
            "print(repr(sys.path))\n")
    plain = run_cmd([sys.executable, "-c", code], env, launch.dir)
    under = run_cmd([CLI, "run", "--", sys.executable, "-c", code], env, launch.dir)
    assert under.returncode == 0, under.stderr
    first = under.stdout.splitlines()[0].split()
    assert first == ["found", "user", str(usersite / "sitecustomize.py"), "True"]
    # sys.path is exactly what plain Python has (the bootstrap directory is taken off)
    assert under.stdout.splitlines()[1] == plain.stdout.splitlines()[1]


def test_package_form_sitecustomize(launch):
    pkg = launch.dir / "usersite" / "sitecustomize"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import helper\nMARK = helper.X\n")
    (pkg / "helper.py").write_text("X = 'pkg'\n")
    env = {**launch.env, "PYTHONPATH": f"{launch.dir / 'usersite'}{os.pathsep}{launch.dir}"}
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", "import sitecustomize; print(sitecustomize.MARK)"],
               env, launch.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "pkg"


def test_empty_pythonpath_entry_is_kept(launch):
    (launch.dir / "localmod.py").write_text("X = 'local'\n")
    assert python_path(":/opt/x") == f"{BOOTSTRAP_DIR}::/opt/x"
    assert python_path(None) == python_path("") == str(BOOTSTRAP_DIR)
    assert python_path(f"{BOOTSTRAP_DIR}:/a") == f"{BOOTSTRAP_DIR}:/a"     # a nested run
    env = {**launch.env, "PYTHONPATH": f"{os.pathsep}{launch.dir}{os.pathsep}/opt/x"}
    code = "import sys, localmod; print(localmod.X); print(repr(sys.path))"
    plain = run_cmd([sys.executable, "-c", code], env, launch.dir)
    under = run_cmd([CLI, "run", "--", sys.executable, "-c", code], env, launch.dir)
    assert under.returncode == 0, under.stderr
    assert under.stdout == plain.stdout


@pytest.mark.parametrize("raise_", ["raise ImportError('no module named nope')",
                                    "raise RuntimeError('user site broke')"])
def test_errors_in_user_sitecustomize_are_reported_and_activation_goes_on(launch, raise_):
    usersite = launch.dir / "usersite"
    usersite.mkdir()
    (usersite / "sitecustomize.py").write_text(f"import os\nos.environ['RAN'] = '1'\n{raise_}\n")
    launch.settings.write_text("[default]\ncap_new_tokens = true\n")
    env = {**launch.env, "PYTHONPATH": f"{usersite}{os.pathsep}{launch.dir}"}
    code = (f"import os, dsv41_flags, {launch.target} as t\n"
            "print(os.environ.get('RAN'), dsv41_flags.current_runtime() is not None, t.Worker().forward())")
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", code], env, launch.dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "True", "patched", "512"]
    kind, message = raise_[len("raise "):].split("(", 1)
    assert "Error in sitecustomize; set PYTHONVERBOSE for traceback:" in proc.stderr
    assert f"{kind}: {message.strip(chr(39) + ')')}" in proc.stderr
    [note] = [e for e in events(proc.stderr) if e["event"] == "sitecustomize.failed"]
    assert note["path"] == str(usersite / "sitecustomize.py") and kind in note["error"]


def test_run_refuses_a_launch_strict_mode_would_stop(launch):
    launch.feature(requires=("Worker.forward", "Worker.gone"))
    launch.settings.write_text("[default]\ncap_new_tokens = true\n")
    status = run_cmd([CLI, "status"], launch.env, launch.dir)
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", "print('STARTED')"], launch.env, launch.dir)
    assert proc.returncode == 1 and "STARTED" not in proc.stdout
    assert "Traceback" not in proc.stderr
    assert status.returncode == 1
    message = "error: an armed feature drifted (strict mode): a boot would stop"
    assert message in status.stderr and message in proc.stderr
    assert "Worker.gone" in proc.stderr
    # not strict: the launch starts (and the child reports the drift itself)
    launch.settings.write_text("[default]\ncap_new_tokens = true\nstrict = false\n")
    proc = run_cmd([CLI, "run", "--", sys.executable, "-c", "print('STARTED')"], launch.env, launch.dir)
    assert proc.returncode == 0 and "STARTED" in proc.stdout


def test_spawned_child_first_event_names_its_process(launch):
    launch.settings.write_text("[default]\ncap_new_tokens = true\n")
    (launch.dir / "prog.py").write_text(textwrap.dedent("""
        import multiprocessing as mp, os
        def child():
            print("CHILD", os.getpid(), flush=True)
        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=child, name="worker-7")
            p.start(); p.join(60)
    """))
    proc = run_cmd([CLI, "run", "--", sys.executable, str(launch.dir / "prog.py")], launch.env, launch.dir)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout.split()[1])
    mine = [e for e in events(proc.stderr) if e.get("pid") == pid]
    assert mine, proc.stdout + proc.stderr
    first = mine[0]
    assert first["event"] == "flags.resolved" and first["process"] == "worker-7"
    assert "Error in sitecustomize" not in proc.stderr
