"""Launch fingerprint, sidecar and diffs (issue 4)."""
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dsv41_flags import SettingsError, read_sidecar, write_sidecar
from dsv41_flags._fingerprint import diff, matches, volatile_names

SETTINGS = """
[default]
folded_fence = false
autotune_keep = false
[default.fingerprint]
prefixes = ["SGLANG_", "DSV41_", "NCCL_"]
volatile = ["SGLANG_RUN_ID", "DSV41_DRAFT_TAU"]
volatile_argv = ["--port", "--host"]
[tp4.fingerprint]
volatile = ["DSV41_ROUTE_STATS"]
"""
HS = hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=8)
VALUES = st.text(alphabet="abc019.-", max_size=6)


def fp_of(make_runtime, env=None, argv=(), settings=SETTINGS, profile=None):
    rt = make_runtime(settings, env=env, argv=argv, profile=profile)
    return rt.fingerprint


def test_volatile_names_owned_by_features_and_settings(make_runtime):
    rt = make_runtime(SETTINGS, profile="tp4")
    names = volatile_names(rt.resolution, list(rt.features.values()))
    assert names["DSV41_FOLDED_FENCE"] == "feature folded_fence"
    assert names["DSV41_AUTOTUNE_KEEP"] == "feature autotune_keep"
    assert names["SGLANG_RUN_ID"].endswith("settings.toml [default]")
    assert names["DSV41_ROUTE_STATS"].endswith("settings.toml [tp4]")


def test_run_id_and_port_are_volatile(make_runtime):
    a = fp_of(make_runtime, {"SGLANG_RUN_ID": "1"}, ["serve", "--port", "3000", "--tp", "4"])
    b = fp_of(make_runtime, {"SGLANG_RUN_ID": "2"}, ["serve", "--port=4000", "--tp", "4"])
    assert a.digest == b.digest
    assert a.payload["argv"] == ["serve", "--tp", "4"]
    assert "SGLANG_RUN_ID" in a.excluded and "--port" in a.excluded


def test_non_volatile_env_changes_it(make_runtime):
    assert fp_of(make_runtime, {"SGLANG_X": "1"}).digest != fp_of(make_runtime, {"SGLANG_X": "2"}).digest


def test_profile_volatile_only_on_that_profile(make_runtime):
    assert fp_of(make_runtime, {"DSV41_ROUTE_STATS": "1"}, profile="tp4").digest == \
        fp_of(make_runtime, {}, profile="tp4").digest
    with pytest.raises(SettingsError):  # on default it is an unknown DSV41_ variable (strict)
        fp_of(make_runtime, {"DSV41_ROUTE_STATS": "1"})


NONVOL = SETTINGS.replace('autotune_keep = false', 'autotune_keep = false\nautotune_keep_keep_old = 3')


def test_flag_enters_by_resolved_value_whatever_its_source(make_runtime, tmp_path):
    # a non-volatile option: set in the file or by the variable gives the same fingerprint
    from_file = fp_of(make_runtime, settings=NONVOL.replace("keep_old = 3", "keep_old = 5"))
    from_env = fp_of(make_runtime, {"DSV41_AUTOTUNE_KEEP_KEEP_OLD": "5"}, settings=NONVOL)
    assert from_file.payload == from_env.payload
    assert from_file.digest == from_env.digest


def test_toggling_non_volatile_flag_in_file_changes_it(make_runtime, tmp_path):
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "shape.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='shape', "
                                    "target='json', install=lambda m, c: None, summary='s', engine='')\n")
    off = make_runtime("[default]\nshape = false\n", features_dir=feats).fingerprint
    on = make_runtime("[default]\nshape = true\n", features_dir=feats).fingerprint
    via_env = make_runtime("[default]\n", env={"DSV41_SHAPE": "yes"}, features_dir=feats).fingerprint
    assert off.digest != on.digest and on.digest == via_env.digest
    assert [c["key"] for c in diff(off.payload, on.payload)] == ["SHAPE"]


@HS
@given(env=st.dictionaries(NAMES, VALUES, max_size=6), data=st.data())
def test_order_of_variables_irrelevant(make_runtime, env, data):
    env = {f"SGLANG_{k}": v for k, v in env.items()}
    shuffled = dict(data.draw(st.permutations(list(env.items()))))
    assert fp_of(make_runtime, env).digest == fp_of(make_runtime, shuffled).digest


@HS
@given(env=st.dictionaries(NAMES, VALUES, max_size=4), run_id=VALUES, tau=VALUES, port=st.integers(1, 65535))
def test_volatile_changes_never_change_it(make_runtime, env, run_id, tau, port):
    env = {f"NCCL_{k}": v for k, v in env.items()}
    base = fp_of(make_runtime, env, ["x", "--port", "1"])
    changed = fp_of(make_runtime, {**env, "SGLANG_RUN_ID": run_id, "DSV41_DRAFT_TAU": tau,
                                   "DSV41_FOLDED_FENCE": "1"}, ["x", "--port", str(port)])
    assert base.digest == changed.digest


@HS
@given(env=st.dictionaries(NAMES, VALUES, max_size=4), key=NAMES, a=VALUES, b=VALUES)
def test_non_volatile_change_always_changes_it(make_runtime, env, key, a, b):
    if a == b:
        return
    env = {f"SGLANG_{k}": v for k, v in env.items()}
    name = f"SGLANG_{key}"
    if name == "SGLANG_RUN_ID":
        return
    assert fp_of(make_runtime, {**env, name: a}).digest != fp_of(make_runtime, {**env, name: b}).digest


@HS
@given(value=st.sampled_from(["yes", "1", "on", "TRUE", " true "]))
def test_source_independence(make_runtime, tmp_path, value):
    feats = tmp_path / "feats"
    feats.mkdir(exist_ok=True)
    (feats / "shape.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature(name='shape', "
                                    "target='json', install=lambda m, c: None, summary='s', engine='')\n")
    a = make_runtime("[default]\nshape = true\n", features_dir=feats).fingerprint
    b = make_runtime("[default]\nshape = false\n", env={"DSV41_SHAPE": value}, features_dir=feats).fingerprint
    assert a.digest == b.digest


def test_sidecar_roundtrip_and_atomic(make_runtime, tmp_path):
    fp = fp_of(make_runtime, {"SGLANG_X": "1"})
    path = write_sidecar(tmp_path / "cache.launch", fp)
    side = read_sidecar(path)
    assert matches(side, fp) and side.payload == json.loads(json.dumps(fp.payload))
    assert [p.name for p in tmp_path.iterdir()] == ["cache.launch", "settings.toml"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["cache.launch", "settings.toml"]


def test_sidecar_write_failure_leaves_old_file_and_no_temp(make_runtime, tmp_path, monkeypatch):
    fp = fp_of(make_runtime)
    path = write_sidecar(tmp_path / "c.launch", fp)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_sidecar(path, fp_of(make_runtime, {"SGLANG_Y": "2"}))
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_seed_era_sidecar_is_a_mismatch(make_runtime, tmp_path):
    fp = fp_of(make_runtime)
    legacy = tmp_path / "x.launch"
    legacy.write_text(fp.digest + "\n")
    side = read_sidecar(legacy)
    assert side.legacy and not matches(side, fp)


def test_unreadable_sidecar_is_a_mismatch(make_runtime, tmp_path):
    fp = fp_of(make_runtime)
    (tmp_path / "x.launch").write_text("{half")
    side = read_sidecar(tmp_path / "x.launch")
    assert side.error and not matches(side, fp)
    assert read_sidecar(tmp_path / "missing.launch").error
