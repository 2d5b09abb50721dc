"""The pytest kit inside an active process (``dsv41-flags run -- python -m pytest``): a test using
``dsv41_flags_runtime`` leaves the process's own runtime AND its patches as they were."""
import sys
import uuid

import pytest

import dsv41_flags.activation as activation
from dsv41_flags.testing import FlagsKit

FIX = """
from dsv41_flags import Feature
def install(module, ctx):
    ctx.patch(module, "f", lambda orig: (lambda: {value!r}))
FEATURE = Feature(name={name!r}, target={target!r}, install=install, summary="s", engine="",
                  after={after})
"""


@pytest.mark.parametrize("kit_feature", ["the process's own feature", "another feature on top"])
def test_the_kit_puts_back_the_process_patches(tmp_path, monkeypatch, make_runtime, kit_feature):
    target = f"kit_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("def f():\n    return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "proc_fix.py").write_text(FIX.format(name="proc_fix", target=target, value="process",
                                                  after=()))
    (feats / "kit_fix.py").write_text(FIX.format(name="kit_fix", target=target, value="kit",
                                                 after=("proc_fix",)))
    process = make_runtime("[default]\nproc_fix = true\n", features_dir=feats)
    saved = activation.process_state()
    activation.set_process_state((process, None))
    try:
        process.arm()
        module = __import__(target)
        assert module.f() == "process"  # test A: the process's patch
        kit = FlagsKit(tmp_path / "kit")  # test B: the kit
        (tmp_path / "kit").mkdir()
        flags = {"proc_fix": True} if kit_feature.startswith("the process") else \
            {"proc_fix": True, "kit_fix": True}
        try:
            kit.activate(flags, features_dir=feats)
            assert kit.runtime is not process and kit.state("proc_fix") == "installed"
        finally:
            kit.restore()
        # test C: the process as test A left it
        assert activation.current_runtime() is process
        assert module.f() == "process"
        assert [s.state for s in process.audit() if s.name in ("kit_fix", "proc_fix")] == ["installed", "off"]
    finally:
        activation.set_process_state(saved)
        process.uninstall()
        sys.modules.pop(target, None)


LOCKED = """
class Locked(type):
    def __setattr__(cls, name, value):
        if vars(cls).get("locked"):
            raise RuntimeError(f"{cls.__name__} is locked")
        super().__setattr__(name, value)

class Vault(metaclass=Locked):
    def m(self):
        return "vault"

def f():
    return "stock"
"""


def test_the_kit_teardown_restores_everything_it_can_and_names_what_it_could_not(tmp_path, monkeypatch):
    """A feature whose owner refuses the restore: the teardown still restores the other features,
    the environment and the process runtime, then raises one RestoreError naming it."""
    import os

    from dsv41_flags.errors import RestoreError
    target = f"kit_locked_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text(LOCKED)
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "vault_fix.py").write_text(
        "from dsv41_flags import Feature\n"
        "def install(module, ctx):\n"
        "    ctx.patch(module.Vault, 'm', lambda orig: (lambda self: 'patched'))\n"
        f"FEATURE = Feature(name='vault_fix', target={target!r}, install=install, summary='s', engine='')\n")
    (feats / "plain_fix.py").write_text(FIX.format(name="plain_fix", target=target, value="kit",
                                                   after=("vault_fix",)))
    environ = dict(os.environ)
    saved = activation.process_state()
    kit = FlagsKit(tmp_path / "kit")
    (tmp_path / "kit").mkdir()
    try:
        kit.activate({"vault_fix": True, "plain_fix": True}, features_dir=feats)
        module = __import__(target)
        assert (module.Vault().m(), module.f()) == ("patched", "kit")
        type.__setattr__(module.Vault, "locked", True)
        with pytest.raises(RestoreError, match=r"vault_fix.*Vault\.m.*RuntimeError: Vault is locked"):
            kit.restore()
        assert module.f() == "stock"                              # the other feature: restored
        assert dict(os.environ) == environ and activation.process_state() == saved
        assert module.Vault().m() == "patched"                    # what the error names
        assert kit.state("vault_fix") == "installed" and kit.state("plain_fix") == "uninstalled"
    finally:
        activation.set_process_state(saved)
        sys.modules.pop(target, None)
