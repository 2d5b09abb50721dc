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


HIERARCHY = """
class Locked(type):
    def __setattr__(cls, name, value):
        if vars(cls).get("locked"):
            raise RuntimeError(f"{cls.__name__} is locked")
        super().__setattr__(name, value)

    def __delattr__(cls, name):
        if vars(cls).get("locked"):
            raise RuntimeError(f"{cls.__name__} is locked")
        super().__delattr__(name)

class Base:
    @classmethod
    def cm(cls):
        return [cls.__name__]

    def m(self):
        return ["m"]

class Sub(Base):
    pass

class Vault(Base, metaclass=Locked):
    def m(self):
        return ["vault"]
"""


def _features(feats, specs):
    """One feature file per ``(name, owner, attr, after)``: tags what ``owner.attr`` returns."""
    feats.mkdir(exist_ok=True)
    for name, owner, attr, after in specs:
        (feats / f"{name}.py").write_text(
            "from dsv41_flags import Feature\n"
            "def install(module, ctx):\n"
            f"    ctx.patch(module.{owner}, {attr!r}, lambda orig: (lambda self_or_cls: [{name!r}] + orig(self_or_cls)))\n"
            f"FEATURE = Feature(name={name!r}, target=TARGET, install=install, summary='s', engine='',"
            f" after={tuple(after)!r})\n")


def _hierarchy_target(tmp_path, monkeypatch):
    target = f"hierarchy_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text(HIERARCHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return target


def test_a_base_class_patch_applied_after_a_subclass_patch_reaches_the_subclass(tmp_path, monkeypatch, make_runtime):
    """Feature a_fix patches Sub.cm (inherited), b_fix (after a_fix) patches Base.cm: Sub.cm()
    runs both, both are installed, and feature.conflict names the order on the hierarchy."""
    target = _hierarchy_target(tmp_path, monkeypatch)
    feats = tmp_path / "feats"
    _features(feats, [("a_fix", "Sub", "cm", ()), ("b_fix", "Base", "cm", ("a_fix",))])
    for f in feats.iterdir():
        f.write_text(f.read_text().replace("TARGET", repr(target)))
    rt = make_runtime("[default]\na_fix = true\nb_fix = true\n", features_dir=feats)
    rt.arm()
    with capture_logs() as logs:
        mod = __import__(target)
    assert mod.Sub.cm() == ["a_fix", "b_fix", "Sub"] and mod.Base.cm() == ["b_fix", "Base"]
    assert {s.name: s.state for s in rt.states() if s.name.endswith("_fix")} == {
        "a_fix": "installed", "b_fix": "installed"}
    conflict, = [e for e in logs if e["event"] == "feature.conflict"]
    assert conflict["feature"] == "b_fix" and conflict["order"] == ["a_fix", "b_fix"]
    assert conflict["attributes"] == ["Sub.cm", "Base.cm"]
    rt.uninstall("b_fix")
    assert mod.Sub.cm() == ["a_fix", "Sub"]
    rt.uninstall()
    assert mod.Sub.cm() == ["Sub"] and "cm" not in vars(mod.Sub)
    sys.modules.pop(target, None)


def test_a_base_patch_a_captured_subclass_patch_would_never_reach_is_a_refused_conflict(tmp_path, monkeypatch, make_runtime):
    target = f"captured_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text(
        "import functools\ndef echo(*a):\n    return list(a)\n"
        "class Base:\n    f = functools.partial(echo, 'base')\nclass Sub(Base):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    for name, owner, after in (("a_fix", "Sub", ()), ("b_fix", "Base", ("a_fix",))):
        (feats / f"{name}.py").write_text(
            "import functools\nfrom dsv41_flags import Feature\n"
            "def tagged(tag, original, *a):\n    return [tag] + original(*a)\n"
            "def install(module, ctx):\n"
            f"    ctx.patch(module.{owner}, 'f', lambda orig: functools.partial(tagged, {name!r}, orig))\n"
            f"FEATURE = Feature(name={name!r}, target={target!r}, install=install, summary='s', engine='',"
            f" after={after!r})\n")
    rt = make_runtime("[default]\nstrict = false\na_fix = true\nb_fix = true\n", features_dir=feats)
    rt.arm()
    with capture_logs() as logs:
        mod = __import__(target)
    states = {s.name: s for s in rt.states() if s.name.endswith("_fix")}
    assert states["a_fix"].state == "installed" and states["b_fix"].state == "failed"
    assert "PatchConflict" in states["b_fix"].detail and "Sub.f" in states["b_fix"].detail
    refused, = [e for e in logs if e["event"] == "feature.conflict"]
    assert refused["feature"] == "b_fix" and refused["refused"] is True and refused["log_level"] == "error"
    assert mod.Sub.f("x") == ["a_fix", "base", "x"] and mod.Base.f("x") == ["base", "x"]
    sys.modules.pop(target, None)


def test_uninstall_restores_every_feature_an_owner_does_not_refuse_and_raises_one_framework_error(tmp_path, monkeypatch, make_runtime):
    """A metaclass that refuses setattr once locked: its feature stays installed with the reason,
    every other feature (before and after it in uninstall order) is restored, one RestoreError."""
    from dsv41_flags.errors import FlagsError, RestoreError
    target = _hierarchy_target(tmp_path, monkeypatch)
    feats = tmp_path / "feats"
    specs = [("f1_fix", "Base", "m", ()), ("f2_fix", "Sub", "cm", ("f1_fix",)),
             ("f3_fix", "Vault", "m", ("f2_fix",)), ("f4_fix", "Sub", "m", ("f3_fix",)),
             ("f5_fix", "Base", "cm", ("f4_fix",))]
    _features(feats, specs)
    for f in feats.iterdir():
        f.write_text(f.read_text().replace("TARGET", repr(target)))
    rt = make_runtime("[default]\n" + "".join(f"{s[0]} = true\n" for s in specs), features_dir=feats)
    rt.arm()
    mod = __import__(target)
    assert mod.Vault().m() == ["f3_fix", "vault"]
    type.__setattr__(mod.Vault, "locked", True)
    with capture_logs() as logs, pytest.raises(RestoreError) as raised:
        rt.uninstall()
    assert isinstance(raised.value, FlagsError)
    assert [(f, where) for f, where, _ in raised.value.failures] == [("f3_fix", "Vault.m")]
    assert "RuntimeError: Vault is locked" in str(raised.value)
    states = {s.name: s for s in rt.states() if s.name.endswith("_fix")}
    assert {n: s.state for n, s in states.items()} == {
        "f1_fix": "uninstalled", "f2_fix": "uninstalled", "f3_fix": "installed",
        "f4_fix": "uninstalled", "f5_fix": "uninstalled"}
    assert "Vault is locked" in states["f3_fix"].detail
    failed, = [e for e in logs if e["event"] == "feature.uninstall_failed"]
    assert failed["feature"] == "f3_fix" and failed["attributes"] == ["Vault.m"]
    assert failed["log_level"] == "error"
    assert (mod.Base().m(), mod.Sub().m(), mod.Sub.cm(), mod.Base.cm()) == (["m"], ["m"], ["Sub"], ["Base"])
    assert mod.Vault().m() == ["f3_fix", "vault"]                  # still patched, as reported
    type.__setattr__(mod.Vault, "locked", False)
    rt.uninstall()                                                 # now it can: nothing raised
    assert mod.Vault().m() == ["vault"] and states["f3_fix"].state == "installed"
    assert {s.name: s.state for s in rt.states()}["f3_fix"] == "uninstalled"
    sys.modules.pop(target, None)
