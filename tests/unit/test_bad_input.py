"""Bad input found by trying the tool as a new user: each gets a clear error, nothing silent."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dsv41_flags import DeclarationError, SettingsError, SnapshotError
from dsv41_flags.cache_keeping import read_sidecar
from dsv41_flags.cli import app
from dsv41_flags.discovery import discover
from dsv41_flags.fingerprint import normalize_argv
from dsv41_flags.runtime import build
from dsv41_flags.settings import find_settings_files
from dsv41_flags.values import CastError, cast

from ..conftest import FEATURES_DIR, REPO_SETTINGS


def test_dynaconf_own_variables_are_ignored_and_reported(make_runtime, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text("[default]\nfolded_fence = true\n")
    rt = make_runtime("[default]\n", env={"DYNACONF_FOLDED_FENCE": "1", "DYNACONF_STRICT": "false",
                                          "SETTINGS_FILE_FOR_DYNACONF": str(other),
                                          "ENVIRONMENTS_FOR_DYNACONF": "false", "ENV_FOR_DYNACONF": "tp4"})
    assert rt.resolution.values["FOLDED_FENCE"].value is False
    assert rt.resolution.values["FOLDED_FENCE"].source == "declared default"
    assert rt.resolution.strict is True
    note = " ".join(rt.resolution.notes)
    for name in ("DYNACONF_FOLDED_FENCE", "SETTINGS_FILE_FOR_DYNACONF", "ENV_FOR_DYNACONF"):
        assert name in note


@pytest.mark.parametrize("name,content,needle", [
    ("s.TOML", "[default]\n", "not a *.toml file"),
    ("s.ini", "[default]\n", "not a *.toml file"),
    ("settings.toml", "folded_fence = true\n[tp4]\n", "'folded_fence' outside any section"),
    ("settings.toml", "[global]\nfolded_fence = true\n", "[global] section"),
    ("settings.toml", b"\xff\xfe[default]\n", "not UTF-8"),
    ("settings.toml", "[default]\nfolded_fence = \n", "not valid TOML"),
])
def test_settings_file_problems(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SettingsError) as exc:
        find_settings_files([path], {}, cwd=tmp_path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_bad_local_companion_is_named(tmp_path):
    (tmp_path / "settings.toml").write_text("[default]\n")
    (tmp_path / "settings.local.toml").write_text("[default]\nfolded_fence = \n")
    with pytest.raises(SettingsError) as exc:
        find_settings_files([tmp_path / "settings.toml"], {}, cwd=tmp_path)
    assert "settings.local.toml" in str(exc.value) and "not valid TOML" in str(exc.value)


def test_unknown_fingerprint_setting(make_runtime):
    with pytest.raises(SettingsError, match="fingerprint.prefix is not a fingerprint setting.*did you mean prefixes"):
        make_runtime('[default.fingerprint]\nprefix = ["X_"]\n')


@pytest.mark.parametrize("raw", ["1_0", "\u0663", "1.0", "0x10", ""])
def test_integers_are_plain_ascii_digits(raw):
    with pytest.raises(CastError):
        cast("int", raw)


@pytest.mark.parametrize("raw", ["\u0661.5", "1_0.5", "nan", "1e"])
def test_floats_are_plain_ascii(raw):
    with pytest.raises(CastError):
        cast("float", raw)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"[1, 2]", b'{"payload": {}}', b"", b"null"])
def test_any_sidecar_content_reads_as_a_mismatch_never_raises(tmp_path, content):
    (tmp_path / "x.launch").write_bytes(content)
    side = read_sidecar(tmp_path / "x.launch")
    assert side.payload is None and "not a sidecar" in side.error


def _mod_path(tmp_path):
    pkg = tmp_path / "engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("")
    return pkg / "launch_server.py"


def test_normalize_argv(tmp_path, monkeypatch):
    script = _mod_path(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    typed = ["python3", "-u", "-m", "engine_pkg.launch_server", "--tp", "4"]
    as_sys_argv = [str(script), "--tp", "4"]
    full_python = [sys.executable, str(script), "--tp", "4"]
    assert normalize_argv(typed) == normalize_argv(as_sys_argv) == normalize_argv(full_python) == \
        ["engine_pkg.launch_server", "--tp", "4"]


def test_feature_module_exiting_is_a_declaration_error(tmp_path):
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(DeclarationError, match="bad.py.*SystemExit"):
        discover(tmp_path, entry_points=False)


@pytest.mark.parametrize("after,needle", [("'nope'", "no known feature"), ("'me'", "itself")])
def test_after_must_name_another_known_feature(tmp_path, after, needle):
    (tmp_path / "me.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='me', "
                                    f"target='json', install=print, summary='s', after=({after},))\n")
    with pytest.raises(DeclarationError, match=needle):
        discover(tmp_path, entry_points=False)


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


def test_run_missing_command_exits_127():
    cli = str(Path(sys.executable).with_name("dsv41-flags"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    proc = subprocess.run([cli, "run", "-s", str(REPO_SETTINGS), "--", "no_such_cmd_xyz"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127 and "command not found: no_such_cmd_xyz" in proc.stderr
    assert "Traceback" not in proc.stderr


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


def test_child_variable_disagreeing_with_snapshot_is_reported(make_runtime):
    parent = make_runtime(None, env={"DSV41_FOLDED_FENCE": "1"})
    child = build(None, None, environ={"DSV41_SNAPSHOT": parent.snapshot(), "DSV41_FOLDED_FENCE": "0",
                                       "DSV41_ENV": "tp4"}, argv=[], configure_logging=False)
    assert child.value(child.features["folded_fence"]) is True       # the snapshot wins...
    notes = " ".join(child.snapshot_notes)                            # ...and says so
    assert "DSV41_FOLDED_FENCE='0'" in notes and "DSV41_ENV='tp4'" in notes
    with pytest.raises(SnapshotError, match="not JSON"):          # strict: refused, never ignored
        build(None, None, environ={"DSV41_SNAPSHOT": "{not json"}, argv=[],
              configure_logging=False, features_dir=FEATURES_DIR)
    garbage = build(None, None, environ={"DSV41_SNAPSHOT": "{not json", "DSV41_STRICT": "0"},
                    argv=[], configure_logging=False, features_dir=FEATURES_DIR)
    assert not garbage.from_snapshot and "not JSON" in garbage.snapshot_refused


def test_classmethod_and_staticmethod_keep_their_kind():
    from dsv41_flags.patch import Ledger

    class C:
        @classmethod
        def cm(cls, x):
            return (cls.__name__, x)

        @staticmethod
        def sm(x):
            return x * 2

    class D(C):
        pass

    ledger = Ledger()
    ledger.patch("f", C, "cm", lambda orig: (lambda cls, x: ("w",) + orig(cls, x)))
    ledger.patch("f", C, "sm", lambda orig: (lambda x: orig(x) + 1))
    assert (C.cm(1), D.cm(2), C().cm(3)) == (("w", "C", 1), ("w", "D", 2), ("w", "C", 3))
    assert (C.sm(2), C().sm(2)) == (5, 5)
    ledger.patch("f", C, "cm", lambda orig: (lambda cls, x: ("w",) + orig(cls, x)))
    assert C.cm(1) == ("w", "C", 1)                                    # one wrapper level
    ledger.uninstall("f")
    assert (C.cm(1), C().sm(2)) == (("C", 1), 4)


@pytest.mark.parametrize("line", ['volatile = 5', 'volatile = "SGLANG_RUN_ID"', 'prefixes = [""]',
                                  'volatile_argv = [1]'])
def test_fingerprint_lists_are_strict(make_runtime, tmp_path, line):
    with pytest.raises(SettingsError) as exc:
        make_runtime(f"[default.fingerprint]\n{line}\n")
    assert f"{tmp_path / 'settings.toml'} [default]" in str(exc.value)
    assert "list of non-empty strings" in str(exc.value)


def test_after_cycle_is_a_declaration_error(tmp_path):
    for me, other in (("fa", "fb"), ("fb", "fa")):
        (tmp_path / f"{me}.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature("
                                           f"name='{me}', target='json', install=print, summary='s', "
                                           f"after=('{other}',))\n")
    with pytest.raises(DeclarationError, match="forms a cycle: fa -> fb -> fa"):
        discover(tmp_path, entry_points=False)


def test_option_equals_spelling_gives_the_same_fingerprint():
    assert normalize_argv(["python", "-m", "x", "--tp=4", "--name", "a=b"]) == \
        normalize_argv(["python", "-m", "x", "--tp", "4", "--name", "a=b"]) == \
        ["x", "--tp", "4", "--name", "a=b"]


def test_leftover_snapshot_is_reported(make_runtime):
    parent = make_runtime(None, env={"DSV41_FOLDED_FENCE": "1"})
    child = build(None, None, environ={"DSV41_SNAPSHOT": parent.snapshot()}, argv=[],
                  configure_logging=False)
    assert any("DSV41_FOLDED_FENCE is not set here" in n for n in child.snapshot_notes)


def test_explain_refuses_a_bad_value(monkeypatch):
    monkeypatch.setenv("DSV41_AUTOTUNE_KEEP_KEEP_OLD", "5.0")
    r = CliRunner().invoke(app, ["explain", "AUTOTUNE_KEEP_KEEP_OLD", "-s", str(REPO_SETTINGS)])
    assert r.exit_code == 1 and "DSV41_AUTOTUNE_KEEP_KEEP_OLD='5.0'" in r.stderr


def test_second_activate_with_other_arguments_warns():
    code = ("import dsv41_flags, json\n"
            "a = dsv41_flags.activate()\n"
            "b = dsv41_flags.activate(profile='tp4')\n"
            "print(a is b, a.resolution.profile)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(REPO_SETTINGS), DSV41_LOG_FORMAT="json")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["True", "default"]
    assert any(json.loads(line)["event"] == "activate.arguments_ignored"
               for line in proc.stderr.splitlines() if line.startswith("{"))


def test_nested_variables_are_refused(make_runtime):
    with pytest.raises(SettingsError, match="DSV41_FINGERPRINT__PREFIXES: nested settings cannot be set"):
        make_runtime(None, env={"DSV41_FINGERPRINT__PREFIXES": "SGLANG_"})


def test_script_name_is_the_same_typed_or_in_process(tmp_path, monkeypatch):
    (tmp_path / "serve.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert normalize_argv(["python", "serve.py", "--tp", "2"]) == \
        normalize_argv([str(tmp_path / "serve.py"), "--tp", "2"]) == ["serve", "--tp", "2"]


def test_reinstalling_a_classmethod_patch_is_not_drift(tmp_path, monkeypatch, make_runtime):
    (tmp_path / "cm_target.py").write_text(
        "class Loader:\n    @classmethod\n    def build(cls, *, strict=False):\n        return strict\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "cm_fix.py").write_text(
        "from dsv41_flags import Feature\n"
        "def install(module, ctx):\n"
        "    ctx.patch(module.Loader, 'build', lambda orig: (lambda cls, **kw: not orig(cls, **kw)))\n"
        "FEATURE = Feature(name='cm_fix', target='cm_target', install=install, summary='s', engine='',\n"
        "                  requires=('Loader.build(strict)',))\n")
    rt = make_runtime("[default]\ncm_fix = true\n", features_dir=feats)
    rt.arm()
    import cm_target
    assert rt.install(rt.features["cm_fix"], cm_target).state == "installed"
    assert cm_target.Loader.build(strict=False) is True
    sys.modules.pop("cm_target", None)


def test_uninstall_under_another_patch_is_reported(tmp_path, monkeypatch, make_runtime):
    (tmp_path / "stack_target.py").write_text("class C:\n    def p(self):\n        return 'p'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    for name, tag, after in (("a_fix", "A", ""), ("b_fix", "B", "after=('a_fix',)")):
        (feats / f"{name}.py").write_text(
            "from dsv41_flags import Feature\n"
            "def install(module, ctx):\n"
            f"    ctx.patch(module.C, 'p', lambda orig: (lambda self: ({tag!r}, orig(self))))\n"
            f"FEATURE = Feature(name={name!r}, target='stack_target', install=install, summary='s',"
            f" engine='', {after})\n")
    rt = make_runtime("[default]\na_fix = true\nb_fix = true\n", features_dir=feats)
    rt.arm()
    import stack_target
    from structlog.testing import capture_logs
    with capture_logs() as logs:
        rt.uninstall("a_fix")
    assert stack_target.C().p() == ("B", ("A", "p"))
    assert {s.name: s.state for s in rt.states() if s.name.endswith("_fix")} == {
        "a_fix": "installed", "b_fix": "installed"}
    assert [e["above"] for e in logs if e["event"] == "feature.uninstall_blocked"] == [["b_fix"]]
    rt.uninstall()
    assert stack_target.C().p() == "p"
    assert {s.name: s.state for s in rt.states() if s.name.endswith("_fix")} == {
        "a_fix": "uninstalled", "b_fix": "uninstalled"}
    sys.modules.pop("stack_target", None)
