"""Install, ledger, drift, failure isolation, strict mode, audit, conflicts, events; a
feature armed only once its hook is registered; what reaches install unvalidated is a reported
failure."""
import sys
import textwrap
import types
import uuid

import pytest
from structlog.testing import capture_logs

from dsv41_flags import DeclarationError, DriftError, Feature
from dsv41_flags.discovery import discover

from ._child import parent


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A real importable target module + a features dir with features patching it."""
    name = f"demo_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        class Engine:
            def step(self, *, fast=False, n=1):
                return ["step", fast, n]
        def helper(x):
            return x + 1
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()

    def feature(fname, body, **decl):
        args = ", ".join(f"{k}={v!r}" for k, v in decl.items())
        (fdir / f"{fname}.py").write_text(textwrap.dedent(f"""
            from dsv41_flags import Feature, Option
            {textwrap.indent(textwrap.dedent(body), '            ').strip()}
            FEATURE = Feature(name={fname!r}, target={name!r}, install=install, summary="demo",
                              engine="", {args})
        """))

    yield type("Demo", (), {"name": name, "dir": fdir, "feature": staticmethod(feature)})
    sys.modules.pop(name, None)


WRAP = """
def install(module, ctx):
    def make(orig):
        def step(self, *a, **kw):
            return ["wrapped"] + orig(self, *a, **kw)
        return step
    ctx.patch(module.Engine, "step", make)
"""


def settings_for(*flags, strict=True):
    lines = "\n".join(f"{f} = true" for f in flags)
    return f"[default]\nstrict = {str(strict).lower()}\n{lines}\n"


def test_install_on_import_and_uninstall(demo, dsv41_flags_runtime):
    # through the test kit for feature authors (dsv41_flags.testing): a real activate()
    demo.feature("wrap_step", WRAP, requires=("Engine.step(fast)",))
    kit = dsv41_flags_runtime
    rt = kit.activate({"wrap_step": True}, features_dir=demo.dir)
    assert {s.name: s.state for s in rt.states()}["wrap_step"] == "armed"
    assert next(s for s in rt.audit() if s.name == "wrap_step").state == "pending"
    mod = __import__(demo.name)
    assert mod.Engine().step(n=2) == ["wrapped", "step", False, 2]
    st = next(s for s in rt.states() if s.name == "wrap_step")
    assert st.state == "installed" and st.patches == ("Engine.step",)
    assert kit.events("flags.resolved")[0]["armed"] == ["wrap_step"]
    (ev,) = [e for e in kit.events("feature.installed") if e["feature"] == "wrap_step"]
    assert ev["feature"] == "wrap_step" and ev["target"] == demo.name and ev["duration_ms"] >= 0
    assert ev["pid"] > 0 and "process" in ev
    # installing twice leaves exactly one wrapper level
    rt.install(rt.features["wrap_step"], mod)
    assert mod.Engine().step() == ["wrapped", "step", False, 1]
    rt.uninstall()
    assert mod.Engine().step() == ["step", False, 1]
    assert "step" in vars(mod.Engine)


def test_hook_fires_at_once_when_already_imported(demo, make_runtime):
    demo.feature("wrap_step", WRAP)
    mod = __import__(demo.name)
    rt = make_runtime(settings_for("wrap_step"), features_dir=demo.dir)
    rt.arm()
    assert next(s for s in rt.states() if s.name == "wrap_step").state == "installed"
    assert mod.Engine().step()[0] == "wrapped"


def test_off_feature_installs_nothing(demo, make_runtime):
    demo.feature("wrap_step", WRAP)
    rt = make_runtime(settings_for(), features_dir=demo.dir)
    rt.arm()
    mod = __import__(demo.name)
    assert mod.Engine().step() == ["step", False, 1]
    assert next(s for s in rt.states() if s.name == "wrap_step").state == "off"


def test_drift_strict_raises_naming_feature_target_and_missing(demo, make_runtime):
    demo.feature("wrap_step", WRAP, requires=("Engine.step(slow)", "Engine.gone", "helper"))
    rt = make_runtime(settings_for("wrap_step"), features_dir=demo.dir)
    rt.arm()
    with pytest.raises(DriftError) as exc:
        __import__(demo.name)
    msg = str(exc.value)
    assert "wrap_step" in msg and demo.name in msg and "Engine.step(slow)" in msg and "Engine.gone" in msg
    assert "helper" not in msg.split("missing", 1)[1]


def test_drift_not_strict_is_reported_and_nothing_patched(demo, dsv41_flags_runtime):
    demo.feature("wrap_step", WRAP, requires=("Engine.gone",))
    kit = dsv41_flags_runtime
    kit.activate({"wrap_step": True}, features_dir=demo.dir, strict=False)
    mod = __import__(demo.name)
    assert mod.Engine().step() == ["step", False, 1]
    assert kit.state("wrap_step") == "drifted" and "Engine.gone" in kit.states()["wrap_step"].detail
    assert [e["missing"] for e in kit.events("feature.drifted")] == [["Engine.gone"]]


def test_failure_is_isolated_and_rolled_back(demo, dsv41_flags_runtime):
    demo.feature("broken", """
        def install(module, ctx):
            ctx.patch(module, "helper", lambda orig: (lambda x: 0))
            raise ValueError("boom")
    """)
    demo.feature("wrap_step", WRAP)
    kit = dsv41_flags_runtime
    kit.activate({"broken": True, "wrap_step": True}, features_dir=demo.dir, strict=False)
    mod = __import__(demo.name)
    states = kit.states()
    assert states["broken"].state == "failed" and "boom" in states["broken"].detail
    assert states["wrap_step"].state == "installed"
    assert mod.helper(1) == 2                       # the failed feature's partial patch was undone
    failed = kit.events("feature.failed")[0]
    assert "ValueError: boom" in failed["traceback"]


def test_failure_strict_raises(demo, make_runtime):
    demo.feature("broken", "def install(module, ctx):\n    raise KeyError('x')\n")
    rt = make_runtime(settings_for("broken"), features_dir=demo.dir)
    rt.arm()
    with pytest.raises(DriftError, match="broken.*KeyError"):
        __import__(demo.name)


def test_audit_reports_lost_patch(demo, make_runtime):
    demo.feature("wrap_step", WRAP)
    rt = make_runtime(settings_for("wrap_step"), features_dir=demo.dir)
    rt.arm()
    mod = __import__(demo.name)
    mod.Engine.step = lambda self, **kw: "someone else"
    with capture_logs() as logs:
        st = next(s for s in rt.audit() if s.name == "wrap_step")
    assert st.state == "lost" and "Engine.step" in st.detail
    assert any(e["event"] == "feature.lost" for e in logs)


def test_conflict_order_follows_after(demo, make_runtime):
    body = """
def install(module, ctx):
    def make(orig):
        def step(self, *a, **kw):
            return [TAG] + orig(self, *a, **kw)
        return step
    ctx.patch(module.Engine, "step", make)
"""
    demo.feature("aaa", body.replace("TAG", "'aaa'"), after=("zzz",))
    demo.feature("zzz", body.replace("TAG", "'zzz'"))
    rt = make_runtime(settings_for("aaa", "zzz"), features_dir=demo.dir)
    rt.arm()
    with capture_logs() as logs:
        mod = __import__(demo.name)
    assert mod.Engine().step() == ["aaa", "zzz", "step", False, 1]   # zzz applied first
    conflict = [e for e in logs if e["event"] == "feature.conflict"][0]
    assert conflict["order"] == ["zzz", "aaa"] and conflict["attribute"] == "Engine.step"


def test_fixed_upstream_skips(tmp_path, make_runtime):
    (tmp_path / "feats").mkdir()
    (tmp_path / "feats" / "fixed.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='fixed', target='json', install=lambda m, c: 1/0, summary='s',\n"
        "                  engine='packaging>=1', fixed_in='>=1')\n")
    rt = make_runtime(settings_for("fixed"), features_dir=tmp_path / "feats")
    rt.arm()
    st = next(s for s in rt.states() if s.name == "fixed")
    assert st.state == "fixed-upstream" and "upstream carries the fix" in st.detail


def test_version_out_of_range_is_drift(tmp_path, make_runtime):
    (tmp_path / "feats").mkdir()
    (tmp_path / "feats" / "old.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='old', target='json', install=lambda m, c: None, summary='s',\n"
        "                  engine='packaging<1')\n")
    rt = make_runtime(settings_for("old", strict=False), features_dir=tmp_path / "feats")
    rt.arm()
    st = next(s for s in rt.states() if s.name == "old")
    assert st.state == "drifted" and "outside packaging<1" in st.detail


@pytest.mark.parametrize("decl,needle", [
    ("name='Bad'", "lower-case"), ("target='not a module'", "dotted module"),
    ("engine='sglang>>0.5'", "engine range"), ("requires=('a b',)", "requires entry"),
    ("requires='Engine.step'", "must be a tuple"), ("fixed_in='abc'", "fixed_in"),
])
def test_bad_declaration_names_the_file(tmp_path, decl, needle):
    fdir = tmp_path / "feats"
    fdir.mkdir()
    base = dict(name="'ok'", target="'json'", install="print", summary="'s'")
    key, value = decl.split("=", 1)
    base[key] = value
    (fdir / "bad.py").write_text("from dsv41_flags import Feature\nFEATURE = Feature("
                                 + ", ".join(f"{k}={v}" for k, v in base.items()) + ")\n")
    with pytest.raises(DeclarationError) as exc:
        discover(fdir, entry_points=False)
    assert str(fdir / "bad.py") in str(exc.value) and needle in str(exc.value)


def test_duplicate_flag_across_files(tmp_path):
    fdir = tmp_path / "feats"
    fdir.mkdir()
    for fname in ("a", "b"):
        (fdir / f"{fname}.py").write_text("from dsv41_flags import Feature\n"
                                          "FEATURE = Feature(name='same', target='json', install=print, summary='s')\n")
    with pytest.raises(DeclarationError, match="duplicates the name"):
        discover(fdir, entry_points=False)


def test_option_key_colliding_with_flag(tmp_path):
    fdir = tmp_path / "feats"
    fdir.mkdir()
    (fdir / "a.py").write_text("from dsv41_flags import Feature, Option\n"
                               "FEATURE = Feature(name='a', target='json', install=print, summary='s',"
                               " options=(Option('b', 'int', 1),))\n")
    (fdir / "ab.py").write_text("from dsv41_flags import Feature\n"
                                "FEATURE = Feature(name='a_b', target='json', install=print, summary='s')\n")
    with pytest.raises(DeclarationError, match="setting key A_B"):
        discover(fdir, entry_points=False)


def test_feature_modules_not_imported_as_top_level_features(make_runtime):
    make_runtime(None)
    assert "features" not in sys.modules or not hasattr(sys.modules["features"], "FEATURE")
    assert "dsv41_flags_features.folded_fence" in sys.modules


def test_state_listeners_see_every_change_and_one_that_raises_changes_nothing(demo, dsv41_flags_runtime):
    """Install, a live switch and its way back, a loss found by the audit: each is one record
    told to every listener, in order, each move one ``state.TRANSITIONS`` allows."""
    from dsv41_flags.state import may_move

    demo.feature("wrap_step", WRAP, live=True)
    kit = dsv41_flags_runtime
    rt = kit.activate({"wrap_step": True}, features_dir=demo.dir)
    seen = []
    rt.state_listeners.append(lambda st: seen.append((st.state, st.value)))
    rt.state_listeners.append(lambda st: 1 / 0)
    mod = __import__(demo.name)                       # installed after the listeners came
    assert mod.Engine().step()[0] == "wrapped"
    rt.switch("wrap_step", False, requested_by="test")
    assert mod.Engine().step()[0] == "step"
    rt.switch("wrap_step", True, requested_by="test")
    mod.Engine.step = lambda self, **kw: "someone else"
    rt.audit()
    assert seen == [("installed", True), ("bypassed", False), ("installed", True), ("lost", True)]
    assert all(may_move(a, b) for (a, _), (b, _) in zip([("armed", True)] + seen, seen))
    assert {s.name: s.state for s in rt.states()}["wrap_step"] == "lost"
    failed = [e for e in kit.events("flags.listener_failed") if e["feature"] == "wrap_step"]
    assert len(failed) == 4 and "ZeroDivisionError" in failed[0]["error"]


def test_a_move_the_transitions_do_not_allow_is_a_framework_error(demo, make_runtime):
    """``Runtime._move`` is the one way a state changes: a move ``state.TRANSITIONS`` does not
    allow raises StateError naming the feature and both states, and nothing is recorded."""
    from dsv41_flags.errors import FlagsError, StateError

    demo.feature("wrap_step", WRAP)
    rt = make_runtime(settings_for("wrap_step"), features_dir=demo.dir)
    rt.arm()
    __import__(demo.name)
    seen = []
    rt.state_listeners.append(seen.append)
    with pytest.raises(StateError, match="'wrap_step' cannot move from installed to armed") as exc:
        rt._move(rt.features["wrap_step"], "armed")
    assert isinstance(exc.value, FlagsError) and "bypassed, lost, uninstalled" in str(exc.value)
    assert {s.name: s.state for s in rt.states()}["wrap_step"] == "installed" and seen == []


def test_armed_means_a_hook_is_registered(project):
    rt = parent(project)  # built, never armed
    assert {s.name: s.state for s in rt.states()}["demo_patch"] == "not-armed"


def test_audit_reports_an_imported_but_never_installed_target_as_missed(project):
    rt = parent(project)
    rt.arm()
    import importlib

    sys.path.insert(0, str(project.dir))
    try:
        # the hook is registered; pretend it never fired: the target imported, state still armed
        rt._disarmed.add("x")  # unrelated name: our feature is not disarmed
        import wrapt
        wrapt.importer._post_import_hooks.pop(project.target, None)
        importlib.import_module(project.target)
        states = {s.name: s for s in rt.audit()}
        assert states["demo_patch"].state == "missed" and "NOT on" in states["demo_patch"].detail
    finally:
        sys.path.remove(str(project.dir))


def test_an_unvalidated_declaration_that_the_drift_check_cannot_read_is_a_reported_failure(make_runtime, tmp_path):
    """Whatever reaches install without validation (a declaration changed after it was checked):
    the drift check's parse error is ``feature.failed`` (strict: DriftError), not a traceback."""
    rt = make_runtime("[default]\n", features_dir=tmp_path)
    module = types.ModuleType("demo_target")
    bad = {"requires": Feature(name="bad_req", target="demo_target", install=lambda m, c: None,
                               summary="s", engine=""),
           "engine": Feature(name="bad_engine", target="demo_target", install=lambda m, c: None,
                             summary="s", engine="")}
    object.__setattr__(bad["requires"], "requires", ("X.y(((",))  # frozen: bypassed on purpose
    object.__setattr__(bad["engine"], "engine", "sglang>=garbage!!")
    for feature in bad.values():
        with capture_logs() as logs:
            st = rt.install(feature, module)
        assert st.state == "failed", st
        assert [e["event"] for e in logs] == ["feature.failed"] and logs[0]["feature"] == feature.name
    strict = make_runtime("[default]\nstrict = true\n", features_dir=tmp_path)
    strict.value = lambda feature: True  # the flag is on: strict applies
    with pytest.raises(DriftError, match="drift check on demo_target raised"):
        strict.install(bad["requires"], module)


# -- the patch check runs by itself where a state is read or acted on ----------------------------

LIVE_WRAP = """
def install(module, ctx):
    def make(orig):
        def step(self, *a, **kw):
            return ["wrapped"] + orig(self, *a, **kw)
        return step
    ctx.patch(module.Engine, "step", make)
    ctx.patch(module, "helper", lambda orig: (lambda x: orig(x) * 10))
"""


def _installed(demo, make_runtime, body=WRAP, **decl):
    demo.feature("wrap_step", body, **decl)
    rt = make_runtime(settings_for("wrap_step"), features_dir=demo.dir)
    rt.arm()
    mod = __import__(demo.name)
    assert {s.name: s.state for s in rt.states()}["wrap_step"] == "installed"
    return rt, mod


@pytest.mark.parametrize("body", [WRAP, LIVE_WRAP], ids=["a class's method", "and a module function"])
def test_a_reload_of_the_target_moves_the_feature_to_lost_at_the_reload(demo, make_runtime, body):
    """wrapt's post-import hooks fire once, never on importlib.reload: the reload watch
    (hooks.watch_reload) checks the patches as the module's body has just run again."""
    import importlib
    rt, mod = _installed(demo, make_runtime, body)
    seen = []
    rt.state_listeners.append(lambda st: seen.append((st.name, st.state)))
    with capture_logs() as logs:
        importlib.reload(mod)
    lost, = [e for e in logs if e["event"] == "feature.lost"]
    assert lost["feature"] == "wrap_step" and "Engine.step" in lost["attributes"]
    assert seen == [("wrap_step", "lost")]                       # through the one state change
    assert mod.Engine().step() == ["step", False, 1]              # the engine runs unpatched...
    st = next(s for s in rt.states() if s.name == "wrap_step")    # ...and says so
    assert st.state == "lost" and "Engine.step" in st.detail


def test_an_overwritten_patch_reads_lost_in_states_and_the_status_answer_without_an_audit(demo, make_runtime):
    from dsv41_flags.status import process_status
    rt, mod = _installed(demo, make_runtime)
    mod.Engine.step = lambda self, **kw: "someone else"
    with capture_logs() as logs:
        answer = process_status(rt)
    row, = [f for f in answer.features if f.name == "wrap_step"]
    assert row.state == "lost" and "Engine.step" in row.detail
    assert [e["event"] for e in logs].count("feature.lost") == 1
    with capture_logs() as logs:                                  # reported once, not per read
        assert next(s for s in rt.states() if s.name == "wrap_step").state == "lost"
    assert not [e for e in logs if e["event"] == "feature.lost"]


def test_a_live_switch_of_a_lost_patch_is_refused(demo, make_runtime):
    from dsv41_flags.live import SwitchError
    rt, mod = _installed(demo, make_runtime, live=True)
    mod.Engine.step = lambda self, **kw: "someone else"           # nothing read the state since
    with pytest.raises(SwitchError, match="wrap_step.*lost"):
        rt.switch("wrap_step", False, requested_by="t")
    assert rt.live.generation == 0 and rt.live.gates["wrap_step"].on is True


def test_after_uninstall_a_reload_reports_nothing_and_a_plain_import_is_untouched(demo, make_runtime):
    import importlib
    rt, mod = _installed(demo, make_runtime)
    rt.uninstall("wrap_step")
    with capture_logs() as logs:
        importlib.reload(mod)
    assert not [e for e in logs if e["event"] == "feature.lost"]
    assert {s.name: s.state for s in rt.states()}["wrap_step"] == "uninstalled"
    assert mod.Engine().step() == ["step", False, 1]
    assert mod.__spec__.loader is mod.__loader__ and type(mod.__loader__).__name__ == "SourceFileLoader"


def test_the_patch_check_reads_only_stored_values_never_the_engine_code(demo, make_runtime):
    """A module ``__getattr__`` of the engine is never run by the check."""
    rt, mod = _installed(demo, make_runtime)
    calls = []
    mod.__getattr__ = lambda name: calls.append(name)
    rt.check_patches()
    rt.states()
    assert calls == [] and {s.name: s.state for s in rt.states()}["wrap_step"] == "installed"
