"""The snapshot codec, both directions in ``dsv41_flags.snapshot``: what ``encode`` writes,
``decode`` + ``materialize`` read back as the same launch."""
import copy
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dsv41_flags import SnapshotError
from dsv41_flags.assembly import build
from dsv41_flags.snapshot import (Launch, decode, encode, fingerprint_from_dict, fingerprint_to_dict,
                                  materialize, resolution_to_dict, spill_path)

from ..conftest import FEATURES_DIR
from ._bounded import no_block
from ._child import child, parent


@pytest.mark.parametrize("settings", [
    "[default]\n",
    "[default]\nfolded_fence = true\nautotune_keep = true\nautotune_keep_keep_old = 5\n",
    "[default]\nstrict = false\nlog_level = \"debug\"\n[default.fingerprint]\nvolatile = [\"SGLANG_X\"]\n",
])
def test_a_launch_read_back_is_the_launch_written(make_runtime, settings):
    rt = make_runtime(settings, argv=["python", "-m", "sglang.launch_server", "--tp", "2"])
    launch, features = materialize(decode(encode(rt.launch)))
    assert [f.name for f in features] == list(sorted(rt.features))
    assert resolution_to_dict(launch.resolution) == resolution_to_dict(rt.launch.resolution)
    assert launch.resolution.values == rt.launch.resolution.values
    assert fingerprint_to_dict(launch.fingerprint) == fingerprint_to_dict(rt.fingerprint)
    assert (launch.feature_files, launch.entry_points, launch.pid, dict(launch.env),
            launch.declarations) == (rt.launch.feature_files, rt.launch.entry_points,
                                     rt.launch.pid, dict(rt.launch.env), rt.launch.declarations)
    assert json.dumps(launch.to_dict(), sort_keys=True) == json.dumps(rt.launch.to_dict(), sort_keys=True)


def test_fingerprint_round_trip_keeps_digest_payload_and_exclusions(make_runtime):
    fp = make_runtime("[default]\n").fingerprint
    back = fingerprint_from_dict(json.loads(json.dumps(fingerprint_to_dict(fp))))
    assert (back.digest, dict(back.payload), dict(back.excluded)) == \
        (fp.digest, json.loads(json.dumps(dict(fp.payload))), dict(fp.excluded))
    assert Launch.from_dict.__qualname__ == "Launch.from_dict"


def test_snapshot_round_trip_keeps_the_launch(project):
    p = parent(project)
    c = child(p.snapshot())
    assert c.from_snapshot and c.fingerprint.digest == p.fingerprint.digest
    assert c.options(c.features["demo_patch"]) == {"n": 5}
    assert c.launch.feature_files == p.launch.feature_files
    assert {os.path.basename(f) for f, _ in c.launch.feature_files} == {  # local and shipped
        "demo_patch.py", "autotune_keep.py", "folded_fence.py"}


def test_ill_typed_option_in_snapshot_is_refused_not_installed(project):
    data = json.loads(parent(project).snapshot())
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = "abc"
    with pytest.raises(SnapshotError, match=r"DEMO_PATCH_N='abc'.*accepted: an integer in \[1, 8\]"):
        child(json.dumps(data))
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = 99      # out of its declared bounds
    with pytest.raises(SnapshotError, match="DEMO_PATCH_N=99"):
        child(json.dumps(data))


@pytest.mark.parametrize("key, value, accepted", [
    ("DEMO_PATCH", "on", "a JSON boolean"),          # a variable's spelling, cast_bool accepts it
    ("DEMO_PATCH", "true", "a JSON boolean"),
    ("DEMO_PATCH", 1, "a JSON boolean"),
    ("DEMO_PATCH", 0, "a JSON boolean"),
    ("DEMO_PATCH", "", "a JSON boolean"),            # empty text is "off" in a variable
    ("DEMO_PATCH_N", "5", "a JSON integer"),
    ("DEMO_PATCH_N", " 5", "a JSON integer"),
    ("DEMO_PATCH_N", 5.0, "an integer"),
])
def test_snapshot_values_are_checked_by_json_type_not_cast_like_variables(project, key, value, accepted):
    """A snapshot value is the JSON the launch wrote: a flag is a JSON boolean and an int option a
    JSON integer; a string or number the variable rules would cast is refused, naming the key."""
    data = json.loads(parent(project).snapshot())
    data["resolution"]["values"][key]["value"] = value
    with pytest.raises(SnapshotError, match=rf"snapshot value {key}=.*accepted: {accepted}"):
        child(json.dumps(data))


@pytest.mark.parametrize("key, value", [("STRICT", "true"), ("STRICT", 1), ("LOG_LEVEL", " info")])
def test_snapshot_reserved_settings_are_checked_by_json_type(project, key, value):
    data = json.loads(parent(project).snapshot())
    data["resolution"]["reserved"][key] = value
    with pytest.raises(SnapshotError, match=rf"reserved setting {key}=.*accepted: a JSON"):
        child(json.dumps(data))


@pytest.mark.parametrize("where, mutate, message", [
    ("pid", lambda d: d.update(pid="1"), r"snapshot\.pid = '1': Input should be a valid integer"),
    ("env", lambda d: d.update(env={"A": 1}), r"snapshot\.env\.A = 1: Input should be a valid string"),
    ("secret", lambda d: d["resolution"]["values"]["DEMO_PATCH"].update(secret="yes"),
     r"values\.DEMO_PATCH\.secret = 'yes': Input should be a valid boolean"),
    ("missing", lambda d: d["resolution"].pop("files"), r"snapshot\.resolution\.files is missing"),
    ("extra", lambda d: d["fingerprint"].update(salt=1), r"unknown key snapshot\.fingerprint\.salt"),
])
def test_snapshot_schema_errors_name_the_path_and_what_is_accepted(project, where, mutate, message):
    data = json.loads(parent(project).snapshot())
    mutate(data)
    with pytest.raises(SnapshotError, match=message):
        child(json.dumps(data))


def test_snapshot_cannot_name_code_to_run(project, tmp_path):
    launched = parent(project)
    data = json.loads(launched.snapshot())
    # an entry point no installed distribution declares
    forged = copy.deepcopy(data)
    forged["entry_points"] = [["evil", "os:system"]]
    with pytest.raises(SnapshotError, match="os:system are not declared by any installed distribution"):
        child(json.dumps(forged))
    # a .py file dropped into the features dir after the launch is never imported
    marker = tmp_path / "ran"
    (project.feats / "dropped.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    c = child(json.dumps(data))
    assert not marker.exists() and "dropped" not in c.features and set(c.features) == set(launched.features)
    # a file outside the features dir, even with its right digest
    outside = tmp_path / "evil.py"
    outside.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    import hashlib

    forged = copy.deepcopy(data)
    forged["feature_files"].append([str(outside), hashlib.sha256(outside.read_bytes()).hexdigest()])
    with pytest.raises(SnapshotError, match="not a \\*.py file directly in features_dir"):
        child(json.dumps(forged))
    assert not marker.exists()


def test_feature_file_edited_during_the_launch_is_refused(project):
    raw = parent(project).snapshot()
    path = project.feats / "demo_patch.py"
    path.write_text(path.read_text() + "\n# edited\n")
    with pytest.raises(SnapshotError, match="changed since the launch read it"):
        child(raw)


def test_large_launch_spills_to_a_private_file_and_exec_still_works(project, tmp_path):
    p = build([project.settings], None, environ={}, argv=["prog"] + [f"--arg{i}" for i in range(13000)],
              features_dir=project.feats, use_snapshot=False, configure_logging=False)
    raw = p.snapshot()
    path = spill_path(raw)
    try:
        assert path and len(raw) < 200 and len(json.dumps(p.launch.to_dict())) > 128 * 1024
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        # a real exec with the variable in its environment (the 128 KiB cliff is gone)
        assert subprocess.run(["true"], env={"DSV41_SNAPSHOT": raw}).returncode == 0
        c = child(raw)
        assert c.fingerprint.digest == p.fingerprint.digest and len(c.fingerprint.payload["argv"]) == 13001
        Path(path).write_text(Path(path).read_text().replace("--arg1", "--argX", 1))
        with pytest.raises(SnapshotError, match="does not have the sha256"):
            child(raw)
        os.chmod(path, 0o644)
        with pytest.raises(SnapshotError, match="not a private regular file"):
            child(raw)
    finally:
        Path(path).unlink(missing_ok=True)


def _hostile(project, tmp_path) -> dict[str, str]:
    """name -> hostile DSV41_SNAPSHOT value."""
    good = json.loads(parent(project).snapshot())

    def mutated(fn):
        d = copy.deepcopy(good)
        fn(d)
        return json.dumps(d)

    spill = tmp_path / "spill.json"
    spill.write_text("{}")
    os.chmod(spill, 0o600)
    return {
        "garbage": "\ufffdnot json at all",
        "json but not an object": "[1, 2, 3]",
        "wrong version": mutated(lambda d: d.update(v=1)),
        "version as bool": mutated(lambda d: d.update(v=True)),
        "version 1, nothing else": '{"v":1}',
        "missing resolution": mutated(lambda d: d.pop("resolution")),
        "missing values": mutated(lambda d: d["resolution"].pop("values")),
        "missing a key of a feature": mutated(lambda d: d["resolution"]["values"].pop("DEMO_PATCH_N")),
        "values as a list": mutated(lambda d: d["resolution"].update(values=[])),
        "value entry as a string": mutated(lambda d: d["resolution"]["values"].update(DEMO_PATCH="x")),
        "pid as a string": mutated(lambda d: d.update(pid="1")),
        "env of numbers": mutated(lambda d: d.update(env={"A": 1})),
        "fingerprint digest forged": mutated(lambda d: d["fingerprint"].update(digest="zz")),
        "flag 'maybe'": mutated(lambda d: d["resolution"]["values"]["DEMO_PATCH"].update(value="maybe")),
        "option 'abc'": mutated(lambda d: d["resolution"]["values"]["DEMO_PATCH_N"].update(value="abc")),
        "key of no feature": mutated(lambda d: d["resolution"]["values"].update(
            EVIL={"key": "EVIL", "feature": "demo_patch", "option": None, "value": True,
                  "source": "x", "chain": []})),
        "option labelled as flag": mutated(lambda d: d["resolution"]["values"]["DEMO_PATCH_N"].update(
            option=None)),
        "strict 'sometimes'": mutated(lambda d: d["resolution"]["reserved"].update(STRICT="sometimes")),
        "rank_guard bogus": mutated(lambda d: d["resolution"]["reserved"].update(RANK_GUARD="bogus")),
        "unknown top key": mutated(lambda d: d.update(extra=1)),
        "unknown entry point": mutated(lambda d: d.update(entry_points=[["x", "os:system"]])),
        "entry point not a pair": mutated(lambda d: d.update(entry_points=[["x"]])),
        "feature file digest forged": mutated(lambda d: d["feature_files"][0].__setitem__(1, "0" * 64)),
        "feature file outside the dir": mutated(lambda d: d["feature_files"][0].__setitem__(
            0, "/etc/passwd")),
        "oversized inline": json.dumps({"v": 2, "pad": "x" * (2 * 1024 * 1024)}),
        "deeply nested": "[" * 100000 + "]" * 100000,
        "spill digest wrong": f"file:{spill}#sha256={'0' * 64}",
        "spill path missing": f"file:{tmp_path}/nope.json#sha256={'0' * 64}",
        "spill reference malformed": "file:relative/path",
    }


def test_hostile_snapshot_table(project, tmp_path):
    """Every hostile snapshot: strict -> SnapshotError naming DSV41_SNAPSHOT (never a KeyError or
    TypeError); non-strict -> resolved in this process and the refusal said."""
    relaxed = tmp_path / "relaxed.toml"
    relaxed.write_text("[default]\nstrict = false\ndemo_patch = true\n")
    for name, raw in _hostile(project, tmp_path).items():
        with pytest.raises(SnapshotError) as exc:
            child(raw, DSV41_SETTINGS=str(project.settings))
        assert str(exc.value).startswith("DSV41_SNAPSHOT refused"), name
        rt = build(None, None, environ={"DSV41_SNAPSHOT": raw, "DSV41_SETTINGS": str(relaxed)},
                   argv=["prog"], features_dir=project.feats, configure_logging=False)
        assert not rt.from_snapshot and rt.snapshot_refused.startswith("DSV41_SNAPSHOT refused"), name
        assert rt.value(rt.features["demo_patch"]) is True, name


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hypothesis_no_snapshot_json_yields_an_internal_error(project, data):
    """Any JSON, or a valid snapshot with any one part replaced by any JSON: the child either uses
    a snapshot it fully checked or raises SnapshotError; nothing else escapes."""
    good = json.loads(parent(project).snapshot())
    if data.draw(st.booleans()):
        raw = json.dumps(data.draw(_json))
    else:
        paths = list(_paths(good))[1:]
        path = data.draw(st.sampled_from(paths))
        d = copy.deepcopy(good)
        holder = d
        for p in path[:-1]:
            holder = holder[p]
        holder[path[-1]] = data.draw(_json)
        raw = json.dumps(d)
    try:
        rt = child(raw, DSV41_SETTINGS=str(project.settings))
    except SnapshotError:
        return
    # accepted: every value is what its declaration allows
    assert rt.from_snapshot
    assert isinstance(rt.options(rt.features["demo_patch"])["n"], int)
    assert isinstance(rt.value(rt.features["demo_patch"]), bool)


def test_snapshot_spill_fifo_and_directory_are_snapshot_errors(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((fifo, "is a FIFO, not a regular file"),
                         (tmp_path, "is a directory, not a regular file")):
        with pytest.raises(SnapshotError, match=reason):
            no_block(child, f"file:{path}#sha256={'0' * 64}")


def test_huge_int_in_snapshot_is_a_snapshot_error(project):
    data = json.loads(parent(project).snapshot())
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = "9" * 5000
    with pytest.raises(SnapshotError, match="too long"):
        child(json.dumps(data))


def test_any_exception_reading_the_snapshot_is_a_snapshot_error(project, monkeypatch):
    import dsv41_flags.snapshot as _launch

    def boom(*a, **k):
        raise RecursionError("deep")

    monkeypatch.setattr(_launch, "materialize", boom)
    with pytest.raises(SnapshotError, match="RecursionError: deep"):
        child(parent(project).snapshot())


def test_fingerprint_digest_is_recomputed(project):
    data = json.loads(parent(project).snapshot())
    data["fingerprint"]["payload"]["argv"] = ["forged"]
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))
    data = json.loads(parent(project).snapshot())
    data["fingerprint"]["digest"] = "a" * 64
    with pytest.raises(SnapshotError, match="is not the sha256 of its payload"):
        child(json.dumps(data))


def test_child_variable_disagreeing_with_snapshot_is_reported(make_runtime):
    parent = make_runtime(None, env={"DSV41_FOLDED_FENCE": "1"})
    child = build(None, None, environ={"DSV41_SNAPSHOT": parent.snapshot(), "DSV41_FOLDED_FENCE": "0",
                                       "DSV41_ENV": "tp4"}, argv=[], configure_logging=False)
    assert child.value(child.features["folded_fence"]) is True       # the snapshot wins...
    notes = " ".join(child.snapshot_notes)                            # ...and says so
    assert "DSV41_FOLDED_FENCE='0'" in notes and "DSV41_ENV='tp4'" in notes
    with pytest.raises(SnapshotError, match="not JSON"):          # strict: refused, never ignored
        build(None, None, environ={"DSV41_SNAPSHOT": "{not json"}, argv=[],
              configure_logging=False, features_dir=FEATURES_DIR)
    garbage = build(None, None, environ={"DSV41_SNAPSHOT": "{not json", "DSV41_STRICT": "0"},
                    argv=[], configure_logging=False, features_dir=FEATURES_DIR)
    assert not garbage.from_snapshot and "not JSON" in garbage.snapshot_refused


def test_leftover_snapshot_is_reported(make_runtime):
    parent = make_runtime(None, env={"DSV41_FOLDED_FENCE": "1"})
    child = build(None, None, environ={"DSV41_SNAPSHOT": parent.snapshot()}, argv=[],
                  configure_logging=False)
    assert any("DSV41_FOLDED_FENCE is not set here" in n for n in child.snapshot_notes)


@pytest.mark.parametrize("marker", ["garbage\x1b", "1:" + "0" * 64])
def test_a_launch_marker_that_names_another_launch_is_said(tmp_path, marker):
    """A ``DSV41_LAUNCH`` beside a snapshot of another launch (left over, or set by hand) is
    noted (``snapshot.mismatch``); the snapshot's launch is the one run."""
    from dsv41_flags.assembly import build

    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\n")
    env = {"DSV41_SETTINGS": str(settings)}
    parent = build(None, None, environ=env, argv=["prog"], use_snapshot=False,
                   configure_logging=False)
    env = {**env, "DSV41_SNAPSHOT": parent.snapshot(), "DSV41_LAUNCH": marker}
    child = build(None, None, environ=env, argv=["prog"], configure_logging=False)
    assert child.from_snapshot
    assert any("DSV41_LAUNCH" in n and "another launch" in n for n in child.snapshot_notes)
    same = build(None, None, environ={**env, "DSV41_LAUNCH": parent.launch_marker()},
                 argv=["prog"], configure_logging=False)
    assert not any("DSV41_LAUNCH" in n for n in same.snapshot_notes)
