"""Live switches in one process (issue 12): a live feature off at boot is installed bypassed and
switching it changes behaviour on the next call; a non-live feature is refused; events and
states report the live value and the generation."""
import sys
import textwrap
import uuid

import pytest
from structlog.testing import capture_logs

from dsv41_flags import DeclarationError, Feature
from dsv41_flags.live import NotLiveError, SwitchError, parse_assignment


@pytest.fixture
def target(tmp_path, monkeypatch):
    """A real importable module and a features dir: ``fence`` (live) and ``boot_only`` (not)."""
    name = f"live_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        class Verify:
            def accept(self, x, *, folded=False):
                return [x]
            @classmethod
            def make(cls, n):
                return ["made", n]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()
    (fdir / "fence.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature

        def install(module, ctx):
            def make(original):
                def accept(self, *args, **kwargs):
                    return ["fenced"] + original(self, *args, **kwargs)
                return accept
            ctx.patch(module.Verify, "accept", make)

            def make_cls(original):
                def make(cls, *args):
                    return ["fenced"] + original(cls, *args)
                return make
            ctx.patch(module.Verify, "make", make_cls)

        FEATURE = Feature(name="fence", target={name!r}, install=install, summary="live demo",
                          engine="", live=True)
    """))
    (fdir / "boot_only.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature

        def install(module, ctx):
            pass

        FEATURE = Feature(name="boot_only", target={name!r}, install=install, summary="boot",
                          engine="")
    """))
    yield type("T", (), {"name": name, "dir": fdir})
    sys.modules.pop(name, None)


def test_live_feature_off_at_boot_is_installed_bypassed_and_switches_on_the_next_call(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\nboot_only = false\n", features_dir=target.dir)
    rt.arm()
    assert {s.name: s.state for s in rt.states()} == {"fence": "off", "boot_only": "off"}
    mod = __import__(target.name)
    v = mod.Verify()
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "bypassed" and st.value is False and st.live is True
    assert st.patches == ("Verify.accept", "Verify.make")
    assert v.accept(1) == [1] and mod.Verify.make(2) == ["made", 2]   # bypassed: the original
    wrapper = mod.Verify.__dict__["accept"]

    with capture_logs() as logs:
        toggle = rt.switch("fence", "on", requested_by="alice")
    assert v.accept(1) == ["fenced", 1]                                # the very next call
    assert mod.Verify.make(2) == ["fenced", "made", 2]
    assert mod.Verify.__dict__["accept"] is wrapper                    # no re-patch
    assert (toggle.old, toggle.new, toggle.generation) == (False, True, 1)
    ev = [e for e in logs if e["event"] == "feature.toggled"]
    assert len(ev) == 1
    assert ev[0]["feature"] == "fence" and ev[0]["old"] is False and ev[0]["new"] is True
    assert ev[0]["generation"] == 1 and ev[0]["requested_by"] == "alice" and ev[0]["pid"] > 0
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "installed" and st.value is True
    assert st.source.startswith("live switch generation 1 by alice (boot: ")
    assert rt.report()["features"]["fence"]["value"] is True

    rt.switch("fence", False, requested_by="bob")
    assert v.accept(1) == [1]
    assert rt.live.generation == 2 and [t.new for t in rt.live.history] == [True, False]
    assert {s.name: s.state for s in rt.states()}["fence"] == "bypassed"
    rt.uninstall()
    assert "__wrapped__" not in vars(mod.Verify.__dict__["accept"])
    assert mod.Verify.__dict__["accept"].__qualname__ == "Verify.accept"


def test_live_feature_on_at_boot_then_switched_off(target, make_runtime):
    mod = __import__(target.name)
    rt = make_runtime("[default]\nfence = true\n", features_dir=target.dir)
    rt.arm()
    assert mod.Verify().accept(3) == ["fenced", 3]
    assert {s.name: s.state for s in rt.states()}["fence"] == "installed"
    rt.switch("fence", "off", requested_by="t")
    assert mod.Verify().accept(3) == [3]


def test_switch_before_the_target_is_imported_takes_effect_at_install(target, make_runtime):
    rt = make_runtime("[default]\nfence = false\n", features_dir=target.dir)
    rt.arm()
    rt.switch("fence", True, requested_by="t")
    assert {s.name: s.state for s in rt.states()}["fence"] == "armed"
    mod = __import__(target.name)
    assert mod.Verify().accept(1) == ["fenced", 1]
    assert {s.name: s.state for s in rt.states()}["fence"] == "installed"


def test_switching_a_feature_that_is_not_live_is_refused(target, make_runtime):
    rt = make_runtime("[default]\nboot_only = true\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    with pytest.raises(NotLiveError) as exc:
        rt.switch("boot_only", "off", requested_by="t")
    msg = str(exc.value)
    assert "'boot_only'" in msg and "not live-safe" in msg and "relaunch" in msg
    assert "DSV41_BOOT_ONLY=0" in msg
    assert rt.live.generation == 0 and not rt.live.history


def test_the_shipped_autotune_keep_is_refused_and_folded_fence_is_live(make_runtime):
    rt = make_runtime(env={"DSV41_AUTOTUNE_KEEP": "1"})
    assert rt.features["folded_fence"].live and not rt.features["autotune_keep"].live
    with pytest.raises(NotLiveError, match="'autotune_keep' is not live-safe"):
        rt.switch("autotune_keep", "off", requested_by="t")


@pytest.mark.parametrize("name,value,match", [
    ("nope", "on", r"no feature named 'nope'; known: boot_only, fence \(live-safe: fence\)"),
    ("fence", "maybe", r"switch fence='maybe': the value is not one of"),
    ("fence", "", r"switch fence='': the value is not one of"),
    ("fence", 2, r"switch fence=2: the value is not one of"),
])
def test_bad_switches_name_the_feature_and_value(target, make_runtime, name, value, match):
    rt = make_runtime("[default]\n", features_dir=target.dir)
    rt.arm()
    with pytest.raises(SwitchError, match=match):
        rt.switch(name, value, requested_by="t")
    assert rt.live.generation == 0


def test_a_live_feature_whose_patch_is_not_in_place_cannot_be_switched(target, make_runtime):
    rt = make_runtime("[default]\nfence = true\n", features_dir=target.dir)
    rt.arm()
    __import__(target.name)
    rt.uninstall()
    with pytest.raises(SwitchError, match="'fence' is uninstalled in this process"):
        rt.switch("fence", False, requested_by="t")


def _live_fence(tmp_path, monkeypatch, prefix: str, target_src: str, install_body: str,
                more: str) -> tuple[str, object]:
    """A target module of a fresh name (``target_src``) on sys.path and a features dir with a live
    feature ``fence`` on it (install body ``install_body``, more Feature arguments ``more``)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(target_src)
    monkeypatch.syspath_prepend(str(tmp_path))
    fdir = tmp_path / "feats"
    fdir.mkdir()
    (fdir / "fence.py").write_text(
        "from dsv41_flags import Feature\n"
        f"def install(module, ctx):\n    {install_body}\n"
        f"FEATURE = Feature(name='fence', target={name!r}, install=install, summary='d', engine='',"
        f"{more} live=True)\n")
    return name, fdir


def test_a_live_feature_off_at_boot_that_drifts_does_not_stop_a_strict_process(tmp_path, monkeypatch, make_runtime):
    name, fdir = _live_fence(tmp_path, monkeypatch, "live_drift", "class Verify:\n    pass\n",
                             "pass", " requires=('Verify.accept',),")
    rt = make_runtime("[default]\nstrict = true\n", features_dir=fdir)
    rt.arm()
    with capture_logs() as logs:
        __import__(name)              # no DriftError: the flag is off
    sys.modules.pop(name, None)
    assert {s.name: s.state for s in rt.states()}["fence"] == "drifted"
    assert any(e["event"] == "feature.drifted" and e["strict"] is False for e in logs)
    with pytest.raises(SwitchError, match="'fence' is drifted in this process"):
        rt.switch("fence", True, requested_by="t")


def test_live_patch_of_a_non_callable_fails_the_install(tmp_path, monkeypatch, make_runtime):
    name, fdir = _live_fence(tmp_path, monkeypatch, "live_const", "LIMIT = 3\n",
                             "ctx.patch(module, 'LIMIT', lambda old: 5)", "")
    rt = make_runtime("[default]\nstrict = false\nfence = true\n", features_dir=fdir)
    rt.arm()
    mod = __import__(name)
    sys.modules.pop(name, None)
    st = {s.name: s for s in rt.states()}["fence"]
    assert st.state == "failed" and "may only patch functions and methods" in st.detail
    assert mod.LIMIT == 3


def test_live_must_be_a_bool():
    with pytest.raises(DeclarationError, match="live must be True or False"):
        Feature(name="x", target="m", install=lambda m, c: None, summary="s", live="yes")


@pytest.mark.parametrize("text,expected", [("folded_fence=on", ("folded_fence", "on")),
                                           ("DSV41_FOLDED_FENCE=0", ("folded_fence", "0")),
                                           ("FOLDED_FENCE = true", ("folded_fence", "true"))])
def test_parse_assignment(text, expected):
    assert parse_assignment(text) == expected


def test_parse_assignment_without_equals_is_an_error():
    with pytest.raises(SwitchError, match="is not NAME=VALUE"):
        parse_assignment("folded_fence")
