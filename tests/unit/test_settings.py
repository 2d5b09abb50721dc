"""Resolution: profiles, files, variables, provenance, unknown keys; settings files and
the ``settings_files`` argument refused with a SettingsError naming them, never a hang."""
import json
import os
import sys
import threading

import pytest

from dsv41_flags import SettingsError
from dsv41_flags.assembly import build
from dsv41_flags.settings_files import find_settings_files

from ._bounded import no_block
from ._child import CLI, REPO, clean_env, parent, run_cmd

BASE = """
[default]
folded_fence = false
autotune_keep = false
[default.fingerprint]
volatile = ["SGLANG_RUN_ID"]
prefixes = ["SGLANG_", "DSV41_"]
[tp3]
folded_fence = true
[tp3.fingerprint]
volatile = ["DSV41_X"]
[tp4]
autotune_keep = true
"""


def test_env_variable_overrides_with_source(make_runtime):
    rt = make_runtime(BASE, env={"DSV41_FOLDED_FENCE": "1", "DSV41_AUTOTUNE_KEEP": "1"})
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is True and ff.source == "env DSV41_FOLDED_FENCE"
    assert [s for s, _ in ff.chain][0] == "declared default"
    assert ff.chain[-1] == ("env DSV41_FOLDED_FENCE", "1")
    assert [f.name for f in rt.armed()] == ["autotune_keep", "folded_fence"]


@pytest.mark.parametrize("raw,expected", [("off", False), ("False", False), (" yes ", True),
                                          ("", False), ("ON", True), ("0", False)])
def test_flag_words_through_variables(make_runtime, raw, expected):
    rt = make_runtime(BASE, env={"DSV41_FOLDED_FENCE": raw})
    assert rt.resolution.values["FOLDED_FENCE"].value is expected


def test_bad_flag_value_is_an_error_naming_variable_value_and_words(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_FOLDED_FENCE": "maybe"})
    msg = str(exc.value)
    assert "DSV41_FOLDED_FENCE='maybe'" in msg and "environment variable" in msg
    assert "on/off" in msg and "yes/no" in msg


def test_bad_value_in_file_names_file_and_section(make_runtime, tmp_path):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE.replace("[tp4]\n", "[tp4]\nfolded_fence = \"sometimes\"\n"), profile="tp4")
    assert f"folded_fence = \"sometimes\" ({tmp_path / 'settings.toml'} [tp4])" in str(exc.value)


def test_profile_section_overrides_default(make_runtime, tmp_path):
    rt = make_runtime(BASE, profile="tp3")
    r = rt.resolution.values["FOLDED_FENCE"]
    assert r.value is True and r.source == f"{tmp_path / 'settings.toml'} [tp3]"
    assert rt.resolution.profile == "tp3"


def test_profile_from_dsv41_env_and_stray_env_for_dynaconf_ignored(make_runtime):
    rt = make_runtime(BASE, env={"DSV41_ENV": "tp4", "ENV_FOR_DYNACONF": "tp3"})
    assert rt.resolution.profile == "tp4"
    assert rt.resolution.values["AUTOTUNE_KEEP"].value is True
    assert rt.resolution.values["FOLDED_FENCE"].value is False
    assert any("ENV_FOR_DYNACONF" in n for n in rt.resolution.notes)


def test_unknown_profile_lists_profiles(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_ENV": "tp8"})
    assert "'tp8'" in str(exc.value) and "default, tp3, tp4" in str(exc.value)


def test_nested_tables_merge_key_by_key(make_runtime):
    rt = make_runtime(BASE, profile="tp3")
    fp = rt.resolution.reserved["FINGERPRINT"]
    assert fp["prefixes"] == ("SGLANG_", "DSV41_")          # kept from [default]
    assert set(fp["volatile"]) == {"SGLANG_RUN_ID", "DSV41_X"}  # the profile adds to the list


def test_local_file_overrides(make_runtime, tmp_path):
    (tmp_path / "settings.local.toml").write_text("[default]\nfolded_fence = true\n")
    rt = make_runtime(BASE)
    r = rt.resolution.values["FOLDED_FENCE"]
    assert r.value is True and "settings.local.toml [default]" in r.source
    assert str(tmp_path / "settings.local.toml") in rt.resolution.files


def test_explicit_missing_settings_file_is_an_error(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(SettingsError) as exc:
        find_settings_files(None, {"DSV41_SETTINGS": str(missing)}, cwd=tmp_path)
    assert str(missing) in str(exc.value) and "DSV41_SETTINGS" in str(exc.value)


def test_invalid_toml_is_an_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[default\nx=")
    with pytest.raises(SettingsError, match="not valid TOML"):
        find_settings_files([bad], {}, cwd=tmp_path)


def test_default_search_prefers_current_directory(tmp_path):
    (tmp_path / "settings.toml").write_text("[default]\n")
    files, how = find_settings_files(None, {}, cwd=tmp_path)
    assert files == [tmp_path / "settings.toml"] and how == "current directory"


def test_unknown_variable_suggests_closest_and_is_error_in_strict(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_FOLDED_FENSE": "1"})
    assert "did you mean DSV41_FOLDED_FENCE?" in str(exc.value)


def test_unknown_keys_are_warnings_when_not_strict(make_runtime):
    rt = make_runtime(BASE.replace("[default]\n", "[default]\nstrict = false\nfolded_fense = true\n"),
                      env={"DSV41_AUTOTUNE_KEP": "1", "dsv41_folded_fence": "1"})
    warnings = [p.message for p in rt.resolution.warnings]
    assert any("DSV41_AUTOTUNE_KEP" in w and "did you mean DSV41_AUTOTUNE_KEEP?" in w for w in warnings)
    assert any("'folded_fense'" in w and "did you mean folded_fence?" in w for w in warnings)
    assert any("dsv41_folded_fence is lower-case" in w for w in warnings)
    assert rt.resolution.values["FOLDED_FENCE"].value is False   # the lower-case one is not read


def test_reserved_names_are_never_flags(make_runtime):
    rt = make_runtime(BASE, env={"DSV41_ENV": "default", "DSV41_SETTINGS": "x", "DSV41_SNAPSHOT": "{}",
                                 "DSV41_LOG_FORMAT": "json", "DSV41_STRICT": "1"})
    assert not rt.resolution.problems
    assert rt.resolution.reserved["LOG_FORMAT"] == "json"


def test_every_problem_listed_at_once(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_FOLDED_FENCE": "maybe", "DSV41_AUTOTUNE_KEEP_KEEP_OLD": "0",
                                "DSV41_NOPE": "1"})
    assert len(exc.value.problems) == 3


def test_option_bounds_through_variable(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_AUTOTUNE_KEEP_KEEP_OLD": "1000"})
    assert "DSV41_AUTOTUNE_KEEP_KEEP_OLD='1000'" in str(exc.value) and "[1, 100]" in str(exc.value)
    rt = make_runtime(BASE, env={"DSV41_AUTOTUNE_KEEP_KEEP_OLD": " 7 "})
    assert rt.options(rt.features["autotune_keep"]) == {"keep_old": 7}


# ------------------------------------------------------------------ property: never a stray exception
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

ENV_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=ENV_TEXT, keep=ENV_TEXT)
def test_any_variable_text_resolves_or_gives_the_documented_error(make_runtime, flag, keep):
    try:
        rt = make_runtime(BASE, env={"DSV41_FOLDED_FENCE": flag, "DSV41_AUTOTUNE_KEEP_KEEP_OLD": keep})
    except SettingsError as exc:
        for p in exc.problems:
            assert p.origin.startswith("env DSV41_") and "accepted:" in p.message
    else:
        assert isinstance(rt.resolution.values["FOLDED_FENCE"].value, bool)
        assert 1 <= rt.options(rt.features["autotune_keep"])["keep_old"] <= 100


# ------------------------------------------------------------------ did you mean
RESERVED_VARS = sorted(f"DSV41_{k}" for k in ("ENV", "SETTINGS", "SNAPSHOT", "STRICT", "FEATURES_DIR",
                                               "LOG_FORMAT", "LOG_LEVEL", "RANK_GUARD", "EXTERNAL",
                                               "FINGERPRINT"))


@pytest.mark.parametrize("name,candidates,expected", [
    # the shared prefix never makes two names alike: nothing resembles the part after it
    ("DSV41_FOLDED_FENCE", RESERVED_VARS + ["DSV41_MY_FIX"], ""),
    ("DSV41_FOO", RESERVED_VARS + ["DSV41_MY_FIX"], ""),
    ("DSV41_FO", RESERVED_VARS, ""),
    # a name that resembles the part after the prefix is suggested whole
    ("DSV41_FOLDED_FENSE", RESERVED_VARS + ["DSV41_FOLDED_FENCE"], "; did you mean DSV41_FOLDED_FENCE?"),
    ("DSV41_LOGLEVEL", RESERVED_VARS, "; did you mean DSV41_LOG_LEVEL?"),
    ("DSV41_STRCT", RESERVED_VARS, "; did you mean DSV41_STRICT?"),
    ("dsv41_my_fx", RESERVED_VARS + ["DSV41_MY_FIX"], "; did you mean DSV41_MY_FIX?"),
    # settings keys (no prefix) and other names: the same rule
    ("folded_fense", ["folded_fence", "log_level"], "; did you mean folded_fence?"),
    ("prefix", ["prefixes", "volatile", "volatile_argv"], "; did you mean prefixes?"),
    ("foo", ["env", "log_level"], ""),
])
def test_did_you_mean_compares_the_part_after_the_prefix(name, candidates, expected):
    from dsv41_flags.names import suggest

    assert suggest(name, candidates) == expected


def test_unknown_variable_suggests_nothing_when_nothing_resembles_it(make_runtime):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE, env={"DSV41_FOO": "1"})
    message = str(exc.value)
    assert "DSV41_FOO matches no flag, option or reserved name" in message
    assert "did you mean" not in message


# ------------------------------------------------------------------ the shipped settings
def test_shipped_settings_are_a_minimal_default():
    """The package's settings.toml: one [default] profile, both shipped features off, no
    deployment's prefixes, volatile names or launch profiles (those are in the docs' example)."""
    import tomllib

    from dsv41_flags.settings_files import PROJECT_SETTINGS

    data = tomllib.loads(PROJECT_SETTINGS.read_text(encoding="utf-8"))
    assert list(data) == ["default"]
    assert data["default"]["folded_fence"] is False and data["default"]["autotune_keep"] is False
    assert "fingerprint" not in data["default"] and "external" not in data["default"]
    text = PROJECT_SETTINGS.read_text(encoding="utf-8")
    for deployment_word in ("SPARK_", "B12X_", "[tp3]", "[tp4]", "start.sh"):
        assert deployment_word not in text


@pytest.mark.parametrize("profile", ["default", "tp3", "tp4"])
def test_deployment_example_settings_resolve_in_every_profile(make_runtime, profile):
    from ..conftest import EXAMPLE_SETTINGS

    rt = make_runtime(EXAMPLE_SETTINGS.read_text(encoding="utf-8"), profile=profile)
    assert rt.resolution.profiles == ("default", "tp3", "tp4") and not rt.resolution.errors
    fp = rt.resolution.reserved["FINGERPRINT"]
    assert "SPARK_" in fp["prefixes"] and "DSV41_DRAFT_CAPTURE" in fp["volatile"]
    assert ("DSV41_ROUTE_STATS" in fp["volatile"]) is (profile == "tp4")


# ------------------------------------------------------------------ a file value error shows its text
@pytest.mark.parametrize("line,shown", [
    ("autotune_keep_keep_old = 0x10", "autotune_keep_keep_old = 0x10 ("),
    ("autotune_keep_keep_old = 1_0   # ten", "autotune_keep_keep_old = 1_0 ("),
    ("autotune_keep_keep_old = 0o20", "autotune_keep_keep_old = 0o20 ("),
    ('autotune_keep_keep_old = "7"', 'autotune_keep_keep_old = "7" ('),
    ("autotune_keep_keep_old = 7.0", "autotune_keep_keep_old = 7.0 ("),
    ("folded_fence = 1", "folded_fence = 1 ("),
    ("folded_fence = 'on' # quoted", "folded_fence = 'on' ("),
    ('folded_fence = "a # b"', 'folded_fence = "a # b" ('),
])
def test_a_file_value_error_shows_the_text_written_in_the_file(make_runtime, tmp_path, line, shown):
    with pytest.raises(SettingsError) as exc:
        make_runtime(f"[default]\n{line}\n")
    message = str(exc.value)
    assert shown + f"{tmp_path / 'settings.toml'} [default]) is not a valid value" in message
    assert "accepted:" in message and "strictly typed" in message


def test_a_value_not_on_one_line_is_shown_parsed(make_runtime, tmp_path):
    with pytest.raises(SettingsError) as exc:
        make_runtime("[default]\nautotune_keep_keep_old = [\n  1,\n]\n")
    assert f"autotune_keep_keep_old=[1] ({tmp_path / 'settings.toml'} [default])" in str(exc.value)


@pytest.mark.parametrize("name", ["br[ack]et/s[1].toml", "g*/s?.toml", "[!x]/a[b.toml"])
def test_a_settings_path_with_glob_characters_is_read_as_written(tmp_path, name):
    """Dynaconf globs a settings entry holding ``*``, ``?`` or ``[``: a found file is read as that
    exact file, never silently dropped or swapped for another that matches."""
    import json
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    path.write_text("[default]\nfolded_fence = true\n")
    proc = run_cmd([CLI, "status", "--settings", str(path), "--json"], clean_env(), None)
    [fence] = [f for f in json.loads(proc.stdout)["features"] if f["name"] == "folded_fence"]
    assert fence["value"] is True and str(path) in fence["source"], proc.stdout


@pytest.mark.parametrize("make, reason", [
    (lambda d: os.mkfifo(d / "f.toml"), "is a FIFO, not a regular file"),
    (lambda d: (d / "f.toml").symlink_to("/dev/zero"), "is a character device, not a regular file"),
    (lambda d: (d / "f.toml").symlink_to(d / "f.toml"), "symbolic link loop"),
    (lambda d: (d / "f.toml").write_text("[default]\nx = " + "[" * 20000 + "]" * 20000 + "\n"),
     "nested too deep"),
    (lambda d: (d / "f.toml").write_text("[default]\nx = " + "9" * 5000 + "\n"), "is not valid TOML"),
])
def test_bad_settings_files_are_settings_errors_not_hangs(tmp_path, make, reason):
    make(tmp_path)
    with pytest.raises(SettingsError, match=reason) as exc:
        no_block(find_settings_files, None, {"DSV41_SETTINGS": str(tmp_path / "f.toml")})
    assert str(tmp_path / "f.toml") in str(exc.value)


def test_fifo_local_companion_is_refused(tmp_path):
    (tmp_path / "settings.toml").write_text("[default]\n")
    os.mkfifo(tmp_path / "settings.local.toml")
    with pytest.raises(SettingsError, match=r"settings.local.toml \(named by beside .*\) is a FIFO"):
        no_block(find_settings_files, [tmp_path / "settings.toml"], {})


def test_huge_int_variable_is_a_settings_error(project):
    with pytest.raises(SettingsError, match=r"DEMO_PATCH_N=.*too long: 5000 digits"):
        parent(project, DSV41_DEMO_PATCH_N="9" * 5000)


def test_features_dir_symlink_loop_is_a_settings_error(project, tmp_path):
    loop = tmp_path / "loopdir"
    loop.symlink_to(loop)
    with pytest.raises(SettingsError, match=r"features_dir=.*cannot be resolved: RuntimeError"):
        build_from_env(project, DSV41_FEATURES_DIR=str(loop))


def build_from_env(project, **env):
    from dsv41_flags.assembly import build

    return build([project.settings], None, environ=dict(env), argv=["prog"], use_snapshot=False,
                 configure_logging=False)


def test_str_option_from_file_and_variable_reaches_install_unchanged(program, program_cli):
    program.settings.write_text('[default]\ndemo_fix = true\ndemo_fix_tag = " padded "\n'
                               'demo_fix_names = [" a", "b "]\n')
    data = json.loads(program_cli("status", "--json").stdout)
    options = next(f for f in data["features"] if f["name"] == "demo_fix")["options"]
    assert options["tag"]["value"] == " padded " and options["names"]["value"] == ["a", "b"]
    data = json.loads(program_cli("status", "--json", env={"DSV41_DEMO_FIX_TAG": "  v ",
                                                   "DSV41_DEMO_FIX_NAMES": " a,b "}).stdout)
    options = next(f for f in data["features"] if f["name"] == "demo_fix")["options"]
    assert options["tag"]["value"] == "  v " and options["names"]["value"] == ["a", "b"]


def _build(settings_files):
    return build(settings_files, None, environ=clean_env(), argv=["serve"], features_dir=REPO / "features",
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
    proc = run_cmd(cmd, clean_env(**({"DSV41_SETTINGS": "/"} if how == "env" else {})), REPO)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "ValueError" not in proc.stderr
    assert "settings file / (named by" in proc.stderr and "is a directory" in proc.stderr


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


def test_nested_variables_are_refused(make_runtime):
    with pytest.raises(SettingsError, match="DSV41_FINGERPRINT__PREFIXES: nested settings cannot be set"):
        make_runtime(None, env={"DSV41_FINGERPRINT__PREFIXES": "SGLANG_"})


def test_settings_loading_never_touches_os_environ(tmp_path, monkeypatch):
    """Another thread writes and reads os.environ while settings load with an explicit
    environment and with Dynaconf's own value and profile variables present: no variable is lost,
    os.environ is the same object with the same content, and those variables change nothing."""
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nfolded_fence = false\nautotune_keep = true\n[tp4]\nfolded_fence = true\n")
    other = tmp_path / "other.toml"
    other.write_text("[default]\nautotune_keep = false\nfolded_fence = true\n")
    for name, value in {"DYNACONF_FOLDED_FENCE": "1", "DYNACONF_AUTOTUNE_KEEP": "false",
                        "ENV_FOR_DYNACONF": "tp4", "DSV41_AUTOTUNE_KEEP": "0"}.items():
        monkeypatch.setenv(name, value)
    environ_object, before = os.environ, dict(os.environ)
    stop, lost, written = threading.Event(), [], []

    def writer():
        i = 0
        while not stop.is_set():
            name = f"T13_IO_{i % 400}"
            os.environ[name] = str(i)
            if os.environ.get(name) != str(i):
                lost.append(name)
            written.append(name)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for i in range(8):
            explicit = build([settings], "tp4" if i % 2 else None,
                             environ={"DSV41_AUTOTUNE_KEEP": "1", "DYNACONF_X": "1",
                                      "ENV_FOR_DYNACONF": "tp4"},
                             features_dir=REPO / "features", use_snapshot=False,
                             configure_logging=False)
            ambient = build([settings], None, features_dir=REPO / "features", use_snapshot=False,
                            configure_logging=False)
    finally:
        stop.set()
        thread.join(10)
    assert written and not lost
    for name in set(written):
        assert name in os.environ
        monkeypatch.delenv(name)
    assert os.environ is environ_object and dict(os.environ) == before
    # Dynaconf's own variables changed nothing; DSV41_* came from the mapping given
    values = explicit.resolution.values
    assert values["FOLDED_FENCE"].value is True and values["FOLDED_FENCE"].source.endswith("[tp4]")
    assert values["AUTOTUNE_KEEP"].value is True
    assert values["AUTOTUNE_KEEP"].source == "env DSV41_AUTOTUNE_KEEP"
    assert [s for s, _ in values["AUTOTUNE_KEEP"].chain] == [
        "declared default", f"{settings} [default]", "env DSV41_AUTOTUNE_KEEP"]
    amb = ambient.resolution.values
    assert amb["FOLDED_FENCE"].value is False and amb["FOLDED_FENCE"].source == f"{settings} [default]"
    assert amb["AUTOTUNE_KEEP"].value is False and amb["AUTOTUNE_KEEP"].chain[-1] == (
        "env DSV41_AUTOTUNE_KEEP", "0")
    assert any("DYNACONF_FOLDED_FENCE" in n for n in ambient.resolution.notes)


# ------------------------------------------------------------------ an empty settings selection
@pytest.mark.parametrize("value", ["", " ", ":", "::", " : ", ",", ", :", "{s}:", ":{s}", "{s},,{s}"])
def test_an_empty_settings_selection_is_an_error_naming_the_variable(tmp_path, value):
    """``DSV41_SETTINGS=:`` is what ``"$A:$B"`` gives with both unset: an empty entry never
    silently drops a file or falls back to another search."""
    (tmp_path / "s.toml").write_text("[default]\n")
    (tmp_path / "settings.toml").write_text("[default]\n")  # the default search would find it
    value = value.format(s=tmp_path / "s.toml")
    with pytest.raises(SettingsError) as exc:
        find_settings_files(None, {"DSV41_SETTINGS": value}, cwd=tmp_path)
    [problem] = exc.value.problems
    assert problem.origin == "env DSV41_SETTINGS" and f"DSV41_SETTINGS={value!r}" in problem.message
    assert "accepted:" in problem.message and "unset DSV41_SETTINGS for the default search" in problem.message


def test_an_unset_settings_variable_keeps_the_default_search(tmp_path):
    (tmp_path / "settings.toml").write_text("[default]\n")
    assert find_settings_files(None, {}, cwd=tmp_path) == ([tmp_path / "settings.toml"], "current directory")


def test_an_empty_settings_selection_fails_the_cli_and_activate(tmp_path):
    env = clean_env(DSV41_SETTINGS=":", DSV41_LOG_FORMAT="json")
    proc = run_cmd([CLI, "status"], env, tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "DSV41_SETTINGS=':' names no settings file" in proc.stderr
    code = ("import dsv41_flags\n"
            "try:\n    dsv41_flags.activate()\n"
            "except dsv41_flags.SettingsError as exc:\n    print('caught', exc.problems[0].message)\n")
    proc = run_cmd([sys.executable, "-c", code], env, tmp_path)
    assert proc.returncode == 0
    assert "caught environment variable DSV41_SETTINGS=':' names no settings file" in proc.stdout, proc
