"""Fixtures of the unit tier that start processes: ``project`` (a demo target patched by
``demo_patch``), ``program`` and ``program_cli`` (a user's own target patched by ``demo_fix``, and the
CLI run on it), ``run_program`` (a program run under ``dsv41-flags run`` whose feature logs)."""

import os
import sys
import textwrap
import uuid

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app

from ._child import FEATURE, PROGRAM_FEATURE


@pytest.fixture
def project(tmp_path):
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


@pytest.fixture
def program(tmp_path):
    """A user's own target module and a feature patching it (engine=""), settings, a clean env."""
    target = f"trial_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("class Worker:\n    def forward(self):\n        return 'stock'\n")
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "demo_fix.py").write_text(PROGRAM_FEATURE.replace("TARGET", repr(target)))
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ndemo_fix = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(settings), PYTHONPATH=str(tmp_path), DSV41_LOG_FORMAT="json")
    return type("Launch", (), {"dir": tmp_path, "target": target, "settings": settings, "env": env})


@pytest.fixture
def program_cli(monkeypatch, program):
    for key in [k for k in os.environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(program.dir)
    monkeypatch.syspath_prepend(str(program.dir))   # the user's target module, found by status
    monkeypatch.setenv("DSV41_SETTINGS", str(program.settings))

    def invoke(*args, env=None):
        with monkeypatch.context() as m:
            for k, v in (env or {}).items():
                m.setenv(k, v)
            return CliRunner().invoke(app, list(args), catch_exceptions=False, prog_name="dsv41-flags")
    return invoke


@pytest.fixture
def run_program(tmp_path):
    target = f"demo_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{target}.py").write_text("class Worker:\n    def forward(self):\n        return 'stock'\n")
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "demo_cap.py").write_text(textwrap.dedent(f"""
        from dsv41_flags import Feature
        def install(module, ctx):
            ctx.log.info("demo_cap.own_info")
            ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched"))
        FEATURE = Feature(name="demo_cap", target={target!r}, install=install, summary="demo",
                          requires=("Worker.forward",), engine="")
    """))
    settings_file = tmp_path / "settings.toml"
    settings_file.write_text(f'[default]\ndemo_cap = true\nfeatures_dir = "{feats}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(DSV41_SETTINGS=str(settings_file), PYTHONPATH=str(tmp_path), DSV41_LOG_FORMAT="json")
    (tmp_path / "r.py").write_text(f"import {target}\nprint({target}.Worker().forward())\n")
    return type("Launch", (), {"dir": tmp_path, "target": target, "env": env, "settings": settings_file})
