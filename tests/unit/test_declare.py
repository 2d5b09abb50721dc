"""Declarations (``Feature``): tuple fields refuse lists, a summary must be text, ``engine=`` of a
feature is checked, and a feature that declares none takes the engine adapter's range."""

import pytest

from dsv41_flags import DeclarationError, Feature


def test_engine_default_and_no_engine():
    from dsv41_flags.discovery import with_engine_default
    from dsv41_flags.engine import adapter

    adapter.cache_clear()
    f = Feature(name="x", target="m", install=lambda m, c: None, summary="s")
    assert adapter.cache_info().currsize == 0  # building a Feature reads no installed metadata
    assert f.engine is None and f.engine_label == "the engine adapter's range"
    [f] = with_engine_default([f])
    assert f.engine == "sglang>=0.5.23,<0.6" and f.engine_label == f.engine
    mine = Feature(name="x", target="m", install=lambda m, c: None, summary="s", engine="")
    assert mine.engine_label == "no engine range" and with_engine_default([mine]) == [mine]
    for bad in (0.5, ("sglang",), b"sglang"):
        with pytest.raises(DeclarationError, match=r"feature 'x'.*engine must be a str, got "):
            Feature(name="x", target="m", install=lambda m, c: None, summary="s", engine=bad)


@pytest.mark.parametrize("summary", [None, 3, ("a",), b"x"])
def test_a_summary_that_is_not_text_is_a_declaration_error(summary):
    from dsv41_flags import DeclarationError, Feature

    with pytest.raises(DeclarationError, match=r"feature 'x': summary must be a str \(one line\), got"):
        Feature(name="x", target="json", install=lambda m, c: None, summary=summary, engine="")


@pytest.mark.parametrize("field", ["requires", "volatile", "options", "refs", "after"])
def test_tuple_fields_refuse_lists_with_the_fix(field):
    with pytest.raises(DeclarationError, match=rf"{field} must be a tuple, got list .*write it as a tuple"):
        Feature(name="x", target="json", install=print, summary="s", engine="", **{field: []})


@pytest.mark.parametrize("fields, message", [
    ({"name": "Bad-Name"}, r"feature 'Bad-Name': name must be a lower-case identifier"),
    ({"target": "not a module"}, r"feature 'x': target 'not a module' is not a dotted module name"),
    ({"install": 3}, r"feature 'x': install 3 is not callable"),
    ({"fixed_in": None}, r'feature \'x\': fixed_in must be a str, got NoneType None \(write fixed_in="" for no upstream fix\)'),
    ({"requires": ("Cls.(",)}, r"feature 'x': "),
    ({"default": 1}, r"feature 'x': default must be True or False, got 1"),
    ({"live": "yes"}, r"feature 'x': live must be True or False, got 'yes'"),
    ({"summary": 3, "default": 1}, r"summary must be a str"),       # the first check that fails
])
def test_each_feature_field_has_its_own_check(fields, message):
    with pytest.raises(DeclarationError, match=message):
        Feature(**{"name": "x", "target": "json", "install": print, "summary": "s", "engine": "", **fields})


@pytest.mark.parametrize("fields, message", [
    ({"name": "N"}, r"option name 'N' is not a lower-case identifier"),
    ({"kind": "dict"}, r"option 'n': kind 'dict' is not one of bool, int"),
    ({"kind": "choice", "default": "a"}, r"option 'n': kind 'choice' needs choices"),
    ({"default": 9, "maximum": 8}, r"option 'n': default 9 is not an integer"),
])
def test_each_option_field_has_its_own_check(fields, message):
    from dsv41_flags import Option

    with pytest.raises(DeclarationError, match=message):
        Option(**{"name": "n", "kind": "int", "default": 1, **fields})


def test_duplicate_option_names_are_refused():
    from dsv41_flags import Option

    with pytest.raises(DeclarationError, match=r"feature 'x': duplicate option names in \['n', 'n'\]"):
        Feature(name="x", target="json", install=print, summary="s", engine="",
                options=(Option("n", "int", 1), Option("n", "str", "a")))
