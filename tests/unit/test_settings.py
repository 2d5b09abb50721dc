"""Resolution: profiles, files, variables, provenance, unknown keys (issues 2 and 3)."""
import pytest

from dsv41_flags import SettingsError
from dsv41_flags.settings import find_settings_files

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


def test_dynaconf_tokens_are_not_interpreted(make_runtime):
    with pytest.raises(SettingsError, match="'@del'"):
        make_runtime(BASE, env={"DSV41_FOLDED_FENCE": "@del"})


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

    from dsv41_flags.settings import PROJECT_SETTINGS

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
    import subprocess, sys, json, os
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    path.write_text("[default]\nfolded_fence = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    cli = os.path.join(os.path.dirname(sys.executable), "dsv41-flags")
    proc = subprocess.run([cli, "status", "--settings", str(path), "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    [fence] = [f for f in json.loads(proc.stdout)["features"] if f["name"] == "folded_fence"]
    assert fence["value"] is True and str(path) in fence["source"], proc.stdout
