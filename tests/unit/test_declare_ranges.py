"""Version ranges of declarations: parsed by packaging when the feature is declared; what it
refuses is a DeclarationError naming the feature and the field."""
import pytest

from dsv41_flags import DeclarationError, Feature


@pytest.mark.parametrize("engine, fixed_in, what", [
    ("sglang>>0.5", "", "engine range"), ("sglang>=0.5,~=1", "", "engine range"),
    ("sglang==0.5.*.1", "", "engine range"), (">=0.5", "", "engine range"),
    ("", "abc", "fixed_in"), ("", ">=1.0.*", "fixed_in"), ("", "~=1", "fixed_in"),
])
def test_bad_ranges_are_refused_at_declaration(engine, fixed_in, what):
    with pytest.raises(DeclarationError, match=f"feature 'x'.*{what}"):
        Feature(name="x", target="json", install=lambda m, c: None, summary="s", engine=engine,
                fixed_in=fixed_in)


@pytest.mark.parametrize("engine, fixed_in", [("sglang>=0.5.23,<0.6", ">=0.5.30"),
                                              ("sglang~=0.5.23", "==0.5.30rc1"), ("sglang", ""),
                                              ("", ">=1,<2,!=1.5")])
def test_good_ranges_are_accepted(engine, fixed_in):
    f = Feature(name="x", target="json", install=lambda m, c: None, summary="s", engine=engine,
                fixed_in=fixed_in)
    assert (f.engine, f.fixed_in) == (engine, fixed_in)
    if engine:
        assert f.engine_requirement.name == "sglang"
    assert f.engine_label == (engine or "no engine range")
