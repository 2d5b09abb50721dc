"""Dynaconf's special forms and Dynaconf's own variables: refused or ignored, each named, so no
file or variable changes a value or the fingerprint without being listed (docs/settings.md,
"What Dynaconf does and what is ours")."""
import tempfile
from pathlib import Path

import pytest

from dsv41_flags import SettingsError
from dsv41_flags.assembly import build
from dsv41_flags.settings_files import find_settings_files

from ._child import REPO


SPECIALS = [
    ('[default]\ndynaconf_include = ["extra.toml"]\n', "dynaconf_include", "[default]"),
    ('dynaconf_include = ["extra.toml"]\n[default]\n', "dynaconf_include", ""),
    ('[default]\n[tp4]\ndynaconf_merge = true\n', "dynaconf_merge", "[tp4]"),
    ('[default.fingerprint]\ndynaconf_merge_unique = true\n', "fingerprint.dynaconf_merge_unique",
     "[default]"),
    ('[default.fingerprint]\nvolatile = ["dynaconf_merge", "X"]\n', "fingerprint.volatile[0]",
     "[default]"),
    ('[default]\nfolded_fence = "@bool true"\n', "folded_fence", "[default]"),
    ('[default]\nfeatures_dir = "@format {env[HOME]}/f"\n', "features_dir", "[default]"),
    ('[tp3]\nexternal = ["@jinja {{ this.X }}"]\n', "external[0]", "[tp3]"),
    ('[default]\nexternal = "@merge A,B"\n', "external", "[default]"),
    ('[default]\nautotune_keep_keep_old = "@del"\n', "autotune_keep_keep_old", "[default]"),
    ('[default.fingerprint]\nvolatile = ["@insert 0 SGLANG_X"]\n', "fingerprint.volatile[0]",
     "[default]"),
    ('[default]\nsettings_files_for_dynaconf = ["x.toml"]\n', "settings_files_for_dynaconf",
     "[default]"),
    ('[default]\n"fingerprint.prefixes" = ["X_"]\n', "fingerprint.prefixes", "[default]"),
    ('[default]\nfingerprint__prefixes = ["X_"]\n', "fingerprint__prefixes", "[default]"),
    ('[tp4]\na = { b = { c = "@format x" } }\n', "a.b.c", "[tp4]"),
]


@pytest.mark.parametrize("text,key,section", SPECIALS)
def test_dynaconf_specials_refused_everywhere(make_runtime, tmp_path, text, key, section):
    """Every Dynaconf special (control keys, list markers, @ tokens, split keys), in
    every section and at every depth, is refused with the file [section], key, value and what
    is accepted: no file changes the fingerprint without being listed as loaded."""
    (tmp_path / "extra.toml").write_text('[default.fingerprint]\nprefixes = ["EXTRA_"]\n')
    with pytest.raises(SettingsError) as exc:
        make_runtime(text)
    msg = str(exc.value)
    path = tmp_path / "settings.toml"
    assert f"{path} {section}".strip() + ": " + key in msg, msg
    assert "refused" in msg and "accepted:" in msg and "DSV41_SETTINGS" in msg


def test_included_file_is_never_applied():
    """The included file's prefixes cannot reach the fingerprint because
    the including file is refused before Dynaconf loads it."""
    with tempfile.TemporaryDirectory() as d:
        main = Path(d) / "settings.toml"
        main.write_text('[default]\nfolded_fence = false\ndynaconf_include = ["extra.toml"]\n')
        (Path(d) / "extra.toml").write_text('[default.fingerprint]\nprefixes = ["EXTRA_"]\n')
        with pytest.raises(SettingsError, match="dynaconf_include"):
            find_settings_files([main])


@pytest.mark.parametrize("strict", ["true", "false"])
@pytest.mark.parametrize("var", ["DSV41_DYNACONF_INCLUDE", "DSV41_INCLUDES_FOR_DYNACONF",
                                 "DSV41_DYNACONF_MERGE"])
def test_dynaconf_specials_through_variables_refused(make_runtime, tmp_path, var, strict):
    """Through the environment: DSV41_DYNACONF_INCLUDE would make Dynaconf load a file
    that is not listed; an error even when strict mode is off."""
    extra = tmp_path / "extra.toml"
    extra.write_text('[default.fingerprint]\nprefixes = ["EXTRA_"]\n')
    with pytest.raises(SettingsError, match=f"{var}=.*refused"):
        make_runtime(f"[default]\nstrict = {strict}\n", env={var: str(extra)})


def test_dynaconf_tokens_are_not_interpreted(make_runtime):
    with pytest.raises(SettingsError, match="'@del'"):
        make_runtime("[default]\n", env={"DSV41_FOLDED_FENCE": "@del"})


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


@pytest.mark.parametrize("name,value,changed", [
    ("SETTINGS_FILE_FOR_DYNACONF", "{other}", "settings_file="),
    ("INCLUDES_FOR_DYNACONF", "{other}", "includes='{other}' instead of []"),
    ("ENVIRONMENTS_FOR_DYNACONF", "false", "environments=False instead of True"),
    ("MERGE_ENABLED_FOR_DYNACONF", "false", "merge_enabled=False instead of True"),
    ("LOADERS_FOR_DYNACONF", '["dynaconf.loaders.env_loader"]', "loaders="),
])
def test_a_dynaconf_option_variable_of_the_process_is_refused(tmp_path, monkeypatch, name, value, changed):
    """Dynaconf takes its options from the process's variables over its arguments, and no public
    option turns that off: a variable that would change the files or profiles read is an error
    naming it and what it changed, never a resolution from files that are not listed."""
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nfolded_fence = false\n[tp4]\nfolded_fence = true\n")
    other = tmp_path / "other.toml"
    other.write_text("[default]\nfolded_fence = true\n")
    monkeypatch.setenv(name, value.format(other=other))
    with pytest.raises(SettingsError) as exc:
        build([settings], "tp4", environ={}, features_dir=REPO / "features", use_snapshot=False,
              configure_logging=False)
    [problem] = exc.value.problems
    assert f"{name}=" in problem.message and changed.format(other=other) in problem.message
    assert "accepted:" in problem.message and "DSV41_SETTINGS" in problem.message


def test_fingerprint_table_through_a_variable_is_refused_not_ignored(make_runtime):
    """Dynaconf's env loader is off (the variable layer is read from the mapping given), so
    ``DSV41_FINGERPRINT`` would be silently unread: it is an error naming the variable and where to
    set the table instead."""
    with pytest.raises(SettingsError, match=r"DSV41_FINGERPRINT.*\[default.fingerprint\]"):
        make_runtime("[default]\n", env={"DSV41_FINGERPRINT": '{volatile = ["X"]}'})


def test_a_dynaconf_hooks_module_beside_a_settings_file_is_refused(make_runtime, tmp_path):
    """Dynaconf imports and runs ``dynaconf_hooks.py`` beside a file it loaded: refused before."""
    hooks = tmp_path / "dynaconf_hooks.py"
    hooks.write_text("def post(settings):\n    return {'FOLDED_FENCE': True}\n")
    with pytest.raises(SettingsError, match=r"dynaconf_hooks.py beside it, which Dynaconf would import"):
        make_runtime("[default]\n")
