"""Launch fingerprint, sidecar and diffs: volatile names, engine facts, the program's identity (argv normalised as CPython and sglang read it)."""
import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dsv41_flags import SettingsError
from dsv41_flags.cache_keeping import diff, matches, read_sidecar, write_sidecar
from dsv41_flags.engines.sglang.facts import FINGERPRINT as ENGINE
from dsv41_flags.fingerprint import normalize_argv, volatile_names

from ._child import run_cmd

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
    assert names["DSV41_FOLDED_FENCE"] == "feature folded_fence (declared volatile=)"
    assert names["DSV41_AUTOTUNE_KEEP"] == "feature autotune_keep (declared volatile=)"
    # declared by the engine adapter and (again) by this file: both are named
    assert names["SGLANG_RUN_ID"].startswith("engine default (shipped for sglang 0.5.23")
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
    if name in ENGINE.volatile:  # SGLANG_RUN_ID, SGLANG_PORT...: volatile by the engine's default
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
    assert side.payload is None and side.error and not matches(side, fp)


def test_unreadable_sidecar_is_a_mismatch(make_runtime, tmp_path):
    fp = fp_of(make_runtime)
    (tmp_path / "x.launch").write_text("{half")
    side = read_sidecar(tmp_path / "x.launch")
    assert side.error and not matches(side, fp)
    assert read_sidecar(tmp_path / "missing.launch").error


# ------------------------------------------------------------------ engine facts
MINIMAL = "[default]\nfolded_fence = false\n"   # an operator's own file: no fingerprint table
LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "16"]


def test_minimal_settings_fresh_run_id_same_fingerprint(make_runtime):
    """Sglang writes a fresh SGLANG_RUN_ID on every launch; with an operator's own
    settings.toml (no fingerprint table) two launches of the same command agree."""
    a = fp_of(make_runtime, {"SGLANG_RUN_ID": "sglang-run-1.5-7", "SGLANG_X": "1"}, LAUNCH, MINIMAL)
    b = fp_of(make_runtime, {"SGLANG_RUN_ID": "sglang-run-2.5-9", "SGLANG_X": "1"}, LAUNCH, MINIMAL)
    assert a.digest == b.digest
    assert a.excluded["SGLANG_RUN_ID"].startswith("engine default (shipped for sglang 0.5.23: rewritten")
    # the engine's prefixes enter without being listed in the file
    assert a.payload["env"] == {"SGLANG_X": "1"}
    assert fp_of(make_runtime, {"SGLANG_X": "2"}, LAUNCH, MINIMAL).digest != a.digest


@pytest.mark.parametrize("name", sorted(n for n in ENGINE.volatile if not n.startswith("-")))
def test_every_engine_volatile_variable_leaves_the_fingerprint(make_runtime, name):
    """Every variable the engine rewrites per launch or per node."""
    assert fp_of(make_runtime, {name: "1"}, LAUNCH, MINIMAL).digest == \
        fp_of(make_runtime, {name: "2"}, LAUNCH, MINIMAL).digest


def test_operator_settings_add_to_engine_defaults(make_runtime):
    """An operator's table adds prefixes and volatile names; the engine's stay."""
    text = MINIMAL + '[default.fingerprint]\nprefixes = ["SPARK_"]\nvolatile = ["SPARK_TRACE"]\n'
    base = fp_of(make_runtime, {"SPARK_X": "1", "SGLANG_X": "1", "SGLANG_RUN_ID": "1"}, LAUNCH, text)
    assert base.payload["env"] == {"SPARK_X": "1", "SGLANG_X": "1"}
    same = fp_of(make_runtime, {"SPARK_X": "1", "SGLANG_X": "1", "SGLANG_RUN_ID": "2",
                                "SPARK_TRACE": "on"}, LAUNCH, text)
    assert same.digest == base.digest
    assert same.excluded["SPARK_TRACE"].startswith("settings file ")
    assert base.included["SPARK_X"].startswith("prefix SPARK_: settings file ")
    assert base.included["SGLANG_X"].startswith("prefix SGLANG_: engine default")


def test_legacy_sgl_prefix_is_hashed_as_the_engine_reads_it(make_runtime):
    """Sglang copies SGL_<X> to SGLANG_<X> at import (environ.py
    _handle_deprecated_envs), overwriting SGLANG_<X>: the legacy value wins."""
    def fp(env):
        return fp_of(make_runtime, env, LAUNCH, MINIMAL)

    assert fp({"SGL_ENABLE_JIT_DEEPGEMM": "0"}).digest != fp({"SGL_ENABLE_JIT_DEEPGEMM": "1"}).digest
    assert fp({"SGL_X": "1"}).digest == fp({"SGLANG_X": "1"}).digest
    both = fp({"SGL_X": "1", "SGLANG_X": "0"})
    assert both.digest == fp({"SGLANG_X": "1"}).digest
    assert both.payload["env"] == {"SGLANG_X": "1"}
    assert "overridden by SGL_X='1'" in both.included["SGLANG_X"]
    assert "enters as SGLANG_X" in both.excluded["SGL_X"]
    # a legacy spelling of a volatile variable is volatile too
    assert fp({"SGL_RUN_ID": "1"}).digest == fp({"SGL_RUN_ID": "2"}).digest == fp({}).digest


def test_field_alias_canonical_name_wins(make_runtime):
    """Env*WithAlias fields read their deprecated name only when the canonical
    one is unset."""
    old, new = "SGLANG_USE_TRITON_ROUTER_SUM", "SGLANG_USE_CUSTOM_ROUTER_SUM"
    def fp(env):
        return fp_of(make_runtime, env, LAUNCH, MINIMAL)

    assert fp({old: "1"}).digest == fp({new: "1"}).digest
    assert fp({old: "1", new: "0"}).digest == fp({new: "0"}).digest


NODE = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "16", "--nnodes", "2"]


def test_nodes_of_one_launch_agree(make_runtime):
    """``--node-rank`` and the rendezvous address differ between the nodes (and restarts)
    of one launch without changing a kernel."""
    n0 = fp_of(make_runtime, {}, NODE + ["--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000"], MINIMAL)
    n1 = fp_of(make_runtime, {}, NODE + ["--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"], MINIMAL)
    restart = fp_of(make_runtime, {}, NODE + ["--node-rank=1", "--nccl-init-addr=10.0.0.9:6000",
                                              "--nccl-port", "29999", "--host", "0.0.0.0",
                                              "--port", "30001"], MINIMAL)
    assert n0.digest == n1.digest == restart.digest
    assert n0.payload["argv"] == ["sglang.launch_server", "--model-path", "m", "--tp-size", "16",
                                  "--nnodes", "2"]
    assert n0.excluded["--node-rank"].startswith("engine default")
    # what the nodes agree on still counts
    other = fp_of(make_runtime, {}, NODE[:-1] + ["4", "--node-rank", "0"], MINIMAL)
    assert other.digest != n0.digest


#: what one node of a launch places differently from another: (variables, launch options)
PLACEMENT = [
    ({"SGLANG_CPU_OMP_THREADS_BIND": "0"}, {"SGLANG_CPU_OMP_THREADS_BIND": "1"}),
    ({"SGLANG_CPU_OMP_THREADS_BIND": "0-31|32-63"}, {"SGLANG_CPU_OMP_THREADS_BIND": "64-95|96-127"}),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}),
    ({"NCCL_SOCKET_IFNAME": "eth0"}, {"NCCL_SOCKET_IFNAME": "ens5"}),
    ({"SGLANG_HOST_IP": "10.0.0.1"}, {"SGLANG_HOST_IP": "10.0.0.2"}),
    ({"SGLANG_LOCAL_IP_NIC": "eth0"}, {"SGLANG_LOCAL_IP_NIC": "bond0"}),
    ({"NCCL_IB_HCA": "mlx5_0"}, {}),
]


@pytest.mark.parametrize("env0, env1", PLACEMENT)
def test_per_node_placement_leaves_one_fingerprint_per_launch(make_runtime, env0, env1):
    """The nodes of one launch bind other cores, see other devices, name other interfaces and
    addresses: one launch, one fingerprint."""
    n0 = fp_of(make_runtime, env0, NODE + ["--node-rank", "0", "--base-gpu-id", "0"], MINIMAL)
    n1 = fp_of(make_runtime, env1, NODE + ["--node-rank", "1", "--base-gpu-id", "4"], MINIMAL)
    assert n0.digest == n1.digest
    assert not set(env0) & set(n0.payload["env"])


# ------------------------------------------------------------------ volatile names
def _feature_file(tmp_path, name, body):
    feats = tmp_path / "feats"
    feats.mkdir(exist_ok=True)
    (feats / f"{name}.py").write_text("from dsv41_flags import Feature, Option\n" + body)
    return feats


def test_misspelt_volatile_name_is_a_declaration_error(make_runtime, tmp_path):
    """A volatile name that matches no flag, option or engine prefix."""
    from dsv41_flags import DeclarationError
    feats = _feature_file(tmp_path, "cap", "FEATURE = Feature(name='cap', target='json', "
                          "install=lambda m, c: None, summary='s', engine='', "
                          "options=(Option('new_tokens', 'int', 4),), volatile=('DSV41_CAP_NEW_TOKEN',))\n")
    with pytest.raises(DeclarationError) as exc:
        make_runtime("[default]\n", features_dir=feats)
    msg = str(exc.value)
    assert "'DSV41_CAP_NEW_TOKEN'" in msg and "did you mean DSV41_CAP_NEW_TOKENS?" in msg
    assert "cap.py" in msg


@pytest.mark.parametrize("name,ok", [("DSV41_OTHER", True), ("DSV41_OTHER_LIMIT", True),
                                     ("SGLANG_ANYTHING", True), ("SGL_LEGACY", True),
                                     ("NCCL_ALGO", True), ("--seed", True), ("DSV41_OTHR", False),
                                     ("SGLANGX_RUN_ID", False), ("-p", False), ("", False)])
def test_volatile_names_checked_against_the_whole_feature_set(make_runtime, tmp_path, name, ok):
    """Another feature's keys are known (checked at discovery, against the
    set); engine variables are known by prefix; launch options by their --spelling."""
    from dsv41_flags import DeclarationError
    feats = _feature_file(tmp_path, "other", "FEATURE = Feature(name='other', target='json', "
                          "install=lambda m, c: None, summary='s', engine='', "
                          "options=(Option('limit', 'int', 4),))\n")
    _feature_file(tmp_path, "user", "FEATURE = Feature(name='user', target='json', "
                  f"install=lambda m, c: None, summary='s', engine='', volatile=({name!r},))\n")
    if ok:
        make_runtime("[default]\n", features_dir=feats)
    else:
        with pytest.raises(DeclarationError, match="user.py.*volatile"):
            make_runtime("[default]\n", features_dir=feats)


def test_sglang_option_spellings_are_one_launch(make_runtime):
    """Sglang's parser reads aliases (--tensor-parallel-size, --ep,
    --nccl-init-addr) and unique abbreviations (--tp, --node-r) as their options; so does the
    fingerprint, for sglang's launchers only (the option table is read from sglang's source)."""
    def fp(args, settings=MINIMAL):
        return fp_of(make_runtime, {}, ["python", "-m", "sglang.launch_server", *args], settings)

    base = fp(["--model-path", "m", "--tp-size", "16", "--ep-size", "2"])
    assert fp(["--model", "m", "--tp", "16", "--ep", "2"]).digest == base.digest
    assert fp(["--model-path", "m", "--tensor-parallel-size=16", "--expert-parallel-size", "2",
               "--node-r", "1", "--nccl-init-addr", "h:1"]).digest == base.digest
    assert base.payload["argv"] == ["sglang.launch_server", "--model-path", "m", "--tp-size", "16",
                                    "--ep-size", "2"]
    assert "abbreviation of --tp-size" in fp(["--tp", "16"]).included["argv"]
    # another program's options are left alone
    other = fp_of(make_runtime, {}, ["serve", "--tp", "16"], MINIMAL)
    assert other.payload["argv"] == ["serve", "--tp", "16"]
    # a volatile option declared in settings under an alias is volatile under every spelling
    text = MINIMAL + '[default.fingerprint]\nvolatile_argv = ["--model"]\n'
    assert fp(["--model-path", "a"], text).digest == fp(["--model", "b"], text).digest


def test_sglang_option_table_is_shipped_data_not_read_from_the_machine():
    """The option table is the one shipped for the supported release (sglang 0.5.23), never read
    from the installed engine, so the fingerprint does not depend on the machine computing it
    (the engine tier checks the table equals the real parser; the wheel test computes the same
    fingerprint in an environment without sglang)."""
    import dsv41_flags.engines.sglang.facts as _sglang

    table = _sglang.server_options()
    assert _sglang.OPTIONS_FILE.name == "sglang_options.json" and _sglang.OPTIONS_FILE.is_file()
    assert _sglang.server_options_release() == "sglang 0.5.23"
    assert len(table) > 300 and table["--tensor-parallel-size"] == "--tp-size"
    assert not hasattr(_sglang, "_source_root")   # nothing reads the installed engine's source


def test_program_identity_is_kept():
    assert normalize_argv(["python", "-c", "a"]) != normalize_argv(["python", "-c", "b"])
    assert normalize_argv(["python3", "-X", "dev", "-c", "a", "--x=1"]) == ["-c", "a", "--x", "1"]
    assert normalize_argv(["python", "-m", "a.b", "1"]) == ["a.b", "1"]
    # the same kind, other spellings CPython accepts: options joined in one token, values attached
    assert normalize_argv(["python", "-Bc", "a"]) == normalize_argv(["python", "-ca"]) == ["-c", "a"]
    assert normalize_argv(["python", "-Im", "a.b"]) == normalize_argv(["python", "-ma.b"]) == ["a.b"]
    assert normalize_argv(["python", "-Xdev", "-Wignore", "-c", "b"]) == ["-c", "b"]
    assert normalize_argv(["python", "-u", "./x/prog.py", "1"]) == ["prog", "1"]


def test_code_changes_the_fingerprint_and_a_process_reads_its_own(program_cli, program):
    a = json.loads(program_cli("fingerprint", "--json", "--", "python", "-c", "a").stdout)["fingerprint"]
    b = json.loads(program_cli("fingerprint", "--json", "--", "python", "-c", "b").stdout)["fingerprint"]
    assert a != b
    # a process computing its own (no run, no snapshot) reads -c CODE from sys.orig_argv
    code = "import dsv41_flags; print(dsv41_flags.activate().fingerprint.digest)"
    env = {**program.env, "DSV41_LOG_LEVEL": "error"}
    own = run_cmd([sys.executable, "-c", code], env, program.dir).stdout.strip()
    typed = json.loads(program_cli("fingerprint", "--json", "--", "python", "-c", code,
                           env={"DSV41_LOG_LEVEL": "error"}).stdout)["fingerprint"]
    assert own == typed


def test_sglang_serve_is_sglang_launch_server(program_cli):
    def fp(*argv):
        return json.loads(program_cli("fingerprint", "--json", "--", *argv).stdout)["fingerprint"]

    served = fp("sglang", "serve", "org/model", "--tp", "4")
    assert served == fp("python", "-m", "sglang.launch_server", "--model-path", "org/model",
                        "--tp-size", "4")
    assert served == fp("sglang", "serve", "--model-type", "llm", "--model-path", "org/model",
                        "--tp=4")
    assert served != fp("sglang", "serve", "--model-type", "diffusion", "org/model", "--tp", "4")


def test_unknown_fingerprint_setting(make_runtime):
    with pytest.raises(SettingsError, match="fingerprint.prefix is not a fingerprint setting.*did you mean prefixes"):
        make_runtime('[default.fingerprint]\nprefix = ["X_"]\n')


@pytest.mark.parametrize("line", ['volatile = 5', 'volatile = "SGLANG_RUN_ID"', 'prefixes = [""]',
                                  'volatile_argv = [1]'])
def test_fingerprint_lists_are_strict(make_runtime, tmp_path, line):
    with pytest.raises(SettingsError) as exc:
        make_runtime(f"[default.fingerprint]\n{line}\n")
    assert f"{tmp_path / 'settings.toml'} [default]" in str(exc.value)
    assert "list of non-empty strings" in str(exc.value)


def _mod_path(tmp_path):
    pkg = tmp_path / "engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("")
    return pkg / "launch_server.py"


def test_normalize_argv(tmp_path, monkeypatch):
    script = _mod_path(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    typed = ["python3", "-u", "-m", "engine_pkg.launch_server", "--tp", "4"]
    as_sys_argv = [str(script), "--tp", "4"]
    full_python = [sys.executable, str(script), "--tp", "4"]
    assert normalize_argv(typed) == normalize_argv(as_sys_argv) == normalize_argv(full_python) == \
        ["engine_pkg.launch_server", "--tp", "4"]


def test_option_equals_spelling_gives_the_same_fingerprint():
    assert normalize_argv(["python", "-m", "x", "--tp=4", "--name", "a=b"]) == \
        normalize_argv(["python", "-m", "x", "--tp", "4", "--name", "a=b"]) == \
        ["x", "--tp", "4", "--name", "a=b"]


def test_script_name_is_the_same_typed_or_in_process(tmp_path, monkeypatch):
    (tmp_path / "serve.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert normalize_argv(["python", "serve.py", "--tp", "2"]) == \
        normalize_argv([str(tmp_path / "serve.py"), "--tp", "2"]) == ["serve", "--tp", "2"]
