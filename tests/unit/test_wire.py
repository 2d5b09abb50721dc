"""The JSON form of a value (``wire.py``): ``dumps`` is strict JSON (RFC 8259) for anything and
never raises, whatever a feature logs or an outside value holds."""
import json
import math
from enum import Enum

from hypothesis import given, settings as hsettings, strategies as st

from dsv41_flags.wire import dumps, jsonable


def _refuse(constant):
    raise ValueError(f"non-strict JSON constant {constant}")


def strict_loads(line: str):
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` (what strict parsers do)."""
    return json.loads(line, parse_constant=_refuse)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (st.lists(children, max_size=3) | st.tuples(children, children)
                      | st.dictionaries(st.none() | st.integers() | st.floats() | st.text(max_size=3)
                                        | st.tuples(st.integers(), st.floats()), children, max_size=3)),
    max_leaves=12)


@hsettings(max_examples=150, deadline=None)
@given(json_values)
def test_dumps_is_strict_json_for_anything(value):
    text = dumps({"event": "x", "v": value})
    parsed = strict_loads(text)
    assert parsed["event"] == "x"
    if isinstance(value, float) and not math.isfinite(value):
        assert parsed["v"] in ("NaN", "Infinity", "-Infinity")


def test_dumps_survives_cycles_and_deep_nesting():
    a: list = []
    a.append(a)
    deep: list = []
    cur = deep
    for _ in range(200):
        cur.append([])
        cur = cur[0]
    assert strict_loads(dumps({"a": a, "deep": deep}))["a"] == ["<cycle>"]


def test_dumps_survives_hostile_containers_and_huge_ints():
    class BadDict(dict):
        def items(self):
            raise RuntimeError("no items")

    class Unsortable:
        def __str__(self):
            raise RuntimeError("no str")
        __repr__ = __str__

    out = strict_loads(dumps({"d": BadDict(a=1), "s": {Unsortable(), 1}, "i": 10 ** 5000,
                                     "k": {frozenset({1}): 2}}))
    assert out["d"] == "{'a': 1}" and out["i"].startswith("<int of ") and out["k"] == {"frozenset({1})": 2}
    assert sorted(map(str, out["s"])) == ["1", "<unrepresentable Unsortable>"]


class Color(str, Enum):
    RED = "red"


def test_jsonable_is_the_json_the_framework_writes():
    """Tuples and sets as lists, enum members as their value, non-finite floats as text, keys
    as text: what the snapshot, the fingerprint, the sidecars and the CLI write."""
    assert jsonable({"a": (1, (2.5, "x")), "s": {2, 1}, "c": Color.RED, "n": float("nan"),
                     1: None, None: -float("inf")}) == \
        {"a": [1, [2.5, "x"]], "s": [1, 2], "c": "red", "n": "NaN", "1": None, "null": "-Infinity"}
    assert dumps({"b": 1, "a": [True]}, sort_keys=True, separators=(",", ":")) == '{"a":[true],"b":1}'
    assert dumps("\x1b[2J\u202e") == '"\\u001b[2J\\u202e"'
