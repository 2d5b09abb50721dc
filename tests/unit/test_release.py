"""Releases read in place for the upgrade gate (issue 14), on small made-up engines: a wheel built
here with zipfile, a checkout, the cache of fetched wheels. No network, no engine."""
import json
import subprocess
import textwrap
import zipfile

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.upgrade_gate.releases import open_release

ENGINE_V1 = """
class Runner:
    def step(self, batch, *, fence): ...
"""
ENGINE_V2 = """
class Runner:
    def step_v2(self, batch, *, fence): ...
"""


def make_wheel(where, version, source, name="toyengine"):
    path = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{name}/core.py", textwrap.dedent(source))
        z.writestr(f"{name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


@pytest.fixture
def gate(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    feats = tmp_path / "features"
    feats.mkdir()
    (feats / "toy.py").write_text(
        "from dsv41_flags import Feature\n"
        "FEATURE = Feature(name='toy', target='toyengine.core', install=lambda m, c: None,\n"
        "    summary='s', requires=('Runner.step(fence)',), engine='toyengine>=1.0,<2',\n"
        "    fixed_in='>=1.5')\n")
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ntoy = true\n")

    def run(*specs, extra=()):
        args = ["check", "-s", str(settings), *extra]
        for s in specs:
            args += ["--engine", str(s)]
        return CliRunner().invoke(app, args)
    return run


def test_matrix_over_wheels_json(tmp_path, gate):
    wheels = [make_wheel(tmp_path, "1.0", ENGINE_V1), make_wheel(tmp_path, "1.1", ENGINE_V2),
              make_wheel(tmp_path, "0.9", ENGINE_V1), make_wheel(tmp_path, "1.5", ENGINE_V2)]
    r = gate(*wheels, extra=["--json"])
    data = json.loads(r.stdout)
    cells = data["features"][0]["cells"]
    assert [c["release"] for c in cells] == ["toyengine 1.0", "toyengine 1.1", "toyengine 0.9", "toyengine 1.5"]
    assert [c["state"] for c in cells] == ["ok", "drifted", "out-of-range", "fixed-upstream"]
    assert cells[1]["missing"] == ["Runner.step (closest: Runner.step_v2)"]
    assert cells[1]["verdicts"][0]["closest"] == "Runner.step_v2"
    assert r.exit_code == 1


def test_only_clean_releases_exit_0_and_the_table_is_human(tmp_path, gate):
    r = gate(make_wheel(tmp_path, "1.0", ENGINE_V1))
    assert r.exit_code == 0 and "toyengine 1.0" in r.stdout and "ok" in r.stdout


def test_checkout_layout_and_version_from_pyproject(tmp_path, gate):
    pkg = tmp_path / "co" / "src" / "toyengine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(textwrap.dedent(ENGINE_V2))
    (tmp_path / "co" / "pyproject.toml").write_text('[project]\nname = "toyengine"\nversion = "1.2"\n')
    r = gate(tmp_path / "co", extra=["--json"])
    (cell,) = json.loads(r.stdout)["features"][0]["cells"]
    assert cell["release"] == "toyengine 1.2" and cell["state"] == "drifted"
    assert "closest: Runner.step_v2" in cell["detail"]


def test_a_release_without_the_target_package_is_drifted_not_the_installed_one(tmp_path, gate):
    path = tmp_path / "toyengine-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other/__init__.py", "")
        z.writestr("toyengine-1.0.dist-info/METADATA", "Name: toyengine\nVersion: 1.0\n")
    (cell,) = json.loads(gate(path, extra=["--json"]).stdout)["features"][0]["cells"]
    assert cell["state"] == "drifted" and cell["missing"] == ["module toyengine.core"]


def test_pinned_requirement_reuses_the_cache_without_pip(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    make_wheel(cache, "1.0", ENGINE_V1)

    def no_pip(*a, **k):
        raise AssertionError("pip must not run for a cached pin")
    monkeypatch.setattr(subprocess, "run", no_pip)
    r = open_release("toyengine==1.0", cache=cache)
    assert not r.error and r.version == "1.0" and r.label == "toyengine 1.0"
    assert r.where == str(cache / "toyengine-1.0-py3-none-any.whl")


def test_failed_download_is_unreadable_and_leaves_no_temp(tmp_path, monkeypatch):
    cache = tmp_path / "cache"

    class Proc:
        returncode, stdout, stderr = 1, "", "ERROR: No matching distribution found for toyengine==9\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Proc())
    r = open_release("toyengine==9", cache=cache)
    assert "pip download toyengine==9 failed" in r.error and "No matching distribution" in r.error
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("spec,why", [("not a spec ==", "neither a wheel file"),
                                      ("/nonexistent/x.whl", "no such file")])
def test_bad_specs_say_why(spec, why):
    assert why in open_release(spec).error


def test_engine_and_import_together_are_refused(tmp_path, gate):
    r = gate(make_wheel(tmp_path, "1.0", ENGINE_V1), extra=["--import", "--json"])
    assert r.exit_code == 1 and "--import" in json.loads(r.stdout)["problems"][0]["message"]
