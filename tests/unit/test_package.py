"""A faithful launcher, a clean CLI, a complete boot report, one meaning per
text, validate answers "would each profile boot?", and the test kit restoring every original.
(The wheel: tests/unit/test_wheel.py.)"""
import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest
import structlog
from typer.testing import CliRunner

import dsv41_flags
from dsv41_flags import SettingsError
from dsv41_flags.cli import app
from dsv41_flags.launcher import BOOTSTRAP_DIR, python_path
from dsv41_flags.assembly import resolve_launch
from dsv41_flags.settings import find_settings_files
from dsv41_flags.testing import FlagsKit

from ..conftest import REPO
from ._child import CLI, events, make_project, run_cmd

DEMO_FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    cap = ctx.options["cap"]
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: f"patched {cap}"))
FEATURE = Feature(name="cap_new_tokens", target=TARGET, install=install, summary="demo",
                  requires=REQUIRES, engine="",
                  options=(Option("cap", "int", 512, minimum=1, maximum=4096),
                           Option("ratio", "float", 0.5, minimum=0.0, maximum=1.0)))
"""


@pytest.fixture
def launch(tmp_path):
    """A target module, a features dir with one feature (option ``cap``), settings, a clean env;
    ``launch.feature(requires=..., target=...)`` rewrites the feature."""
    launch = make_project(tmp_path, "cap_new_tokens", DEMO_FEATURE.replace("REQUIRES", repr(("Worker.forward",))),
                          "[default]\ncap_new_tokens = false\n")

    def feature(requires=("Worker.forward",), target=launch.target):
        (launch.feats / "cap_new_tokens.py").write_text(
            DEMO_FEATURE.replace("TARGET", repr(target)).replace("REQUIRES", repr(tuple(requires))))

    launch.feature = feature
    return launch


@pytest.fixture
def cli(monkeypatch, tmp_path):
    for key in [k for k in os.environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def invoke(*args, env=None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        result = CliRunner().invoke(app, list(args), catch_exceptions=False, prog_name="dsv41-flags")
        for k in env or {}:
            monkeypatch.delenv(k)
        return result
    return invoke


# ------------------------------------------------------------------ 2, 3, 4: the launcher
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


# ------------------------------------------------------------------ 5: run checks drift first
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


# ------------------------------------------------------------------ 6: help
COMMANDS = ["status", "validate", "explain", "fingerprint", "diff", "check", "run"]


@pytest.mark.parametrize("command", [None] + COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_renders_what_the_docstrings_mean(cli, command, flag):
    r = cli(*([command] if command else []), flag)
    assert r.exit_code == 0
    text = r.stdout
    assert "<" not in text and "``" not in text and "{" not in text   # no <list[Path]>, RST, {KEY}
    if command == "validate":
        assert "[tp4]" in " ".join(text.split()) and "[default]" in text
    if command == "explain":
        assert "settings file [section]" in " ".join(text.split())
        assert "Usage: dsv41-flags explain [OPTIONS] KEY" in text
    if command == "run":
        assert "Usage: dsv41-flags run [OPTIONS] -- CMD [ARGS]..." in text
    if command == "fingerprint":
        assert "Usage: dsv41-flags fingerprint [OPTIONS] [-- CMD [ARGS]...]" in text
    if command in ("status", "run"):
        assert "-s, --settings FILE" in text and "-p, --profile NAME" in text


def test_version_and_dev_help(cli):
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.startswith("dsv41-flags ")
    proc = subprocess.run(["bash", str(REPO / "dev"), "--help"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and "./dev test" in proc.stdout
    proc = subprocess.run(["bash", str(REPO / "dev"), "nonsense"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and "./dev test" in proc.stderr


# ------------------------------------------------------------------ 7: option values reported
def test_option_values_and_sources_in_the_boot_report(launch, dsv41_flags_runtime):
    kit = dsv41_flags_runtime
    kit.activate({"cap_new_tokens": True}, {"cap_new_tokens": {"cap": 7}}, features_dir=launch.dir / "features")
    resolved = kit.events("flags.resolved")[0]["features"]["cap_new_tokens"]
    assert resolved["options"]["cap"] == {"value": 7, "source": "env DSV41_CAP_NEW_TOKENS_CAP"}
    assert resolved["options"]["ratio"] == {"value": 0.5, "source": "declared default"}


def test_option_values_and_sources_in_status(launch, cli):
    env = {"DSV41_SETTINGS": str(launch.settings), "DSV41_CAP_NEW_TOKENS_CAP": "7"}
    data = json.loads(cli("status", "--json", env=env).stdout)
    assert next(f for f in data["features"] if f["name"] == "cap_new_tokens")["options"]["cap"] == {"value": 7, "source": "env DSV41_CAP_NEW_TOKENS_CAP"}
    human = cli("status", env=env).stdout
    assert "option cap = 7  from env DSV41_CAP_NEW_TOKENS_CAP" in human
    assert "option ratio = 0.5  from declared default" in human


# ------------------------------------------------------------------ 8: explain
def test_explain_shows_the_winner_and_marks_invalid_layers(cli, tmp_path):
    s = tmp_path / "s.toml"
    s.write_text("[default]\nfolded_fence = true\n")
    env = {"DSV41_FOLDED_FENCE": "maybe"}
    r = cli("explain", "folded_fence", "--json", "-s", str(s), env=env)
    assert r.exit_code == 1
    key = json.loads(r.stdout)["keys"]["FOLDED_FENCE"]
    assert key["value"] is True and key["source"] == f"{s} [default]"
    assert [(l["valid"], l["wins"]) for l in key["layers"]] == [(True, False), (True, True), (False, False)]
    r = cli("explain", "folded_fence", "-s", str(s), env=env)
    assert f"FOLDED_FENCE = True  (from {s} [default]" in r.stdout
    assert "env DSV41_FOLDED_FENCE: 'maybe'  <- INVALID" in r.stdout
    assert "= False (from declared default)" not in r.stdout
    assert "declared default: False" in r.stdout


# ------------------------------------------------------------------ 9: one meaning per text
def resolution(launch, text, env=None):
    launch.settings.write_text(text)
    return resolve_launch([launch.settings], None, dict(env or {}), launch.dir / "features")[1]


@pytest.mark.parametrize("text,ok", [("0x10", False), ("0o20", False), ("0b1", False), ("1_6", False),
                                     ("16", True), ("+16", True), ('"16"', False)])
def test_int_text_means_the_same_in_a_file_and_a_variable(launch, text, ok):
    in_file = resolution(launch, f"[default]\ncap_new_tokens_cap = {text}\n")
    assert (not in_file.errors) is ok
    if not text.startswith('"'):   # the same text in a variable
        in_var = resolution(launch, "[default]\n", {"DSV41_CAP_NEW_TOKENS_CAP": text})
        assert (not in_var.errors) is ok
        if ok:
            assert in_file.values["CAP_NEW_TOKENS_CAP"].value == in_var.values["CAP_NEW_TOKENS_CAP"].value == 16
    if not ok:
        msg = in_file.errors[0].message
        assert "cap_new_tokens_cap" in msg and "strictly typed" in msg


@pytest.mark.parametrize("line", ['cap_new_tokens = "true"', "cap_new_tokens = 1",
                                  'cap_new_tokens_ratio = "0.5"', "cap_new_tokens_ratio = 1_0.5"])
def test_files_are_strictly_typed(launch, line):
    res = resolution(launch, f"[default]\n{line}\n")
    assert res.errors and "strictly typed" in res.errors[0].message


# ------------------------------------------------------------------ 10: keys in two cases
def test_keys_spelled_in_two_cases_are_an_error(cli, tmp_path):
    s = tmp_path / "settings.toml"
    s.write_text("[default]\nfolded_fence = true\nFOLDED_FENCE = false\n")
    with pytest.raises(SettingsError) as exc:
        find_settings_files([s])
    assert "'folded_fence' and 'FOLDED_FENCE'" in str(exc.value)
    r = cli("validate", "-s", str(s))
    assert r.exit_code == 1 and "'folded_fence' and 'FOLDED_FENCE'" in r.output
    s.write_text("[tp4]\nx = 1\n[TP4]\ny = 2\n")
    with pytest.raises(SettingsError, match="'tp4' and 'TP4'"):
        find_settings_files([s])


# ------------------------------------------------------------------ 11: small inconsistencies
def test_reserved_words_any_case(make_runtime):
    rt = make_runtime('[default]\nrank_guard = "WARN"\n', env={"DSV41_LOG_LEVEL": "DEBUG",
                                                               "DSV41_LOG_FORMAT": " Json "})
    assert not rt.resolution.errors
    assert rt.resolution.reserved["LOG_LEVEL"] == "debug" and rt.resolution.reserved["RANK_GUARD"] == "warn"
    assert rt.resolution.reserved["LOG_FORMAT"] == "json"


def test_bom_and_directory_named(tmp_path):
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf[default]\nfolded_fence = true\n")
    with pytest.raises(SettingsError, match="byte order mark"):
        find_settings_files([bom])
    d = tmp_path / "conf.toml"
    d.mkdir()
    for path in (d, tmp_path):
        with pytest.raises(SettingsError, match="is a directory"):
            find_settings_files([path])


@pytest.mark.parametrize("source,ok", [
    (b"# -*- coding: latin-1 -*-\nNAME = '\xe9t\xe9'\nclass Worker:\n    def forward(self):\n        pass\n", True),
    (b"class Worker:\n    def forward(self)\n        pass\n", False),
    (b"class Worker:\n    NAME = '\xe9'\n", False),
])
def test_unusual_target_sources_are_drift_never_a_traceback(cli, launch, monkeypatch, source, ok):
    odd = f"odd_target_{uuid.uuid4().hex[:8]}"
    (launch.dir / f"{odd}.py").write_bytes(source)
    monkeypatch.syspath_prepend(str(launch.dir))
    launch.feature(target=odd)
    launch.settings.write_text("[default]\ncap_new_tokens = true\n")
    env = {"DSV41_SETTINGS": str(launch.settings)}
    for args in (["status", "--json"], ["check", "--json"]):
        r = cli(*args, env=env)
        assert r.exit_code == (0 if ok else 1), r.output
        data = json.loads(r.stdout)
        row = next(f for f in data["features"] if f.get("name", f.get("feature")) == "cap_new_tokens")
        missing = row["missing"]
        assert (missing == []) is ok
        if not ok:
            assert "Worker.forward (unverifiable: source" in missing[0]


# ------------------------------------------------------------------ 12: would each profile boot?
def test_validate_reports_a_profile_whose_armed_feature_drifted(cli, launch):
    launch.feature(requires=("Worker.forward", "Worker.gone"))
    launch.settings.write_text("[default]\ncap_new_tokens = false\n[tp4]\ncap_new_tokens = true\n")
    env = {"DSV41_SETTINGS": str(launch.settings)}
    sys.path.insert(0, str(launch.dir))
    try:
        r = cli("validate", "--json", env=env)
        data = json.loads(r.stdout)
        assert r.exit_code == 1 and not data["ok"]
        [p] = data["problems"]
        assert p["profile"] == "tp4" and "Worker.gone" in p["message"] and p["severity"] == "error"
        assert cli("validate", "--only", env=env).exit_code == 0        # [default] boots
    finally:
        sys.path.remove(str(launch.dir))


# ------------------------------------------------------------------ the test kit
def test_kit_restores_every_original(launch, tmp_path, monkeypatch):
    monkeypatch.setenv("DSV41_UNRELATED", "kept")
    monkeypatch.syspath_prepend(str(launch.dir))
    environ, config = dict(os.environ), structlog.get_config()
    configured, before = structlog.is_configured(), dsv41_flags.current_runtime()
    kit = FlagsKit(tmp_path)
    rt = kit.activate({"cap_new_tokens": True}, {"cap_new_tokens": {"cap": 9}},
                      features_dir=launch.dir / "features")
    assert "DSV41_UNRELATED" not in os.environ and dsv41_flags.current_runtime() is rt
    assert kit.state("cap_new_tokens") == "armed" and kit.events("flags.resolved")
    kit.restore()
    assert dict(os.environ) == environ and structlog.get_config() == config
    assert structlog.is_configured() is configured and dsv41_flags.current_runtime() is before
    # the hook of a target never imported during the test is disarmed
    mod = __import__(launch.target)
    try:
        assert mod.Worker().forward() == "stock"
    finally:
        sys.modules.pop(launch.target, None)


def test_kit_pytest_plugin_is_registered():
    from importlib.metadata import entry_points

    assert "dsv41_flags.testing" in [e.value for e in entry_points(group="pytest11")]


def test_kit_restores_after_a_failed_activation(launch, tmp_path, monkeypatch):
    from dsv41_flags import DriftError

    monkeypatch.syspath_prepend(str(launch.dir))
    launch.feature(requires=("Worker.gone",))
    mod = __import__(launch.target)          # imported: the hook fires at once, strict -> raises
    try:
        kit = FlagsKit(tmp_path)
        with pytest.raises(DriftError, match="Worker.gone"):
            kit.activate({"cap_new_tokens": True}, features_dir=launch.dir / "features")
        assert kit.events("feature.drifted")
        kit.restore()
        assert dsv41_flags.current_runtime() is None and mod.Worker().forward() == "stock"
    finally:
        sys.modules.pop(launch.target, None)
