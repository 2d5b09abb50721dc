"""The patch ledger and ``InstallContext`` (``patch.py``): classmethods and staticmethods keep their
kind, a second install adds no second wrapper, a reinstalled classmethod patch is not drift, an
uninstall under another feature's patch is blocked and reported, and a guarded patch reports its
failure and falls back to the original."""

import sys
import uuid

import pytest
from structlog.testing import capture_logs

from ._child import write_project

GUARDED = """
from dsv41_flags import Feature
def install(module, ctx):
    def make(original):
        def step(self, x):
            if x == "bad":
                raise TypeError("malformed input")
            if x == "engine":
                return original(self, x)
            return "patched"
        return step
    ctx.patch(module.Engine, "step", make, guard=True)
    module.helper = ctx.guard(lambda x: 1 / x, lambda x: "fallback", step="helper")
FEATURE = Feature(name="guarded_demo", target=TARGET, install=install, summary="demo", engine="",
                  requires=("Engine.step",))
"""


def test_guarded_patch_reports_and_falls_back_to_the_original(make_runtime, tmp_path, monkeypatch):
    project = write_project(
        tmp_path, "guarded_demo", GUARDED, None, target=f"guard_engine_{uuid.uuid4().hex[:8]}",
        target_source="calls = []\nclass Engine:\n    def step(self, x):\n        calls.append(x)\n"
                      "        if x == 'engine':\n            raise ValueError('engine says no')\n"
                      "        return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rt = make_runtime("[default]\nguarded_demo = true\n", features_dir=project.feats)
    rt.arm()
    mod = __import__(project.target)
    assert {s.name: s.state for s in rt.states()}["guarded_demo"] == "installed"
    eng = mod.Engine()
    with capture_logs() as logs:
        assert eng.step("ok") == "patched"
        assert eng.step("bad") == "stock"                 # the original, as without the feature
        with pytest.raises(ValueError, match="engine says no"):
            eng.step("engine")                            # the engine's own error: unchanged, once
        assert mod.helper(0) == "fallback" and mod.helper(2) == 0.5
    assert mod.calls == ["bad", "engine"]
    errors = [e for e in logs if e["event"] == "guarded_demo.error"]
    assert [e["step"] for e in errors] == ["step", "helper"]
    assert errors[0]["cause"] == "TypeError: malformed input" and "original" in errors[0]["action"]
    assert errors[1]["cause"].startswith("ZeroDivisionError")


def test_classmethod_and_staticmethod_keep_their_kind():
    from dsv41_flags.patch import Ledger

    class C:
        @classmethod
        def cm(cls, x):
            return (cls.__name__, x)

        @staticmethod
        def sm(x):
            return x * 2

    class D(C):
        pass

    ledger = Ledger()
    ledger.patch("f", C, "cm", lambda orig: (lambda cls, x: ("w",) + orig(cls, x)))
    ledger.patch("f", C, "sm", lambda orig: (lambda x: orig(x) + 1))
    assert (C.cm(1), D.cm(2), C().cm(3)) == (("w", "C", 1), ("w", "D", 2), ("w", "C", 3))
    assert (C.sm(2), C().sm(2)) == (5, 5)
    ledger.patch("f", C, "cm", lambda orig: (lambda cls, x: ("w",) + orig(cls, x)))
    assert C.cm(1) == ("w", "C", 1)                                    # one wrapper level
    ledger.uninstall("f")
    assert (C.cm(1), C().sm(2)) == (("C", 1), 4)


def test_reinstalling_a_classmethod_patch_is_not_drift(tmp_path, monkeypatch, make_runtime):
    project = write_project(
        tmp_path, "cm_fix",
        "from dsv41_flags import Feature\n"
        "def install(module, ctx):\n"
        "    ctx.patch(module.Loader, 'build', lambda orig: (lambda cls, **kw: not orig(cls, **kw)))\n"
        "FEATURE = Feature(name='cm_fix', target=TARGET, install=install, summary='s', engine='',\n"
        "                  requires=('Loader.build(strict)',))\n", None, target="cm_target",
        target_source="class Loader:\n    @classmethod\n    def build(cls, *, strict=False):\n"
                      "        return strict\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rt = make_runtime("[default]\ncm_fix = true\n", features_dir=project.feats)
    rt.arm()
    import cm_target
    assert rt.install(rt.features["cm_fix"], cm_target).state == "installed"
    assert cm_target.Loader.build(strict=False) is True
    sys.modules.pop("cm_target", None)


def test_uninstall_under_another_patch_is_reported(tmp_path, monkeypatch, make_runtime):
    (tmp_path / "stack_target.py").write_text("class C:\n    def p(self):\n        return 'p'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    for name, tag, after in (("a_fix", "A", ""), ("b_fix", "B", "after=('a_fix',)")):
        (feats / f"{name}.py").write_text(
            "from dsv41_flags import Feature\n"
            "def install(module, ctx):\n"
            f"    ctx.patch(module.C, 'p', lambda orig: (lambda self: ({tag!r}, orig(self))))\n"
            f"FEATURE = Feature(name={name!r}, target='stack_target', install=install, summary='s',"
            f" engine='', {after})\n")
    rt = make_runtime("[default]\na_fix = true\nb_fix = true\n", features_dir=feats)
    rt.arm()
    import stack_target
    from structlog.testing import capture_logs
    with capture_logs() as logs:
        rt.uninstall("a_fix")
    assert stack_target.C().p() == ("B", ("A", "p"))
    assert {s.name: s.state for s in rt.states() if s.name.endswith("_fix")} == {
        "a_fix": "installed", "b_fix": "installed"}
    assert [e["above"] for e in logs if e["event"] == "feature.uninstall_blocked"] == [["b_fix"]]
    rt.uninstall()
    assert stack_target.C().p() == "p"
    assert {s.name: s.state for s in rt.states() if s.name.endswith("_fix")} == {
        "a_fix": "uninstalled", "b_fix": "uninstalled"}
    sys.modules.pop("stack_target", None)
