"""A second fresh user's trial from the README (issue 11 round): each finding is one instance of a
kind, kept as a test. 2: the ``settings_files`` argument of ``activate`` / ``build`` given one
path or a wrong type; a settings path with no file name (``/``); 3: ``flags.error`` of a direct
``activate()`` says the exception went to its caller (it does not stop the process)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_flags import SettingsError
from dsv41_flags._runtime import build

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("dsv41-flags"))


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(extra)
    return env


def _build(settings_files):
    return build(settings_files, None, environ=_env(), argv=["serve"], features_dir=REPO / "features",
                 use_snapshot=False, configure_logging=False)


@pytest.mark.parametrize("given", ["abs-str", "path", "rel-str", "tuple", "list-of-path"])
def test_one_settings_path_or_a_sequence_is_accepted(given, tmp_path, monkeypatch):
    settings = tmp_path / "s.toml"
    settings.write_text("[default]\nfolded_fence = true\n")
    monkeypatch.chdir(tmp_path)
    value = {"abs-str": str(settings), "path": settings, "rel-str": "s.toml", "tuple": (str(settings),),
             "list-of-path": [settings]}[given]
    rt = _build(value)
    assert rt.resolution.files == (str(settings.resolve()),)
    assert [f.name for f in rt.armed()] == ["folded_fence"]


@pytest.mark.parametrize("value", [42, b"/tmp/s.toml", {"a.toml"}, [1, 2], ["ok.toml", None]])
def test_a_wrong_settings_files_argument_is_a_settings_error_naming_it(value):
    with pytest.raises(SettingsError, match=r"settings_files=.* is not accepted: give one path"):
        _build(value)


@pytest.mark.parametrize("how", ["-s", "env"])
def test_a_settings_path_with_no_file_name_is_refused_cleanly(how):
    cmd = [CLI, "status"] + (["-s", "/"] if how == "-s" else [])
    proc = subprocess.run(cmd, env=_env(**({"DSV41_SETTINGS": "/"} if how == "env" else {})),
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "ValueError" not in proc.stderr
    assert "settings file / (named by" in proc.stderr and "is a directory" in proc.stderr


def test_direct_activate_failure_says_it_raised_to_the_caller(tmp_path):
    code = ("import dsv41_flags\n"
            "try:\n    dsv41_flags.activate()\n"
            "except Exception as exc:\n    print('caught', type(exc).__name__)\n"
            "print('still running')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=_env(DSV41_SETTINGS=str(REPO / "settings.toml"),
                                                 DSV41_FOLDED_FENCE="maybe", DSV41_LOG_FORMAT="json"))
    assert proc.returncode == 0 and "caught SettingsError" in proc.stdout and "still running" in proc.stdout
    (err,) = [json.loads(x) for x in proc.stderr.splitlines()
              if x.startswith("{") and json.loads(x)["event"] == "flags.error"]
    assert err["entry"] == "activate"
    assert err["outcome"].startswith("raised SettingsError to the caller of activate() (strict mode")
    assert "exit status" not in err["outcome"]


# ------------------------------------------------------------------ 1: check and settings errors
@pytest.mark.parametrize("args", [[], ["--json"], ["--all"], ["--all", "--json"]])
@pytest.mark.parametrize("bad", [{"DSV41_FOLDED_FENCE": "maybe"}, {"DSV41_FOLDED_FENSE": "1"}])
def test_check_fails_on_a_settings_error_like_every_command(args, bad):
    """A CI gate running ``check`` must not pass on a broken launch: which features a boot arms is
    unknown when it would stop on its settings."""
    proc = subprocess.run([CLI, "check", *args], env=_env(**bad), capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    if "--json" in args:
        data = json.loads(proc.stdout)
        var = next(iter(bad))
        assert data["ok"] is False and [p["key"] for p in data["problems"]] in ([var], [var[6:]])


# --------------------------------------------------------- 5: set / status --url refuse locally
@pytest.mark.parametrize("args,needle", [
    (["set", "folded_fence=maybe", "--url", "http://127.0.0.1:9"], "the value is not one of"),
    (["set", "folded_fence=", "--url", "http://127.0.0.1:9"], "the value is not one of"),
    (["set", "folded_fence=on", "--url", "127.0.0.1:30000"], "write --url http://127.0.0.1:30000"),
    (["status", "--url", "127.0.0.1:30000"], "write --url http://127.0.0.1:30000"),
    (["status", "--url", "ftp://h:1"], "is not an http:// URL"),
])
def test_set_and_remote_status_refuse_what_no_server_could_take_before_sending(args, needle):
    proc = subprocess.run([CLI, *args], env=_env(), capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2 and needle in proc.stderr and "cannot reach" not in proc.stderr


def test_remote_status_with_no_rank_answering_does_not_claim_agreement():
    proc = subprocess.run([CLI, "status", "--url", "http://127.0.0.1:9", "--json"], env=_env(),
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["ok"] is False and data["generations_agree"] is None


@pytest.mark.parametrize("summary", [None, 3, ("a",), b"x"])
def test_a_summary_that_is_not_text_is_a_declaration_error(summary):
    from dsv41_flags import DeclarationError, Feature

    with pytest.raises(DeclarationError, match=r"feature 'x': summary must be a str \(one line\), got"):
        Feature(name="x", target="json", install=lambda m, c: None, summary=summary, engine="")
