"""Version ranges of declarations: the plain-range shortcut (issue 11, parent speed) is a subset of
what packaging accepts, and everything else is still parsed and refused by packaging, when the
feature is declared, with the same message."""
import subprocess
import sys

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from dsv41_flags import DeclarationError, Feature
from dsv41_flags.requires import plain_range

OPS = ("<", "<=", ">", ">=", "==", "!=")
SPACE = st.sampled_from(["", " ", "\t", "  "])
RELEASE = st.lists(st.integers(0, 10**6).map(str) | st.sampled_from(["00", "007"]),
                   min_size=1, max_size=5).map(".".join)
ITEM = st.tuples(SPACE, st.sampled_from(OPS), SPACE, RELEASE, SPACE).map("".join)
PLAIN = st.lists(ITEM, min_size=0, max_size=4).map(",".join)


@given(PLAIN)
@hsettings(max_examples=400, deadline=None)
def test_every_plain_range_is_a_valid_specifier_set(text):
    assert plain_range(text)
    SpecifierSet(text)  # never raises


@given(st.text(alphabet=st.sampled_from(list("<>=!~,. \t\n*+-_v0123456789aberct!")) | st.characters(),
               max_size=24))
@hsettings(max_examples=1500, deadline=None)
def test_what_packaging_refuses_is_never_plain(text):
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        assert not plain_range(text)


@pytest.mark.parametrize("text", ["~=1.2", "==1.*", ">=1.0rc1", ">=1!2", "==1.0+local", ">=v1",
                                  "===abc", ">=1,,<2", ">=1,", "\u00a0>=1", ">=\u0661", ">= 1\n"])
def test_other_valid_forms_go_to_packaging(text):
    assert not plain_range(text)


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
    Feature(name="x", target="json", install=lambda m, c: None, summary="s", engine=engine,
            fixed_in=fixed_in)


def test_declaring_plain_ranges_imports_no_version_parser():
    code = ("import sys\nfrom dsv41_flags import Feature\n"
            "Feature(name='x', target='json', install=lambda m, c: None, summary='s', "
            "engine='sglang>=0.5.23,<0.6', fixed_in='>=0.5.30')\n"
            "print(sorted(m for m in sys.modules if m.startswith('packaging')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
