"""Fixtures of the unit tier that start processes: ``project`` (a demo target patched by
``demo_patch``), ``program`` and ``program_cli`` (a user's own target patched by ``demo_fix``, and the
CLI run on it), ``run_program`` (a program run under ``dsv41-flags run`` whose feature logs)."""

import os
import sys
import uuid

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app

from ._child import FEATURE, PROGRAM_FEATURE, make_project


@pytest.fixture
def project(tmp_path):
    """A target module, a features dir with one feature (``demo_patch``: an int option ``n`` in
    [1, 8]) patching it, a settings file arming it (``n = 5``), and a clean environment for
    subprocesses (``_child.make_project``)."""
    project = make_project(tmp_path, "demo_patch", FEATURE, "[default]\ndemo_patch = true\ndemo_patch_n = 5\n")
    yield project
    sys.modules.pop(project.target, None)


@pytest.fixture
def program(tmp_path):
    """A user's own target module and a feature patching it (``demo_fix``, engine=""), settings
    arming it, a clean env."""
    return make_project(tmp_path, "demo_fix", PROGRAM_FEATURE, "[default]\ndemo_fix = true\n",
                        target=f"program_engine_{uuid.uuid4().hex[:8]}")


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


#: ``demo_cap``: logs its own info line ``demo_cap.own_info`` at install, patches ``Worker.forward``
CAP_FEATURE = """
from dsv41_flags import Feature
def install(module, ctx):
    ctx.log.info("demo_cap.own_info")
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched"))
FEATURE = Feature(name="demo_cap", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="")
"""


@pytest.fixture
def run_program(tmp_path):
    """A program ``r.py`` importing a target patched by ``demo_cap`` (whose install logs its own info
    line), settings arming it with ``features_dir`` named, and a clean env."""
    program = make_project(tmp_path, "demo_cap", CAP_FEATURE,
                           '[default]\ndemo_cap = true\nfeatures_dir = "FEATURES_DIR"\n')
    (tmp_path / "r.py").write_text(f"import {program.target}\nprint({program.target}.Worker().forward())\n")
    return program
