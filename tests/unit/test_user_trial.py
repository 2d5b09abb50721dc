"""A fresh user's trial from the README: each finding is one instance of a kind, kept as a test.

1 a raising user sitecustomize under ``run``; 2 whitespace of str options; 3 (engine tier and
test_wheel: the shipped option table); 4 ``explain`` of reserved keys; 5 ``engine=`` of a Feature;
6 ``run`` with an interpreter that cannot import dsv41_flags; 8 the program's identity in the
fingerprint; 9 CLI messages."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dsv41_flags import DeclarationError, Feature, Option
from dsv41_flags.cli import app
from dsv41_flags.fingerprint import normalize_argv
from dsv41_flags.launcher import interpreter_problem, launch_environ
from dsv41_flags.values import CastError, cast

CLI = str(Path(sys.executable).with_name("dsv41-flags"))
PROGRAM_FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched " + repr(ctx.options["tag"])))
FEATURE = Feature(name="demo_fix", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="",
                  options=(Option("tag", "str", "x"), Option("mode", "choice", "a", choices=("a", "b")),
                           Option("names", "list", ())))
"""


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def launch(tmp_path):
    """A user's own target module and a feature patching it (engine=""), settings, a clean env."""
    target = f"trial_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("class Worker:\n    def forward(self):\n        return 'stock'\n")
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "demo_fix.py").write_text(PROGRAM_FEATURE.replace("TARGET", repr(target)))
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ndemo_fix = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(settings), PYTHONPATH=str(tmp_path), DSV41_LOG_FORMAT="json")
    return type("Launch", (), {"dir": tmp_path, "target": target, "settings": settings, "env": env})


@pytest.fixture
def cli(monkeypatch, launch):
    for key in [k for k in os.environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(launch.dir)
    monkeypatch.syspath_prepend(str(launch.dir))   # the user's target module, found by status
    monkeypatch.setenv("DSV41_SETTINGS", str(launch.settings))

    def invoke(*args, env=None):
        with monkeypatch.context() as m:
            for k, v in (env or {}).items():
                m.setenv(k, v)
            return CliRunner().invoke(app, list(args), catch_exceptions=False, prog_name="dsv41-flags")
    return invoke


# ------------------------------------------------- 1: a user sitecustomize that raises, under run
def test_raising_user_sitecustomize_is_reported_once_and_the_program_runs(launch):
    usersite = launch.dir / "usersite"
    usersite.mkdir()
    (usersite / "sitecustomize.py").write_text('raise ValueError("boom")\n')
    env = {**launch.env, "PYTHONPATH": f"{usersite}{os.pathsep}{launch.dir}"}
    # the command's environment as run builds it (the CLI process itself would also run the
    # user's sitecustomize, as plain Python does: that is not the program's report)
    child_env = launch_environ(environ=env, argv=[sys.executable, "-c", "print('ran')"])
    code = (f"import sys, dsv41_flags, {launch.target} as t\n"
            "print('ran', dsv41_flags.current_runtime() is not None, t.Worker().forward())")
    proc = subprocess.run([sys.executable, "-c", code], env=child_env, cwd=launch.dir,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran True patched 'x'\n"
    text = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert text == ["Error in sitecustomize; set PYTHONVERBOSE for traceback:", "ValueError: boom"]
    assert "KeyError" not in proc.stderr
    names = [e["event"] for e in events(proc.stderr)]
    assert names == ["flags.resolved", "sitecustomize.failed", "feature.installed"]
    # and through the CLI: the program runs, its own report is the same
    proc = subprocess.run([CLI, "run", "--", sys.executable, "-c", code], env=env, cwd=launch.dir,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ran True patched 'x'\n", proc.stderr
    assert proc.stderr.count("Error in sitecustomize") == 2   # the CLI process, then the program
    assert "KeyError" not in proc.stderr


# ------------------------------------------------------------ 2: whitespace, one meaning per text
@pytest.mark.parametrize("raw", [" a ", "a ", "\u00a0a", "  ", ""])
def test_str_option_keeps_its_text_exactly(raw):
    assert cast("str", raw) == raw


def test_choice_numbers_flags_and_list_items_ignore_surrounding_whitespace():
    assert cast("choice", " b\u00a0", choices=("a", "b")) == "b"
    assert cast("int", " 5 ") == 5 and cast("float", " 0.5 ") == 0.5 and cast("bool", " on ") is True
    # list items: the same from a TOML array and from a comma-separated variable
    assert cast("list", [" x", "y ", " ", ""]) == cast("list", " x,y , ,") == ("x", "y")
    with pytest.raises(CastError):
        cast("choice", " c ", choices=("a", "b"))


def test_str_option_from_file_and_variable_reaches_install_unchanged(launch, cli):
    launch.settings.write_text('[default]\ndemo_fix = true\ndemo_fix_tag = " padded "\n'
                               'demo_fix_names = [" a", "b "]\n')
    data = json.loads(cli("status", "--json").stdout)
    options = next(f for f in data["features"] if f["name"] == "demo_fix")["options"]
    assert options["tag"]["value"] == " padded " and options["names"]["value"] == ["a", "b"]
    data = json.loads(cli("status", "--json", env={"DSV41_DEMO_FIX_TAG": "  v ",
                                                   "DSV41_DEMO_FIX_NAMES": " a,b "}).stdout)
    options = next(f for f in data["features"] if f["name"] == "demo_fix")["options"]
    assert options["tag"]["value"] == "  v " and options["names"]["value"] == ["a", "b"]


# -------------------------------------------------------------- 4: explain of reserved settings
@pytest.mark.parametrize("key,var,bad", [("rank_guard", "DSV41_RANK_GUARD", "bogus"),
                                         ("strict", "DSV41_STRICT", "maybe"),
                                         ("DSV41_LOG_LEVEL", "DSV41_LOG_LEVEL", "loud")])
def test_explain_reserved_key_shows_the_chain_and_fails_on_an_invalid_layer(cli, key, var, bad):
    status = cli("status", env={var: bad})
    assert status.exit_code == 1
    r = cli("explain", key, env={var: bad})
    assert r.exit_code == 1, r.output
    assert f"env {var}: {bad!r}  <- INVALID: accepted:" in r.stdout
    assert "1. declared default:" in r.stdout and "<- wins" in r.stdout
    assert f"{var}={bad!r} (environment variable) is not a valid value" in r.stderr
    data = json.loads(cli("explain", key, "--json", env={var: bad}).stdout)
    [entry] = data["keys"].values()
    assert [layer["valid"] for layer in entry["layers"]][-1] is False
    assert data["problems"] and data["reserved"] == var.removeprefix("DSV41_")


def test_explain_valid_reserved_key_names_the_winning_layer(launch, cli):
    launch.settings.write_text('[default]\ndemo_fix = true\nrank_guard = "WARN"\n')
    r = cli("explain", "rank_guard")
    assert r.exit_code == 0, r.output
    assert "RANK_GUARD = 'warn'" in r.stdout and "[default]: 'WARN'  <- wins" in r.stdout


def test_explain_the_fingerprint_table_fails_on_an_invalid_value(launch, cli):
    launch.settings.write_text('[default]\ndemo_fix = true\n[default.fingerprint]\n'
                               'volatile = "SGLANG_X"\n')
    r = cli("explain", "fingerprint")
    assert r.exit_code == 1 and "fingerprint.volatile = 'SGLANG_X' is not a list" in r.stderr


# ---------------------------------------------------------------------- 5: engine= of a Feature
def test_engine_default_and_no_engine():
    from dsv41_flags.discovery import with_engine_default
    from dsv41_flags.engines import adapter

    adapter.cache_clear()
    f = Feature(name="x", target="m", install=lambda m, c: None, summary="s")
    assert adapter.cache_info().currsize == 0  # building a Feature reads no installed metadata
    assert f.engine is None and f.engine_label == "the engine adapter's range"
    [f] = with_engine_default([f])
    assert f.engine == "sglang>=0.5.23,<0.6" and f.engine_label == f.engine
    mine = Feature(name="x", target="m", install=lambda m, c: None, summary="s", engine="")
    assert mine.engine_label == "no engine range" and with_engine_default([mine]) == [mine]
    for bad in (0.5, ("sglang",), b"sglang"):
        with pytest.raises(DeclarationError, match=r"feature 'x'.*engine must be a str, got "):
            Feature(name="x", target="m", install=lambda m, c: None, summary="s", engine=bad)


def test_status_renders_no_engine(cli):
    r = cli("status")
    assert "[no engine range]: ok" in r.stdout and "[, installed" not in r.stdout


# ------------------------------------------- 6: run with an interpreter that cannot import us
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


def test_run_refuses_an_interpreter_without_dsv41_flags_in_strict_mode(launch, foreign_python):
    env = {**launch.env, "PATH": f"{foreign_python}{os.pathsep}{launch.env['PATH']}"}
    proc = subprocess.run([CLI, "run", "--", "python3", "-c", "print('ran')"], env=env,
                          cwd=launch.dir, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (f"the interpreter {foreign_python / 'python3'} cannot import dsv41_flags" in proc.stderr
            and "activate that environment" in proc.stderr)
    assert "not starting python3: feature(s) demo_fix armed and strict mode is on" in proc.stderr
    # non-strict: a warning, and the program starts
    proc = subprocess.run([CLI, "run", "--", "python3", "-c", "print('ran')"],
                          env={**env, "DSV41_STRICT": "0"}, cwd=launch.dir, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    assert "warning: the interpreter" in proc.stderr and "starting anyway" in proc.stderr
    # nothing armed: nothing to check, nothing said
    launch.settings.write_text("[default]\ndemo_fix = false\n")
    proc = subprocess.run([CLI, "run", "--", "python3", "-c", "print('ran')"], env=env,
                          cwd=launch.dir, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "cannot import dsv41_flags" not in proc.stderr


def test_interpreter_problem_only_for_python_commands(foreign_python):
    env = {"PATH": str(foreign_python)}
    assert interpreter_problem(["python3", "-c", "1"], env)
    assert interpreter_problem([sys.executable, "-c", "1"], dict(os.environ)) is None
    assert interpreter_problem(["pythonx"], env) is None and interpreter_problem(["sh"], env) is None
    assert interpreter_problem(["python3.99"], env) is None   # not found: exec reports it


# ------------------------------------------------ 8: the program's identity in the fingerprint
def test_program_identity_is_kept():
    assert normalize_argv(["python", "-c", "a"]) != normalize_argv(["python", "-c", "b"])
    assert normalize_argv(["python3", "-X", "dev", "-c", "a", "--x=1"]) == ["-c", "a", "--x", "1"]
    assert normalize_argv(["python", "-m", "a.b", "1"]) == ["a.b", "1"]
    # the same kind, other spellings CPython accepts: options joined in one token, values attached
    assert normalize_argv(["python", "-Bc", "a"]) == normalize_argv(["python", "-ca"]) == ["-c", "a"]
    assert normalize_argv(["python", "-Im", "a.b"]) == normalize_argv(["python", "-ma.b"]) == ["a.b"]
    assert normalize_argv(["python", "-Xdev", "-Wignore", "-c", "b"]) == ["-c", "b"]
    assert normalize_argv(["python", "-u", "./x/prog.py", "1"]) == ["prog", "1"]


def test_code_changes_the_fingerprint_and_a_process_reads_its_own(cli, launch):
    a = json.loads(cli("fingerprint", "--json", "--", "python", "-c", "a").stdout)["fingerprint"]
    b = json.loads(cli("fingerprint", "--json", "--", "python", "-c", "b").stdout)["fingerprint"]
    assert a != b
    # a process computing its own (no run, no snapshot) reads -c CODE from sys.orig_argv
    code = "import dsv41_flags; print(dsv41_flags.activate().fingerprint.digest)"
    env = {**launch.env, "DSV41_LOG_LEVEL": "error"}
    own = subprocess.run([sys.executable, "-c", code], env=env, cwd=launch.dir,
                         capture_output=True, text=True, timeout=120).stdout.strip()
    typed = json.loads(cli("fingerprint", "--json", "--", "python", "-c", code,
                           env={"DSV41_LOG_LEVEL": "error"}).stdout)["fingerprint"]
    assert own == typed


def test_sglang_serve_is_sglang_launch_server(cli):
    def fp(*argv):
        return json.loads(cli("fingerprint", "--json", "--", *argv).stdout)["fingerprint"]

    served = fp("sglang", "serve", "org/model", "--tp", "4")
    assert served == fp("python", "-m", "sglang.launch_server", "--model-path", "org/model",
                        "--tp-size", "4")
    assert served == fp("sglang", "serve", "--model-type", "llm", "--model-path", "org/model",
                        "--tp=4")
    assert served != fp("sglang", "serve", "--model-type", "diffusion", "org/model", "--tp", "4")


# -------------------------------------------------------------------------- 9: CLI messages
def test_cli_messages(cli, launch, tmp_path):
    r = cli("run")
    assert r.exit_code == 2 and \
        "missing the command: dsv41-flags run [OPTIONS] -- CMD [ARGS]..." in r.stderr
    side = tmp_path / "x.launch"
    r = cli("fingerprint", "--write", str(side), "--", "python", "-c", "a")
    assert r.exit_code == 0 and f"wrote the sidecar {side}" in r.stderr and side.is_file()
    r = cli("fingerprint", "--diff", str(side), "--", "python", "-c", "b")
    assert r.exit_code == 1 and "  argv: ['-c', 'a'] -> ['-c', 'b']" in r.stdout
    assert "argv argv" not in r.stdout
    r = cli("fingerprint", "--diff", str(tmp_path / "missing.launch"))
    assert r.exit_code == 2 and r.stdout == ""
    assert "error: cannot compare:" in r.stderr and "missing.launch" in r.stderr


def test_check_engine_with_nothing_armed_fetches_nothing(cli, launch, monkeypatch):
    import dsv41_flags.upgrade_gate.releases as release

    def no_fetch(*a, **k):
        raise AssertionError("a release was opened")

    monkeypatch.setattr(release, "open_release", no_fetch)
    launch.settings.write_text("[default]\ndemo_fix = false\n")
    r = cli("check", "--engine", "sglang==0.5.99")
    assert r.exit_code == 0 and "no feature checked (none armed; use --all)" in r.stdout
