"""The status record: one frozen model per feature (``FeatureStatus``) and per process
(``ProcessStatus``); ``status --json`` rows and a process's ``status --url`` answer are the same
record, and its JSON form reads back as the same record."""
import pydantic
import pytest

from dsv41_flags.state import State
from dsv41_flags.status import (WIRE, FeatureStatus, ProcessStatus, StatusAnswer, preview,
                                process_status, serving)

#: the keys of a feature on the wire (``status --json`` and ``status --url`` alike)
KEYS = ("name", "state", "value", "source", "target", "detail", "duration_ms", "patches", "live",
        "engine", "engine_version", "options", "missing", "undecided", "target_found")


def test_status_rows_and_the_process_answer_are_made_of_one_record(make_runtime):
    rt = make_runtime("[default]\nfolded_fence = true\n")
    found = {name: (["Cls.gone"] if name == "folded_fence" else [], "/src/x.py")
             for name in rt.features}
    rows = {r.name: r for r in preview(rt, found)}
    answer = process_status(rt, step=7)
    procs = {f.name: f for f in answer.features}
    assert set(rows) == set(procs) == set(rt.features)
    for name, row in rows.items():
        assert type(row) is type(procs[name]) is FeatureStatus
        assert tuple(row.model_dump(mode="json")) == KEYS == tuple(procs[name].model_dump(mode="json"))
        for key in ("name", "value", "source", "target", "live", "engine", "engine_version", "options"):
            assert getattr(row, key) == getattr(procs[name], key), key
    assert rows["folded_fence"].state == State.DRIFTED and rows["folded_fence"].missing == ("Cls.gone",)
    assert rows["folded_fence"].detail == "" and rows["folded_fence"].target_found is True
    assert answer.step == 7 and answer.generation == 0 and answer.switches == ()
    wire = answer.model_dump(mode="json")
    assert {"profile", "settings_files", "fingerprint", "warnings", "notes", "pid"} <= set(wire)
    assert ProcessStatus.model_validate(wire, context=WIRE) == answer   # the wire form reads back


def test_the_record_is_frozen_and_typed():
    st = FeatureStatus(name="f", state="installed", value=True, target="t")
    assert st.state is State.INSTALLED
    with pytest.raises(pydantic.ValidationError):
        st.name = "g"
    with pytest.raises(pydantic.ValidationError, match="state"):
        FeatureStatus(name="f", state="switched-on")
    assert st.replace(detail="x").detail == "x" and st.detail == ""


def test_only_a_record_from_a_server_is_bounded():
    """The runtime's own record is never cut; one read from a server (``WIRE``) is bounded."""
    long = {"name": "f", "state": "failed", "detail": "x" * 5000}
    assert len(FeatureStatus.model_validate(long).detail) == 5000
    with pytest.raises(pydantic.ValidationError, match="detail"):
        FeatureStatus.model_validate(long, context=WIRE)
    with pytest.raises(pydantic.ValidationError, match="ranks.0.features.0.detail"):
        StatusAnswer.model_validate({"ok": True, "ranks": [{"pid": 1, "features": [long]}]},
                                    context=WIRE)


def test_serving_says_what_is_in_effect(make_runtime):
    rt = make_runtime("[default]\nfolded_fence = true\n")
    assert serving(rt).model_dump(mode="json") == {"installed": [], "pending": [],
                                                   "other": {"folded_fence": "not-armed"}}


def test_a_preview_of_some_features_lists_them_in_the_order_asked(make_runtime):
    rt = make_runtime("[default]\n")
    names = list(rt.features)[::-1]
    assert [r.name for r in preview(rt, {}, names)] == names
    assert all(r.target_found is False and r.missing == () for r in preview(rt, {}))


def test_status_renders_the_runtime_states(make_runtime):
    """``preview`` is the boot's rule: off / fixed-upstream / armed, drifted when armed and the
    drift found without importing is not empty."""
    rt = make_runtime(env={"DSV41_FOLDED_FENCE": "1"})
    states = {s.name: s.state for s in rt.preview({"folded_fence": ["X.y"], "autotune_keep": ["Z"]})}
    assert states == {"folded_fence": "drifted", "autotune_keep": "off"}
    assert {s.name: s.state for s in rt.preview({})} == {"folded_fence": "armed", "autotune_keep": "off"}
    assert rt._states == {}  # nothing recorded, nothing armed
