"""Provenance read once per load (the launching process's speed): ``LoadedSettings.entries`` gives,
for every key and profile, exactly what Dynaconf's per-key ``get_history`` gives."""
import pytest
from dynaconf import get_history

from dsv41_flags.settings import load
from dsv41_flags.settings_files import find_settings_files

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
#: the keys resolution asks for: flag, option and reserved keys, upper-case, one word
KEYS = ["FOLDED_FENCE", "AUTOTUNE_KEEP", "AUTOTUNE_KEEP_KEEP_OLD", "WHEN", "EXTERNAL", "NESTED",
        "FINGERPRINT", "EMPTY_TABLE", "NOT_SET", "STRICT"]


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
        assert settings.entries(key) == _per_key(settings.dynaconf, key), key
    assert list(settings.layers) == [e for e in get_history(settings.dynaconf) if e["loader"] == "toml"]
