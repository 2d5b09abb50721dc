"""Activation you can trust (issue 13, items 1-8, 13, 14): the launch value and its codec, the
error policy of every entry, once per process (threads, fork, retry, uninstall), truthful audit.

Tests that need a whole process (activate, fork, threads, the plugin and bootstrap entries) run
it as a fresh interpreter, so the test process's own environment and runtime stay untouched."""
from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dsv41_flags import FlagsError, SnapshotError
from dsv41_flags.snapshot import SPILL_BYTES, decode, encode, spill_path
from dsv41_flags.runtime import build
from dsv41_flags.launcher import BOOTSTRAP_DIR

CLI = str(Path(sys.executable).with_name("dsv41-flags"))

FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    n = ctx.options["n"]
    assert isinstance(n, int), n
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: f"patched n={n}"))
FEATURE = Feature(name="demo_patch", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="",
                  options=(Option("n", "int", 4, minimum=1, maximum=8),))
"""


@pytest.fixture
def demo(tmp_path):
    """A target module, a features dir with one feature (an int option ``n`` in [1, 8]) patching
    it, a settings file arming it, and a clean environment for subprocesses."""
    target = f"demo_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("class Worker:\n    def forward(self):\n        return 'stock'\n")
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(target)))
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ndemo_patch = true\ndemo_patch_n = 5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(settings), PYTHONPATH=str(tmp_path), DSV41_LOG_FORMAT="json")
    yield type("Demo", (), {"dir": tmp_path, "feats": feats, "settings": settings, "env": env,
                            "target": target})
    sys.modules.pop(target, None)


def parent(demo, **env):
    return build([demo.settings], None, environ=dict(env), argv=["prog"], features_dir=demo.feats,
                 use_snapshot=False, configure_logging=False)


def child(raw: str, **env):
    return build(None, None, environ={"DSV41_SNAPSHOT": raw, **env}, argv=["prog"],
                 configure_logging=False)


def events(stderr: str) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def run_py(demo, code: str, timeout=120, **env) -> subprocess.CompletedProcess:
    e = dict(demo.env)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=demo.dir,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ the launch value, its codec
def test_snapshot_round_trip_keeps_the_launch(demo):
    p = parent(demo)
    c = child(p.snapshot())
    assert c.from_snapshot and c.fingerprint.digest == p.fingerprint.digest
    assert c.options(c.features["demo_patch"]) == {"n": 5}
    assert c.launch.feature_files == p.launch.feature_files
    assert {os.path.basename(f) for f, _ in c.launch.feature_files} == {  # local and shipped
        "demo_patch.py", "autotune_keep.py", "folded_fence.py"}


def test_ill_typed_option_in_snapshot_is_refused_not_installed(demo):
    data = json.loads(parent(demo).snapshot())
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = "abc"
    with pytest.raises(SnapshotError, match=r"DEMO_PATCH_N='abc'.*accepted: an integer in \[1, 8\]"):
        child(json.dumps(data))
    data["resolution"]["values"]["DEMO_PATCH_N"]["value"] = 99      # out of its declared bounds
    with pytest.raises(SnapshotError, match="DEMO_PATCH_N=99"):
        child(json.dumps(data))


def test_snapshot_cannot_name_code_to_run(demo, tmp_path):
    launched = parent(demo)
    data = json.loads(launched.snapshot())
    # an entry point no installed distribution declares
    forged = copy.deepcopy(data)
    forged["entry_points"] = [["evil", "os:system"]]
    with pytest.raises(SnapshotError, match="os:system are not declared by any installed distribution"):
        child(json.dumps(forged))
    # a .py file dropped into the features dir after the launch is never imported
    marker = tmp_path / "ran"
    (demo.feats / "dropped.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
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


def test_feature_file_edited_during_the_launch_is_refused(demo):
    raw = parent(demo).snapshot()
    path = demo.feats / "demo_patch.py"
    path.write_text(path.read_text() + "\n# edited\n")
    with pytest.raises(SnapshotError, match="changed since the launch read it"):
        child(raw)


def test_large_launch_spills_to_a_private_file_and_exec_still_works(demo, tmp_path):
    p = build([demo.settings], None, environ={}, argv=["prog"] + [f"--arg{i}" for i in range(13000)],
              features_dir=demo.feats, use_snapshot=False, configure_logging=False)
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


def _hostile(demo, tmp_path) -> dict[str, str]:
    """name -> hostile DSV41_SNAPSHOT value."""
    good = json.loads(parent(demo).snapshot())

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
        "issue input 1": '{"v":1}',
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


def test_hostile_snapshot_table(demo, tmp_path):
    """Every hostile snapshot: strict -> SnapshotError naming DSV41_SNAPSHOT (never a KeyError or
    TypeError); non-strict -> resolved in this process and the refusal said."""
    relaxed = tmp_path / "relaxed.toml"
    relaxed.write_text("[default]\nstrict = false\ndemo_patch = true\n")
    for name, raw in _hostile(demo, tmp_path).items():
        with pytest.raises(SnapshotError) as exc:
            child(raw, DSV41_SETTINGS=str(demo.settings))
        assert str(exc.value).startswith("DSV41_SNAPSHOT refused"), name
        rt = build(None, None, environ={"DSV41_SNAPSHOT": raw, "DSV41_SETTINGS": str(relaxed)},
                   argv=["prog"], features_dir=demo.feats, configure_logging=False)
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
def test_hypothesis_no_snapshot_json_yields_an_internal_error(demo, data):
    """Any JSON, or a valid snapshot with any one part replaced by any JSON: the child either uses
    a snapshot it fully checked or raises SnapshotError; nothing else escapes."""
    good = json.loads(parent(demo).snapshot())
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
        rt = child(raw, DSV41_SETTINGS=str(demo.settings))
    except SnapshotError:
        return
    # accepted: every value is what its declaration allows
    assert rt.from_snapshot
    assert isinstance(rt.options(rt.features["demo_patch"])["n"], int)
    assert isinstance(rt.value(rt.features["demo_patch"]), bool)


# ------------------------------------------------------------------ error policy, every entry
def test_malformed_snapshot_under_the_plugin_entry_stops_with_an_event(demo):
    proc = run_py(demo, """
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """, DSV41_SNAPSHOT='{"v":1}')
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["entry"] == "sglang-plugin" and err["strict"] is True and "schema version" in err["cause"]
    assert err["pid"] > 0 and err["role"] and "Traceback" not in proc.stderr


def test_malformed_snapshot_under_the_bootstrap_never_runs_unpatched(demo):
    code = "print('RAN')"
    proc = run_py(demo, code, DSV41_SNAPSHOT='{"v":1}', PYTHONPATH=f"{BOOTSTRAP_DIR}{os.pathsep}{demo.dir}")
    assert proc.returncode == 3 and "RAN" not in proc.stdout
    assert "Error in sitecustomize" not in proc.stderr and "Traceback" not in proc.stderr
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["entry"] == "bootstrap" and "DSV41_SNAPSHOT refused" in err["cause"]
    # non-strict: resolved here, runs, says so
    relaxed = demo.dir / "relaxed.toml"
    relaxed.write_text("[default]\nstrict = false\ndemo_patch = true\n")
    proc = run_py(demo, f"import {demo.target} as m, dsv41_flags; print(m.Worker().forward(), "
                        f"dsv41_flags.current_runtime().from_snapshot)",
                  DSV41_SNAPSHOT='{"v":1}', DSV41_SETTINGS=str(relaxed),
                  PYTHONPATH=f"{BOOTSTRAP_DIR}{os.pathsep}{demo.dir}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["patched", "n=4", "False"]
    assert [e["event"] for e in events(proc.stderr)][:2] == ["flags.resolved", "snapshot.refused"]


def test_any_exception_while_activating_is_a_flags_error_and_exit_3(demo):
    # an install that raises something that is not a FlagsError, target already imported
    (demo.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(demo.target)).replace(
        'n = ctx.options["n"]', 'raise MemoryError("boom")'))
    proc = run_py(demo, f"""
        import {demo.target}
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert "MemoryError: boom" in err["cause"]
    assert {s["name"]: s["state"] for s in err["states"]}["demo_patch"] == "failed"
    # a non-FlagsError raised by the framework's own code path (an unreadable features dir entry)
    proc = run_py(demo, """
        import dsv41_flags.runtime as r
        def broken(*a, **k):
            raise ZeroDivisionError("internal")
        r.resolve_launch = broken
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """)
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["internal"] is True and "ZeroDivisionError: internal" in err["cause"]
    # non-strict: the process runs, the event says nothing is applied
    proc = run_py(demo, """
        import dsv41_flags.runtime as r
        def broken(*a, **k):
            raise ZeroDivisionError("internal")
        r.resolve_launch = broken
        import dsv41_flags_plugin as _plugin
        _plugin.load()
        print("BOOTED")
    """, DSV41_STRICT="0")
    assert proc.returncode == 0 and "BOOTED" in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["strict"] is False and "no feature is applied" in err["outcome"]


def test_settings_error_under_the_plugin_is_a_structured_event(demo):
    proc = run_py(demo, "import dsv41_flags_plugin as plugin\nplugin.load()\nprint('BOOTED')\n",
                  DSV41_DEMO_PATCH="maybe")
    assert proc.returncode == 3 and "BOOTED" not in proc.stdout
    (err,) = [e for e in events(proc.stderr) if e["event"] == "flags.error"]
    assert err["error_type"] == "SettingsError" and "DSV41_DEMO_PATCH='maybe'" in err["cause"]
    assert err["entry"] == "sglang-plugin" and err["pid"] and err["level"] == "error"


# ------------------------------------------------------------------ once per process, truly
def test_two_threads_activate_once(demo):
    proc = run_py(demo, f"""
        import threading, dsv41_flags, {demo.target} as m
        barrier = threading.Barrier(8)
        got = []
        def go():
            barrier.wait()
            got.append(dsv41_flags.activate())
        ts = [threading.Thread(target=go) for _ in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(len({{id(r) for r in got}}), m.Worker().forward())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "patched", "n=5"]
    names = [e["event"] for e in events(proc.stderr)]
    assert names.count("flags.resolved") == 1 and names.count("feature.installed") == 1


def test_forked_child_owns_its_runtime(demo):
    proc = run_py(demo, f"""
        import os, json, dsv41_flags
        rt = dsv41_flags.activate()                       # armed, target not imported yet
        pid = os.fork()
        if pid == 0:
            import {demo.target} as m                     # the inherited hook fires here
            again = dsv41_flags.activate()                # as sglang's plugin loader would
            print(json.dumps({{"child": os.getpid(), "same": again is dsv41_flags.current_runtime(),
                              "out": m.Worker().forward(),
                              "state": next(s for s in again.states() if s.name == "demo_patch").state}}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({{"parent_state": next(s for s in rt.states() if s.name == "demo_patch").state}}))
    """)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(l) for l in proc.stdout.splitlines()]
    c = lines[0]
    assert c["same"] and c["out"] == "patched n=5" and c["state"] == "installed"
    assert lines[1]["parent_state"] == "armed"
    ev = events(proc.stderr)
    installed = [e for e in ev if e["event"] == "feature.installed"]
    assert len(installed) == 1 and installed[0]["pid"] == c["child"] and installed[0]["role"] == "child"
    resolved = [(e["pid"], e["role"]) for e in ev if e["event"] == "flags.resolved"]
    assert resolved == [(resolved[0][0], "launcher"), (c["child"], "child")]


def test_failed_activation_raises_again_on_retry(demo):
    (demo.feats / "demo_patch.py").write_text(FEATURE.replace("TARGET", repr(demo.target)).replace(
        '"Worker.forward"', '"Worker.gone"'))
    proc = run_py(demo, f"""
        import {demo.target}, dsv41_flags
        for attempt in (1, 2):
            try:
                dsv41_flags.activate()
                print("RETURNED", attempt)
            except dsv41_flags.FlagsError as exc:
                print("RAISED", attempt, type(exc).__name__)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["RAISED 1 DriftError", "RAISED 2 ActivationError"]
    assert [e["event"] for e in events(proc.stderr)].count("flags.error") == 2


def test_uninstall_before_import_disarms(demo):
    proc = run_py(demo, f"""
        import dsv41_flags
        rt = dsv41_flags.activate()
        rt.uninstall()
        import {demo.target} as m
        print(m.Worker().forward(), next(s for s in rt.states() if s.name == "demo_patch").state)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stock", "uninstalled"]
    assert "feature.installed" not in [e["event"] for e in events(proc.stderr)]


def test_audit_lost_follows_what_the_engine_would_call(demo):
    proc = run_py(demo, f"""
        import dsv41_flags, {demo.target} as m
        rt = dsv41_flags.activate()
        assert next(s for s in rt.audit() if s.name == "demo_patch").state == "installed"
        class Worker:                       # the class itself replaced in the module
            def forward(self):
                return "other"
        m.Worker = Worker
        st = next(s for s in rt.audit() if s.name == "demo_patch")
        print(st.state, st.detail)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["lost", "Worker.forward"]


# ------------------------------------------------------------------ item 14: roles and ranks
def test_plugin_reads_ranks_before_the_first_event(demo):
    proc = run_py(demo, f"""
        import {demo.target}
        import dsv41_flags_plugin as _plugin
        def load_plugins():
            _plugin.load()
        def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank, pipe):
            load_plugins()
        run_scheduler_process(None, None, 0, 1, 0, None, None)
    """)
    assert proc.returncode == 0, proc.stderr
    ev = [e for e in events(proc.stderr) if e["event"] in ("flags.resolved", "feature.installed")]
    assert [e["event"] for e in ev] == ["flags.resolved", "feature.installed"]
    assert all(e["role"] == "scheduler" and e["tp_rank"] == 1 and e["pp_rank"] == 0 for e in ev)


def test_bootstrap_leaves_helpers_alone_and_defers_sglang_spawn_children():
    import dsv41_flags.activation as _activation
    import dsv41_flags.engines.sglang.processes as _sglang

    assert _activation.is_multiprocessing_helper(
        ["python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(3)"])
    assert _activation.is_spawn_child(
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4, "
         "pipe_handle=6)", "--multiprocessing-fork"])
    assert not _activation.is_spawn_child(["python", "-m", "sglang.launch_server"])

    def run_scheduler_process():
        pass

    run_scheduler_process.__module__ = "sglang.srt.managers.scheduler"
    assert _sglang.plugin_will_activate(run_scheduler_process) == _sglang.plugin_installed()
    assert not _sglang.plugin_will_activate(run_scheduler_process, {"SGLANG_PLUGINS": "other"})
    assert not _sglang.plugin_will_activate(print)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_run_spawn_child_and_resource_tracker(demo, method):
    """Under ``dsv41-flags run``: a spawned (or forkserver) child whose target is not an sglang
    entry activates before its target runs (role child, once); multiprocessing's resource tracker
    and forkserver never activate."""
    (demo.dir / "prog.py").write_text(textwrap.dedent(f"""
        import multiprocessing as mp, os
        def work():
            import {demo.target} as m, dsv41_flags
            print("CHILD", os.getpid(), m.Worker().forward().replace(" ", "_"), flush=True)
        if __name__ == "__main__":
            ctx = mp.get_context("METHOD")
            sem = ctx.Semaphore()                 # starts the resource tracker
            p = ctx.Process(target=work)
            p.start(); p.join(60)
    """).replace("METHOD", method))
    proc = subprocess.run([CLI, "run", "--", sys.executable, str(demo.dir / "prog.py")], env=demo.env,
                          capture_output=True, text=True, timeout=120, cwd=demo.dir)
    assert proc.returncode == 0, proc.stderr
    _, pid, out = [l for l in proc.stdout.splitlines() if l.startswith("CHILD")][0].split()
    assert out == "patched_n=5"
    resolved = [e for e in events(proc.stderr) if e["event"] == "flags.resolved"]
    assert [e["role"] for e in resolved] == ["launcher", "child"]      # no resource tracker
    assert resolved[1]["pid"] == int(pid)


@pytest.mark.parametrize("how", ["subclass", "pool"])
def test_run_spawn_child_of_a_process_subclass_or_a_pool_activates_before_its_code(demo, how):
    """Under ``dsv41-flags run``, a spawned child activates when its process object arrives (the
    mark its parent put on it), whatever runs there: a Process subclass with its own ``run``, a
    Pool worker."""
    (demo.dir / "prog.py").write_text(textwrap.dedent(f"""
        import multiprocessing as mp, os
        def work(_=None):
            import {demo.target} as m
            return f"CHILD {{os.getpid()}} " + m.Worker().forward().replace(" ", "_")
        class Mine(mp.get_context("spawn").Process):
            def run(self):
                print(work(), flush=True)
        if __name__ == "__main__":
            if "HOW" == "subclass":
                p = Mine(); p.start(); p.join(60)
            else:
                with mp.get_context("spawn").Pool(1) as pool:
                    print(pool.apply(work, (1,)), flush=True)
    """).replace("HOW", how))
    proc = subprocess.run([CLI, "run", "--", sys.executable, str(demo.dir / "prog.py")], env=demo.env,
                          capture_output=True, text=True, timeout=120, cwd=demo.dir)
    assert proc.returncode == 0, proc.stderr
    _, pid, out = [l for l in proc.stdout.splitlines() if l.startswith("CHILD")][0].split()
    assert out == "patched_n=5"
    resolved = [e for e in events(proc.stderr) if e["event"] == "flags.resolved"]
    assert [e["role"] for e in resolved] == ["launcher", "child"]
    assert resolved[1]["pid"] == int(pid)
