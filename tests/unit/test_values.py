"""Flag words and typed options: documented value or documented error, never anything else."""
import pytest
from hypothesis import given, strategies as st

from dsv41_flags import DeclarationError, Option
from dsv41_flags.values import FALSE_WORDS, TRUE_WORDS, CastError, cast, cast_bool

SPACES = st.sampled_from(["", " ", "  ", "\t", "\u00a0", " \u00a0 ", "\n"])


@pytest.mark.parametrize("raw,expected", [
    ("1", True), ("0", False), ("on", True), ("OFF", False), ("Yes", True), ("no", False),
    ("True", True), ("False", False), (" yes ", True), ("\u00a0on\u00a0", True), ("", False),
    ("   ", False), (True, True), (False, False), (1, True), (0, False),
])
def test_bool_words(raw, expected):
    assert cast_bool(raw) is expected


@pytest.mark.parametrize("raw", ["maybe", "2", "-1", "tru", "enable", "1.0", 2, 1.0, None, [], "o n"])
def test_bool_rejects_everything_else(raw):
    with pytest.raises(CastError) as exc:
        cast_bool(raw)
    assert "true/false" in exc.value.accepted and "on/off" in exc.value.accepted


@given(word=st.sampled_from(TRUE_WORDS + FALSE_WORDS), left=SPACES, right=SPACES,
       case=st.sampled_from([str.lower, str.upper, str.title]))
def test_bool_words_any_case_and_space(word, left, right, case):
    assert cast_bool(left + case(word) + right) is (word in TRUE_WORDS)


@given(st.text())
def test_bool_any_string_value_or_documented_error(raw):
    try:
        value = cast_bool(raw)
    except CastError:
        assert raw.strip().lower() not in TRUE_WORDS + FALSE_WORDS + ("",)
    else:
        assert value is (raw.strip().lower() in TRUE_WORDS)


OPTIONS = [Option("n", "int", 3, minimum=1, maximum=100), Option("x", "float", 0.5, minimum=0.0, maximum=1.0),
           Option("s", "str", "a"), Option("b", "bool", False),
           Option("c", "choice", "fast", choices=("fast", "safe")), Option("l", "list", ("a",))]


@given(option=st.sampled_from(OPTIONS), raw=st.text())
def test_option_any_string_value_or_documented_error(option, raw):
    try:
        value = option.cast(raw)
    except CastError as exc:
        assert exc.accepted
    else:
        if option.kind == "int":
            assert isinstance(value, int) and 1 <= value <= 100
        elif option.kind == "float":
            assert 0.0 <= value <= 1.0
        elif option.kind == "choice":
            assert value in ("fast", "safe")
        elif option.kind == "list":
            assert isinstance(value, tuple) and all(isinstance(v, str) and v for v in value)


def test_options_cast_raw_text_not_toml_guess():
    assert cast("str", "1e3") == "1e3"        # Dynaconf would have made a float of it
    assert cast("int", " 42 ") == 42
    assert cast("list", "a, b,,c") == ("a", "b", "c")
    assert cast("list", ["x", "y"]) == ("x", "y")
    for kind, raw in [("int", "1e3"), ("int", "3.0"), ("int", True), ("float", "nan"), ("float", "inf"),
                      ("choice", "FAST"), ("list", [1, 2]), ("str", 5)]:
        with pytest.raises(CastError):
            cast(kind, raw, choices=("fast",))


def test_bounds():
    opt = Option("n", "int", 3, minimum=1, maximum=100)
    assert opt.cast("100") == 100
    with pytest.raises(CastError) as exc:
        opt.cast("101")
    assert "[1, 100]" in exc.value.accepted


@pytest.mark.parametrize("kwargs,needle", [
    (dict(name="N", kind="int", default=1), "lower-case"),
    (dict(name="n", kind="complex", default=1), "kind"),
    (dict(name="n", kind="int", default=500, maximum=100), "default 500"),
    (dict(name="n", kind="choice", default="a"), "choices"),
])
def test_bad_option_declarations(kwargs, needle):
    with pytest.raises(DeclarationError, match=needle):
        Option(**kwargs)


def test_casters_are_total():
    with pytest.raises(CastError, match="too long: 5000 digits"):
        cast("int", "9" * 5000)
    with pytest.raises(CastError):
        cast("float", "9" * 5000)  # inf: not finite
    with pytest.raises(CastError):
        cast("list", [["nested"]])


@pytest.mark.parametrize("raw", [" a ", "a ", "\u00a0a", "  ", ""])
def test_str_option_keeps_its_text_exactly(raw):
    assert cast("str", raw) == raw


def test_choice_numbers_flags_and_list_items_ignore_surrounding_whitespace():
    assert cast("choice", " b\u00a0", choices=("a", "b")) == "b"
    assert cast("int", " 5 ") == 5 and cast("float", " 0.5 ") == 0.5 and cast("bool", " on ") is True
    # list items: the same from a TOML array and from a comma-separated variable
    assert cast("list", [" x", "y ", " ", ""]) == cast("list", " x,y , ,") == ("x", "y")
    with pytest.raises(CastError):
        cast("choice", " c ", choices=("a", "b"))


@pytest.mark.parametrize("raw", ["1_0", "\u0663", "1.0", "0x10", ""])
def test_integers_are_plain_ascii_digits(raw):
    with pytest.raises(CastError):
        cast("int", raw)


@pytest.mark.parametrize("raw", ["\u0661.5", "1_0.5", "nan", "1e"])
def test_floats_are_plain_ascii(raw):
    with pytest.raises(CastError):
        cast("float", raw)
