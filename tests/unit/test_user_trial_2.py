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
from dsv41_flags.runtime import build

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


# --------------------------------------------- a final attack on these fixes (each one a kind)
def test_the_engine_plugin_entry_imports_nothing_of_the_package_at_module_level():
    """sglang's loader imports the entry's module before calling it and swallows what that import
    raises: the entry is ``_plugin.load``, whose module imports nothing, so a broken room is
    reported and stops the process instead of booting unpatched."""
    import ast
    import importlib.metadata

    (ep,) = [e for e in importlib.metadata.entry_points(group="sglang.srt.plugins") if e.name == "dsv41_flags"]
    assert ep.value == "dsv41_flags_plugin:load"
    tree = ast.parse((REPO / "src" / "dsv41_flags_plugin.py").read_text())
    imported = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "os", "sys"}  # the standard library only
    code = ("import sys, importlib.metadata as m\n"
            "sys.modules['dsv41_flags.engines'] = None\n"
            "ep = [e for e in m.entry_points(group='sglang.srt.plugins') if e.name == 'dsv41_flags'][0]\n"
            "ep.load()()\nprint('BOOTED')\n")
    for strict, code_expected in ((None, 3), ("0", 0)):
        env = _env(**({"DSV41_STRICT": strict} if strict else {}))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == code_expected and proc.stderr.count("flags.error") == 1, proc.stderr
        assert ("BOOTED" in proc.stdout) == (code_expected == 0) and "Traceback" not in proc.stderr


@pytest.mark.parametrize("stderr", ["closed", "full"])
def test_a_package_that_cannot_load_still_stops_with_stderr_closed_or_full(stderr):
    code = ("import sys\n"
            + ("sys.stderr = None\n" if stderr == "closed" else "sys.stderr = open('/dev/full', 'w')\n")
            + "sys.modules['dsv41_flags.activation'] = None\n"
            "import dsv41_flags_plugin as p\n"
            "try:\n    p.load()\nexcept SystemExit as exc:\n    print('exit', exc.code)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    # 120: the interpreter's own flush of the /dev/full stream at exit, after the test's print
    assert proc.returncode in (0, 120) and proc.stdout.strip() == "exit 3", (proc.stdout, proc.stderr)


@pytest.mark.parametrize("url", ["http://a b", "http://127.0.0.1:abc", "http://:80", "http://user@",
                                 "http://127.0.0.1:99999", "http://127.0.0.1:9?a=b#c", " http://127.0.0.1:9",
                                 "http://127.0.0.1:9\n", "http://[::1", "file:///etc/passwd",
                                 "http://" + "a" * 70 + ".com"])
def test_a_url_no_server_could_have_is_refused_before_sending(url):
    for args in (["set", "folded_fence=on", "--url", url, "--json"], ["status", "--url", url, "--json"]):
        proc = subprocess.run([CLI, *args], env=_env(), capture_output=True, text=True, timeout=60, cwd=REPO)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        data = json.loads(proc.stdout)
        assert data["ok"] is False and "is not an http:// URL of the engine server" in data["error"]


def test_hostile_settings_files_arguments_are_settings_errors():
    class Raises(os.PathLike):
        def __fspath__(self):
            raise RuntimeError("boom")

    class Bytes(os.PathLike):
        def __fspath__(self):
            return b"/x.toml"

    class BadRepr(list):
        def __repr__(self):
            raise RuntimeError("repr boom")

    for value in (Raises(), [Raises()], Bytes(), [Bytes()], BadRepr([1])):
        with pytest.raises(SettingsError, match="is not accepted: give one path"):
            _build(value)
