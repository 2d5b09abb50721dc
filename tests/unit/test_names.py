"""The names the framework owns (``names.py``): the reserved names are defined once and every
"did you mean" comes from ``suggest``."""

from dsv41_flags.names import RESERVED, RESERVED_KEYS, RESERVED_TYPES, suggest

from ._child import REPO


def test_reserved_names_defined_once():
    """One table: the keys, the typed settings and the variables all come from it."""
    assert RESERVED_KEYS == tuple(RESERVED)
    assert set(RESERVED_TYPES) <= set(RESERVED_KEYS)
    import dsv41_flags.settings as _settings

    assert _settings.RESERVED_TYPES is RESERVED_TYPES
    assert (_settings.PROFILE_VAR, _settings.SETTINGS_VAR, _settings.SNAPSHOT_VAR) == (
        "DSV41_ENV", "DSV41_SETTINGS", "DSV41_SNAPSHOT")
    # no other module spells the list again
    src = REPO / "src" / "dsv41_flags"
    for path in src.glob("*.py"):
        if path.name != "names.py":
            text = path.read_text()
            assert '"LOG_FORMAT", "LOG_LEVEL"' not in text and "did you mean {" not in text, path


def test_suggest_is_the_one_did_you_mean():
    assert suggest("FOLDED_FENC", ["FOLDED_FENCE", "AUTOTUNE_KEEP"]) == "; did you mean FOLDED_FENCE?"
    assert suggest("zzz", ["FOLDED_FENCE"]) == ""
