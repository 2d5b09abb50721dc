"""Feature states: the words, the transition rules and "blocks a boot", defined once in
``dsv41_flags.state`` and followed by the runtime."""
import json
import sys
import textwrap
import uuid

import pytest
from hypothesis import given, strategies as st

import dsv41_flags
from dsv41_flags.state import (TRANSITIONS, Cell, State, after_install, after_switch,
                               after_uninstall, at_boot, blocks_boot, may_move)


def test_states_are_their_words_in_json_and_text():
    assert State.FIXED_UPSTREAM == "fixed-upstream" and f"{State.NOT_ARMED}" == "not-armed"
    assert json.dumps({"state": State.OFF}) == '{"state": "off"}'
    assert dsv41_flags.State is State and "State" in dsv41_flags.__all__
    assert {c.value for c in Cell if c.failing} == {"drifted", "undecided", "out-of-range", "unreadable"}
    assert Cell("n/a") is Cell.NOT_APPLICABLE
    assert set(TRANSITIONS) == set(State)


@pytest.mark.parametrize("state, strict, blocks", [
    ("drifted", True, True), ("failed", True, True), ("drifted", False, False),
    ("armed", True, False), ("off", True, False), ("fixed-upstream", True, False),
    ("undecided", True, False), ("pending", True, False)])
def test_blocks_boot_only_drift_or_failure_in_strict_mode(state, strict, blocks):
    assert blocks_boot(state, strict) is blocks


@pytest.mark.parametrize("on, fixed, state", [(False, "", "off"), (False, "fixed", "off"),
                                              (True, "", "armed"), (True, "0.6 has it", "fixed-upstream")])
def test_at_boot(on, fixed, state):
    assert at_boot(on, fixed) == state


@pytest.mark.parametrize("state, on, after", [
    ("installed", False, "bypassed"), ("bypassed", True, "installed"), ("armed", False, "off"),
    ("off", True, "armed"), ("pending", True, "pending"), ("pending", False, "off"),
    ("drifted", True, "drifted"), ("lost", False, "lost")])
def test_after_switch(state, on, after):
    assert after_switch(State(state), on) == after


@given(st.sampled_from(list(State)), st.booleans())
def test_every_rule_moves_along_the_transitions(state, on):
    if state.switchable:
        assert may_move(state, after_switch(state, on))
    done = after_uninstall(state)
    if done is not None:
        assert may_move(state, done)
    if state.hooked:
        assert may_move(state, after_install(on))


class _Recorder(dict):
    """A runtime's state table that records every (old, new) state written to it."""

    def __init__(self):
        super().__init__()
        self.moves = []

    def __setitem__(self, name, st):
        old = self.get(name)
        self.moves.append((name, old.state if old else None, st.state))
        super().__setitem__(name, st)


def test_the_runtime_only_moves_along_the_transitions(tmp_path, monkeypatch, make_runtime):
    target = f"state_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()
    for name, live in (("plain", False), ("switchy", True)):
        (fdir / f"{name}.py").write_text(textwrap.dedent(f"""
            from dsv41_flags import Feature
            def install(module, ctx):
                ctx.patch(module, "f", lambda orig: (lambda: 2))
            FEATURE = Feature(name={name!r}, target={target!r}, install=install, summary="s",
                              engine="", live={live})
        """))
    (fdir / "plain.py").write_text((fdir / "plain.py").read_text().replace('"f"', '"g"'))
    (tmp_path / f"{target}.py").write_text("def f():\n    return 1\ndef g():\n    return 1\n")
    rt = make_runtime("[default]\nplain = true\nswitchy = false\n", features_dir=fdir)
    rt._states = _Recorder()
    try:
        rt.arm()
        module = __import__(target)
        rt.switch("switchy", True, requested_by="test")
        rt.switch("switchy", False, requested_by="test")
        module.g = lambda: 3  # lost
        rt.audit()
        rt.uninstall()
    finally:
        sys.modules.pop(target, None)
    moves = rt._states.moves
    assert ("plain", "installed", "lost") in moves and ("switchy", "off", "bypassed") in moves
    bad = [m for m in moves if not may_move(m[1], m[2])]
    assert not bad, bad
