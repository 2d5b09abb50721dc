"""The dsv41-flags CLI through typer's runner: status, validate, explain, fingerprint, set."""
import json
import os
import textwrap

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app

from ..conftest import EXAMPLE_SETTINGS, REPO_SETTINGS
from ._child import CLI, REPO, clean_env, run_cmd


@pytest.fixture
def cli(monkeypatch, tmp_path):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args, env=None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        result = runner.invoke(app, list(args), catch_exceptions=False, prog_name="dsv41-flags")
        for k in env or {}:
            monkeypatch.delenv(k)
        return result
    return run


def test_status_json_shows_variable_as_source(cli):
    r = cli("status", "--json", "-s", str(REPO_SETTINGS), env={"DSV41_FOLDED_FENCE": "1"})
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["profile"] == "default" and data["settings_files"] == [str(REPO_SETTINGS)]
    assert len(data["fingerprint"]) == 64
    ff = {f["name"]: f for f in data["features"]}["folded_fence"]
    assert ff["value"] is True and ff["source"] == "env DSV41_FOLDED_FENCE"
    assert ff["state"] in ("armed", "drifted")   # drifted only when no engine is installed
    assert ff["target"] == "sglang.srt.speculative.dspark_components.dspark_verify"


@pytest.mark.parametrize("raw,value", [("off", False), ("False", False), (" yes ", True)])
def test_status_words(cli, raw, value):
    r = cli("status", "--json", "-s", str(REPO_SETTINGS), env={"DSV41_FOLDED_FENCE": raw})
    ff = {f["name"]: f for f in json.loads(r.stdout)["features"]}["folded_fence"]
    assert ff["value"] is value


def test_status_and_validate_refuse_maybe(cli):
    r = cli("status", "--json", "-s", str(REPO_SETTINGS), env={"DSV41_FOLDED_FENCE": "maybe"})
    assert r.exit_code == 1 and "'maybe'" in r.stdout
    r = cli("validate", "--json", "-s", str(REPO_SETTINGS), env={"DSV41_FOLDED_FENCE": "maybe"})
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and not data["ok"] and "on/off" in data["problems"][0]["message"]


def test_validate_suggests_and_lists_every_problem(cli):
    r = cli("validate", "--json", "-s", str(REPO_SETTINGS),
            env={"DSV41_FOLDED_FENSE": "1", "DSV41_AUTOTUNE_KEEP": "maybe"})
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and len(data["problems"]) == 2
    assert any("did you mean DSV41_FOLDED_FENCE?" in p["message"] for p in data["problems"])
    assert cli("validate", "-s", str(REPO_SETTINGS)).exit_code == 0


def test_unknown_profile_lists_profiles(cli):
    r = cli("validate", "-s", str(EXAMPLE_SETTINGS), env={"DSV41_ENV": "tp8"})
    assert r.exit_code == 1 and "default, tp3, tp4" in r.output


def test_explain_chain(cli, tmp_path):
    s = tmp_path / "s.toml"
    s.write_text("[default]\nfolded_fence = false\n[tp3]\nfolded_fence = true\n")
    r = cli("explain", "DSV41_FOLDED_FENCE", "--json", "-s", str(s), "-p", "tp3",
            env={"DSV41_FOLDED_FENCE": "off"})
    data = json.loads(r.stdout)
    chain = data["keys"]["FOLDED_FENCE"]["chain"]
    assert [c[0] for c in chain] == ["declared default", f"{s} [default]", f"{s} [tp3]", "env DSV41_FOLDED_FENCE"]
    assert data["keys"]["FOLDED_FENCE"]["value"] is False
    assert data["refs"] == ["sglang#40919"] and data["requires"]
    r = cli("explain", "folded_fense", "-s", str(s))
    assert r.exit_code == 1 and "did you mean FOLDED_FENCE" in r.output


def test_fingerprint_diff_names_changed_flag(cli, tmp_path):
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "shape.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='shape', "
                                    "target='json', install=lambda m, c: None, summary='s', engine='')\n")
    s = tmp_path / "settings.toml"
    s.write_text("[default]\nshape = false\n")
    side = tmp_path / "cache.launch"
    assert cli("fingerprint", "-s", str(s), "--write", str(side)).exit_code == 0
    r = cli("fingerprint", "-s", str(s), "--diff", str(side), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["diff"]["same"] is True
    s.write_text("[default]\nshape = true\n")
    r = cli("fingerprint", "-s", str(s), "--diff", str(side))
    assert r.exit_code == 1 and "settings SHAPE: False -> True" in r.stdout
    side.write_text("ab" * 32 + "\n")
    r = cli("fingerprint", "-s", str(s), "--diff", str(side), "--json")
    assert json.loads(r.stdout)["diff"]["same"] is False  # a bare hash is no sidecar


def test_fingerprint_explain_says_who_declared_volatile(cli):
    r = cli("fingerprint", "--explain", "--json", "-s", str(EXAMPLE_SETTINGS), "--", "serve", "--port", "1",
            env={"SGLANG_RUN_ID": "x", "NCCL_DEBUG": "INFO"})
    data = json.loads(r.stdout)
    assert data["payload"]["argv"] == ["serve"] and data["payload"]["env"] == {"NCCL_DEBUG": "INFO"}
    assert data["excluded"]["SGLANG_RUN_ID"].startswith("engine default (shipped for sglang 0.5.23: rewritten")
    assert data["excluded"]["FOLDED_FENCE"] == "feature folded_fence (declared volatile=)"
    assert data["excluded"]["--port"].startswith("engine default")
    assert data["included"]["NCCL_DEBUG"].startswith("prefix NCCL_: engine default")
    assert data["prefixes"]["SPARK_"] == f"settings file {EXAMPLE_SETTINGS} [default]"
    assert data["prefixes"]["DSV41_"].startswith("dsv41_flags")


def test_fingerprint_explain_names_settings_file_section(cli, tmp_path):
    """``fingerprint --explain``: a volatile name from a settings file says its file [section]."""
    s = tmp_path / "s.toml"
    s.write_text('[default]\nfolded_fence = false\n[default.fingerprint]\nvolatile = ["SGLANG_X"]\n'
                 'volatile_argv = ["--seed"]\n')
    r = cli("fingerprint", "--explain", "--json", "-s", str(s), "--", "serve", "--seed", "3",
            env={"SGLANG_X": "1", "SGLANG_Y": "2"})
    data = json.loads(r.stdout)
    assert data["excluded"]["SGLANG_X"] == f"settings file {s} [default]"
    assert data["excluded"]["--seed"] == f"settings file {s} [default]"
    assert data["payload"]["env"] == {"SGLANG_Y": "2"}
    text = cli("fingerprint", "--explain", "-s", str(s), env={"SGLANG_X": "1"}).stdout
    assert f"out  SGLANG_X: settings file {s} [default]" in text


def test_status_labels_its_fingerprint(cli):
    """Status says which launch command its fingerprint is for, and how to get the
    real launch's; --json has the same in ``fingerprint_for``."""
    r = cli("status", "-s", str(REPO_SETTINGS))
    assert "for an empty launch command" in r.stdout and "dsv41-flags fingerprint -- CMD" in r.stdout
    data = json.loads(cli("status", "--json", "-s", str(REPO_SETTINGS)).stdout)
    assert data["fingerprint_for"]["argv"] == []
    assert "empty launch command" in data["fingerprint_for"]["label"]
    argv = ["python", "-m", "sglang.launch_server", "--tp", "4"]
    data = json.loads(cli("status", "--json", "-s", str(REPO_SETTINGS), "--", *argv).stdout)
    assert data["fingerprint_for"]["argv"] == argv
    fp = json.loads(cli("fingerprint", "--json", "-s", str(REPO_SETTINGS), "--", *argv).stdout)
    assert data["fingerprint"] == fp["fingerprint"]


def test_diff_profiles(cli, tmp_path):
    s = tmp_path / "s.toml"
    s.write_text(textwrap.dedent("""
        [default]
        autotune_keep_keep_old = 3
        [a]
        folded_fence = true
        [b]
        autotune_keep_keep_old = 5
    """))
    r = cli("diff", "a", "b", "--json", "-s", str(s))
    data = json.loads(r.stdout)
    assert {c["key"] for c in data["changes"]} == {"FOLDED_FENCE", "AUTOTUNE_KEEP_KEEP_OLD"}
    assert data["fingerprints_differ"] is False   # both keys are volatile: caches are reused


def test_check_reports_drifted_feature(cli, tmp_path):
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "drifty.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='drifty', target='json.decoder', install=print, summary='s', engine='',\n"
        "                  requires=('JSONDecoder.decode(s)', 'JSONDecoder.decode(nope)', 'Gone', 'scanstring'))\n")
    s = tmp_path / "settings.toml"
    s.write_text("[default]\n")
    r = cli("check", "--all", "--json", "-s", str(s))
    data = json.loads(r.stdout)
    assert r.exit_code == 1
    assert next(f for f in data["features"] if f["feature"] == "drifty")["missing"] == [
        "JSONDecoder.decode(nope)", "Gone"]
    r = cli("check", "-s", str(s))          # nothing armed: nothing checked
    assert r.exit_code == 0 and "none armed" in r.stdout


def test_validate_checks_every_profile(cli, tmp_path):
    s = tmp_path / "s.toml"
    s.write_text("[default]\nfolded_fence = false\n[tp4]\nfolded_fense = true\n")
    r = cli("validate", "--json", "-s", str(s))
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["profiles_checked"] == ["default", "tp4"]
    assert [p["profile"] for p in data["problems"]] == ["tp4"]
    assert "did you mean folded_fence?" in data["problems"][0]["message"]
    assert cli("validate", "--only", "-s", str(s)).exit_code == 0


def test_operator_minimal_settings_two_launches_one_fingerprint(cli, tmp_path):
    """Through the CLI: an operator's own settings.toml ([default], one flag, no
    fingerprint table); sglang writes a fresh SGLANG_RUN_ID per launch."""
    s = tmp_path / "settings.toml"
    s.write_text("[default]\nfolded_fence = true\n")
    argv = ["--", "python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "4"]
    a = json.loads(cli("fingerprint", "--json", "-s", str(s), *argv,
                       env={"SGLANG_RUN_ID": "sglang-run-1764480000.1-42"}).stdout)
    b = json.loads(cli("fingerprint", "--json", "-s", str(s), *argv,
                       env={"SGLANG_RUN_ID": "sglang-run-1764480999.7-7"}).stdout)
    assert a["fingerprint"] == b["fingerprint"]


def test_status_refuses_an_including_settings_file(cli, tmp_path):
    """Through the CLI: the file is refused, naming file [section], key, value."""
    s = tmp_path / "settings.toml"
    s.write_text('[default]\nfolded_fence = false\ndynaconf_include = ["extra.toml"]\n')
    (tmp_path / "extra.toml").write_text("[default]\nfolded_fence = true\n")
    r = cli("status", "--json", "-s", str(s))
    assert r.exit_code == 1
    msgs = [p["message"] for p in json.loads(r.stdout)["problems"]]
    assert any(f"{s} [default]: dynaconf_include = ['extra.toml']" in m for m in msgs), msgs


def test_engine_version_is_looked_up_once_per_name_and_path(monkeypatch):
    import importlib.metadata

    from dsv41_flags import Feature
    from dsv41_flags.drift import _installed_version, engine_version

    calls = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: calls.append(n) or real(n))
    _installed_version.cache_clear()
    f = Feature(name="pk", target="json", install=lambda m, c: None, summary="s",
                engine="packaging>=1")
    first = engine_version(f)
    assert first == real("packaging") and engine_version(f) == first and calls == ["packaging"]
    monkeypatch.syspath_prepend("/nonexistent-dsv41-path")   # another import path: asked again
    assert engine_version(f) == first and calls == ["packaging", "packaging"]
    _installed_version.cache_clear()


@pytest.mark.parametrize("key,var,bad", [("rank_guard", "DSV41_RANK_GUARD", "bogus"),
                                         ("strict", "DSV41_STRICT", "maybe"),
                                         ("DSV41_LOG_LEVEL", "DSV41_LOG_LEVEL", "loud")])
def test_explain_reserved_key_shows_the_chain_and_fails_on_an_invalid_layer(program_cli, key, var, bad):
    status = program_cli("status", env={var: bad})
    assert status.exit_code == 1
    r = program_cli("explain", key, env={var: bad})
    assert r.exit_code == 1, r.output
    assert f"env {var}: {bad!r}  <- INVALID: accepted:" in r.stdout
    assert "1. declared default:" in r.stdout and "<- wins" in r.stdout
    assert f"{var}={bad!r} (environment variable) is not a valid value" in r.stderr
    data = json.loads(program_cli("explain", key, "--json", env={var: bad}).stdout)
    [entry] = data["keys"].values()
    assert [layer["valid"] for layer in entry["layers"]][-1] is False
    assert data["problems"] and data["reserved"] == var.removeprefix("DSV41_")


def test_explain_valid_reserved_key_names_the_winning_layer(program, program_cli):
    program.settings.write_text('[default]\ndemo_fix = true\nrank_guard = "WARN"\n')
    r = program_cli("explain", "rank_guard")
    assert r.exit_code == 0, r.output
    assert "RANK_GUARD = 'warn'" in r.stdout and "[default]: 'WARN'  <- wins" in r.stdout


def test_explain_the_fingerprint_table_fails_on_an_invalid_value(program, program_cli):
    program.settings.write_text('[default]\ndemo_fix = true\n[default.fingerprint]\n'
                               'volatile = "SGLANG_X"\n')
    r = program_cli("explain", "fingerprint")
    assert r.exit_code == 1 and "fingerprint.volatile = 'SGLANG_X' is not a list" in r.stderr


def test_status_renders_no_engine(program_cli):
    r = program_cli("status")
    assert "[no engine range]: ok" in r.stdout and "[, installed" not in r.stdout


def test_cli_messages(program_cli, program, tmp_path):
    r = program_cli("run")
    assert r.exit_code == 2 and \
        "missing the command: dsv41-flags run [OPTIONS] -- CMD [ARGS]..." in r.stderr
    side = tmp_path / "x.launch"
    r = program_cli("fingerprint", "--write", str(side), "--", "python", "-c", "a")
    assert r.exit_code == 0 and f"wrote the sidecar {side}" in r.stderr and side.is_file()
    r = program_cli("fingerprint", "--diff", str(side), "--", "python", "-c", "b")
    assert r.exit_code == 1 and "  argv: ['-c', 'a'] -> ['-c', 'b']" in r.stdout
    assert "argv argv" not in r.stdout
    r = program_cli("fingerprint", "--diff", str(tmp_path / "missing.launch"))
    assert r.exit_code == 2 and r.stdout == ""
    assert "error: cannot compare:" in r.stderr and "missing.launch" in r.stderr


def test_check_engine_with_nothing_armed_fetches_nothing(program_cli, program, monkeypatch):
    import dsv41_flags.upgrade_gate.releases as release

    def no_fetch(*a, **k):
        raise AssertionError("a release was opened")

    monkeypatch.setattr(release, "open_release", no_fetch)
    program.settings.write_text("[default]\ndemo_fix = false\n")
    r = program_cli("check", "--engine", "sglang==0.5.99")
    assert r.exit_code == 0 and "no feature checked (none armed; use --all)" in r.stdout


@pytest.mark.parametrize("args", [[], ["--json"], ["--all"], ["--all", "--json"]])
@pytest.mark.parametrize("bad", [{"DSV41_FOLDED_FENCE": "maybe"}, {"DSV41_FOLDED_FENSE": "1"}])
def test_check_fails_on_a_settings_error_like_every_command(args, bad):
    """A CI gate running ``check`` must not pass on a broken launch: which features a boot arms is
    unknown when it would stop on its settings."""
    proc = run_cmd([CLI, "check", *args], clean_env(**bad), REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    if "--json" in args:
        data = json.loads(proc.stdout)
        var = next(iter(bad))
        assert data["ok"] is False and [p["key"] for p in data["problems"]] in ([var], [var[6:]])


def test_diff_and_write_same_sidecar_compares_the_old_one(tmp_path, monkeypatch):
    monkeypatch.delenv("DSV41_SNAPSHOT", raising=False)
    side = tmp_path / "x.launch"
    runner = CliRunner()
    assert runner.invoke(app, ["fingerprint", "-s", str(REPO_SETTINGS), "--write", str(side), "--",
                               "serve", "--tp", "4"]).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert side.stat().st_mode & 0o777 == 0o666 & ~umask      # not mkstemp's 0600
    r = runner.invoke(app, ["fingerprint", "-s", str(REPO_SETTINGS), "--diff", str(side),
                            "--write", str(side), "--json", "--", "serve", "--tp", "8"])
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["diff"]["same"] is False and data["diff"]["changes"]
    r = runner.invoke(app, ["fingerprint", "-s", str(REPO_SETTINGS), "--diff", str(tmp_path / "none")])
    assert r.exit_code == 2 and "cannot compare" in r.stderr and "cannot read" in r.stderr


def test_write_to_a_bad_place_is_a_clear_error(tmp_path):
    r = CliRunner().invoke(app, ["fingerprint", "-s", str(REPO_SETTINGS), "--write",
                                 str(tmp_path / "no" / "dir" / "x.launch")])
    assert r.exit_code == 1 and "cannot write the sidecar" in r.output


def test_status_exits_1_when_an_armed_feature_drifted_in_strict_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("DSV41_SNAPSHOT", raising=False)
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "zz.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='zz', "
                                 "target='json', install=print, summary='s', engine='', requires=('nope',))\n")
    s = tmp_path / "settings.toml"
    s.write_text("[default]\nzz = true\n")
    r = CliRunner().invoke(app, ["status", "-s", str(s)])
    assert r.exit_code == 1 and "missing: nope" in r.stdout
    s.write_text("[default]\nzz = true\nstrict = false\n")
    assert CliRunner().invoke(app, ["status", "-s", str(s)]).exit_code == 0


def test_explain_refuses_a_bad_value(monkeypatch):
    monkeypatch.setenv("DSV41_AUTOTUNE_KEEP_KEEP_OLD", "5.0")
    r = CliRunner().invoke(app, ["explain", "AUTOTUNE_KEEP_KEEP_OLD", "-s", str(REPO_SETTINGS)])
    assert r.exit_code == 1 and "DSV41_AUTOTUNE_KEEP_KEEP_OLD='5.0'" in r.stderr


# ------------------------------------------------------------------ help, option values, explain, drift of odd sources, validate
import subprocess  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402

from ._child import demo_launch  # noqa: E402


@pytest.fixture
def launch(tmp_path):
    """A target module, a features dir with one feature ``cap_new_tokens`` (options ``cap``,
    ``ratio``), settings and a clean env (``_child.demo_launch``)."""
    return demo_launch(tmp_path)

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


def test_option_values_and_sources_in_status(launch, cli):
    env = {"DSV41_SETTINGS": str(launch.settings), "DSV41_CAP_NEW_TOKENS_CAP": "7"}
    data = json.loads(cli("status", "--json", env=env).stdout)
    assert next(f for f in data["features"] if f["name"] == "cap_new_tokens")["options"]["cap"] == {"value": 7, "source": "env DSV41_CAP_NEW_TOKENS_CAP"}
    human = cli("status", env=env).stdout
    assert "option cap = 7  from env DSV41_CAP_NEW_TOKENS_CAP" in human
    assert "option ratio = 0.5  from declared default" in human


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


# ------------------------------------------------------------------ live-safe, where a feature comes from
def test_status_and_explain_say_whether_a_feature_is_live_safe(cli):
    r = cli("status", "-s", str(REPO_SETTINGS))
    lines = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.startswith("  ")
             and not line.startswith("    ")}
    assert lines["folded_fence"][3] == "live" and lines["autotune_keep"][3] == "boot", r.stdout
    rows = {f["name"]: f for f in json.loads(cli("status", "--json", "-s", str(REPO_SETTINGS)).stdout)["features"]}
    assert rows["folded_fence"]["live"] is True and rows["autotune_keep"]["live"] is False
    for name, live in (("folded_fence", True), ("autotune_keep", False)):
        data = json.loads(cli("explain", name, "--json", "-s", str(REPO_SETTINGS)).stdout)
        assert data["live"] is live
        text = cli("explain", name, "-s", str(REPO_SETTINGS)).stdout
        assert ("live-safe: yes" if live else "live-safe: no (its flag is read at boot only)") in text


def test_an_unknown_key_lists_each_feature_by_its_real_source(cli, launch):
    launch.settings.write_text("[default]\nfolded_fense = true\n")
    r = cli("validate", "--json", env={"DSV41_SETTINGS": str(launch.settings),
                                       "DSV41_FEATURES_DIR": str(launch.feats)})
    [problem] = [p for p in json.loads(r.stdout)["problems"] if "folded_fense" in p["message"]]
    message = problem["message"]
    assert "autotune_keep (shipped)" in message and "folded_fence (shipped)" in message
    assert f"cap_new_tokens (from {launch.feats})" in message
    assert "and installed" not in message and "(shipped, from" not in message


@pytest.mark.parametrize("fixed_in", [">=0.5.30", "<0.1"])
def test_an_armed_feature_whose_fix_is_not_upstream_yet_is_armed_in_every_command(cli, tmp_path, fixed_in):
    """``fixed_in`` that the installed engine is not in (writing-a-feature.md's own example): the
    feature is armed, never a traceback, in status, status --json, validate and explain."""
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "later_fix.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='later_fix', target='json', install=print, summary='s',\n"
        f"                  fixed_in={fixed_in!r})\n")
    s = tmp_path / "settings.toml"
    s.write_text("[default]\nlater_fix = true\n")
    data = json.loads(cli("status", "--json", "-s", str(s)).stdout)
    row = {f["name"]: f for f in data["features"]}["later_fix"]
    assert (row["state"], row["detail"]) == ("armed", "")
    r = cli("status", "-s", str(s))
    assert "later_fix" in r.stdout and "Traceback" not in r.output
    assert cli("validate", "-s", str(s)).exit_code in (0, 1)
    assert cli("explain", "later_fix", "-s", str(s)).exit_code == 0
