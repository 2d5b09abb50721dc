"""Provenance read once per load (the launching process's speed): ``_toml_entries`` gives, for every key
and profile, exactly what Dynaconf's per-key ``get_history`` gives."""
import pytest
from dynaconf.utils.inspect import get_history

from dsv41_flags.settings import _toml_entries, find_settings_files, load

MAIN = """
[default]
folded_fence = false
autotune_keep_keep_old = 3
when = 1979-05-27T07:32:00Z
external = ["DSV41_LAUNCHER"]
nested = { a = 1, b = { c = "x" } }
"spaced key" = 2
[default.fingerprint]
volatile = ["SGLANG_RUN_ID"]
prefixes = ["SPARK_"]
[tp3]
folded_fence = true
empty_table = {}
[tp3.fingerprint]
volatile = ["DSV41_X"]
[tp4]
autotune_keep = true
"""
LOCAL = """
[default]
folded_fence = true
[tp3.fingerprint]
prefixes = ["B12X_"]
"""
KEYS = ["FOLDED_FENCE", "AUTOTUNE_KEEP", "AUTOTUNE_KEEP_KEEP_OLD", "WHEN", "EXTERNAL", "NESTED",
        "FINGERPRINT", "EMPTY_TABLE", "NOT_SET", "STRICT", "NESTED__A", "NESTED.B", "folded_fence",
        "Folded_Fence", "SPACED_KEY", "SPACED KEY"]


def _per_key(settings, key):
    try:
        entries = get_history(settings, key=key)
    except Exception:
        entries = []
    return [e for e in entries if e["loader"] == "toml"]


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("profile", ["default", "tp3", "tp4"])
def test_one_history_read_gives_what_each_per_key_read_gives(tmp_path, profile, spaced):
    (tmp_path / "settings.toml").write_text(MAIN if spaced else MAIN.replace('"spaced key"', "spaced_key"))
    (tmp_path / "settings.local.toml").write_text(LOCAL)
    files, _ = find_settings_files([tmp_path / "settings.toml"], {}, tmp_path)
    settings, *_ = load(files, profile, {})
    for key in KEYS:
        assert _toml_entries(settings, key) == _per_key(settings, key), key
    assert _toml_entries(settings) == [e for e in get_history(settings) if e["loader"] == "toml"]
    assert "toml_history" in vars(settings)  # read once, kept on the instance
    assert "TOML_HISTORY" not in settings.as_dict()  # never a setting
