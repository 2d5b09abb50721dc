"""The status record: built once (``dsv41_flags.status.feature_record``); ``status --json`` rows
and a process's ``status --url`` answer are projections of it, with the shapes the docs give."""
from dsv41_flags.state import State
from dsv41_flags.status import PREVIEW_KEYS, PROCESS_KEYS, feature_record, preview, process_status


def test_status_rows_and_the_process_answer_are_made_of_one_record(make_runtime):
    rt = make_runtime("[default]\nfolded_fence = true\n")
    found = {name: (["Cls.gone"] if name == "folded_fence" else [], "/src/x.py")
             for name in rt.features}
    rows = {r["name"]: r for r in preview(rt, found)}
    answer = process_status(rt, step=7)
    procs = {f["name"]: f for f in answer["features"]}
    assert set(rows) == set(procs) == set(rt.features)
    for name, row in rows.items():
        assert tuple(row) == PREVIEW_KEYS and tuple(procs[name]) == PROCESS_KEYS
        record = feature_record(rt, rt.states()[list(rt.features).index(name)])
        for key in ("name", "value", "source", "target", "live", "engine"):
            assert row[key] == procs[name][key] == record[key], key
        assert procs[name]["options"] == {k: o["value"] for k, o in row["options"].items()}
        assert row["engine_version"] == record["engine_version"]
    assert rows["folded_fence"]["state"] == State.DRIFTED and rows["folded_fence"]["missing"] == ["Cls.gone"]
    assert rows["folded_fence"]["detail"] == "" and rows["folded_fence"]["target_found"] is True
    assert answer["step"] == 7 and answer["generation"] == 0 and answer["switches"] == []
    assert {"profile", "settings_files", "fingerprint", "warnings", "notes", "pid"} <= set(answer)


def test_a_preview_of_some_features_lists_them_in_the_order_asked(make_runtime):
    rt = make_runtime("[default]\n")
    names = list(rt.features)[::-1]
    assert [r["name"] for r in preview(rt, {}, names)] == names
    assert all(r["target_found"] is False and r["missing"] == [] for r in preview(rt, {}))


def test_status_renders_the_runtime_states(make_runtime):
    """``preview`` is the boot's rule: off / fixed-upstream / armed, drifted when armed and the
    drift found without importing is not empty."""
    rt = make_runtime(env={"DSV41_FOLDED_FENCE": "1"})
    states = {s.name: s.state for s in rt.preview({"folded_fence": ["X.y"], "autotune_keep": ["Z"]})}
    assert states == {"folded_fence": "drifted", "autotune_keep": "off"}
    assert {s.name: s.state for s in rt.preview({})} == {"folded_fence": "armed", "autotune_keep": "off"}
    assert rt._states == {}  # nothing recorded, nothing armed
