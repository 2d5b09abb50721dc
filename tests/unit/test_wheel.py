"""The wheel is the product.

Builds the wheel (``pip wheel . --no-deps``) and, from an sdist, a second one; installs the first
into a fresh virtual environment with the framework's pinned dependencies only (no engine) and
runs the CLI from an empty directory. One venv for the module (venv + pip install: 30-60 s)."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ..conftest import REPO

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
SHIPPED = {"dsv41_flags/_data/settings.toml", "dsv41_flags/_data/features/folded_fence.py",
           "dsv41_flags/_data/features/autotune_keep.py", "dsv41_flags/launcher/bootstrap/sitecustomize.py",
           "dsv41_flags/testing.py", "dsv41_flags/_data/sglang_options.json"}


def _framework_pins() -> list[str]:
    pins = []
    for line in (REPO / "requirements" / "framework.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and line.split("==")[0].lower() not in ("pytest", "hypothesis"):
            pins.append(line)
    return pins


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    _run(PIP + ["wheel", str(REPO), "--no-deps", "-q", "-w", str(dist)])
    wheel = next(dist.glob("dsv41_flags-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DSV41_", "PYTHON", "VIRTUAL_ENV"))}
    # without PYTHONPATH: a source tree on it (with its build's *.egg-info) would look installed
    # to pip in the fresh venv, and the wheel would not be installed
    _run(PIP + ["--python", str(venv / "bin" / "python"), "install", "-q", *_framework_pins(),
                str(wheel)], env=env)
    empty = base / "empty"
    empty.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return wheel, venv, empty, env


def test_wheel_ships_features_settings_bootstrap_and_kit(wheel_env):
    wheel, *_ = wheel_env
    names = set(zipfile.ZipFile(wheel).namelist())
    assert SHIPPED <= names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text and "dsv41_flags.testing" in text
    assert "[sglang.srt.plugins]" in text


def test_sdist_builds_the_same_wheel(wheel_env, tmp_path):
    wheel, *_ = wheel_env
    sdist_dir = tmp_path / "sdist"
    code = ("import sys; from setuptools import build_meta as b; "
            f"print(b.build_sdist({str(sdist_dir)!r}))")
    _run([sys.executable, "-c", code], cwd=REPO)
    sdist = next(sdist_dir.glob("*.tar.gz"))
    _run(PIP + ["wheel", str(sdist), "--no-deps", "-q", "-w", str(tmp_path / "dist")])
    again = next((tmp_path / "dist").glob("dsv41_flags-*.whl"))
    strip = lambda z: {n for n in zipfile.ZipFile(z).namelist() if ".dist-info/" not in n}
    assert strip(again) == strip(wheel)


def test_status_from_an_empty_directory(wheel_env):
    wheel, venv, empty, env = wheel_env
    proc = subprocess.run(["dsv41-flags", "status", "--json"], cwd=empty, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [f["name"] for f in data["features"]] == ["autotune_keep", "folded_fence"]
    [settings] = data["settings_files"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert Path(settings) == (site / "dsv41_flags" / "_data" / "settings.toml").resolve()
    assert Path(data["features_dir"]) == (site / "dsv41_flags" / "_data" / "features").resolve()
    for f in data["features"]:   # no engine in this environment
        assert f["engine_version"] is None and f["target_found"] is False and f["state"] == "off"
    assert data["features"][0]["options"]["keep_old"] == {"value": 3, "source": "declared default"}


def test_flag_variable_and_launcher_work_from_the_wheel(wheel_env):
    wheel, venv, empty, env = wheel_env
    proc = subprocess.run(["dsv41-flags", "status", "--json"], cwd=empty, capture_output=True,
                          text=True, timeout=120, env={**env, "DSV41_FOLDED_FENCE": "1"})
    ff = {f["name"]: f for f in json.loads(proc.stdout)["features"]}["folded_fence"]
    assert ff["value"] is True and ff["source"] == "env DSV41_FOLDED_FENCE"
    assert ff["state"] == "drifted" and proc.returncode == 1   # strict, engine absent
    proc = subprocess.run(["dsv41-flags", "run", "--", "python", "-c",
                           "import dsv41_flags; print(dsv41_flags.current_runtime() is not None)"],
                          cwd=empty, env={**env, "DSV41_LOG_LEVEL": "WARNING"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
    version = _run(["dsv41-flags", "--version"], cwd=empty, env=env).stdout
    assert version.strip() == "dsv41-flags 0.1.0"


def test_fingerprint_is_the_same_without_the_engine_installed(wheel_env):
    """The launch fingerprint does not depend on the machine computing it: sglang's option table
    (aliases, abbreviations: ``--tp`` is ``--tp-size``) is shipped with the package, so the
    engine-less wheel environment and this one (sglang 0.5.23 installed) agree, and
    ``--explain`` names the shipped table, not an installed engine."""
    wheel, venv, empty, env = wheel_env
    cmd = ["fingerprint", "--json", "--explain", "--", "python", "-m", "sglang.launch_server",
           "--model-path", "m", "--tp", "4", "--port", "30000"]
    there = json.loads(_run(["dsv41-flags", *cmd], cwd=empty, env=env).stdout)
    here_env = {**env, "PATH": os.environ["PATH"]}
    here = json.loads(_run([str(Path(sys.executable).with_name("dsv41-flags")), *cmd], cwd=empty,
                           env=here_env).stdout)
    assert there["payload"]["argv"] == ["sglang.launch_server", "--model-path", "m", "--tp-size", "4"]
    assert there["fingerprint"] == here["fingerprint"]
    assert "sglang 0.5.23 option table shipped with dsv41_flags" in there["included"]["argv"]
    assert there["excluded"]["--port"].startswith("engine default (shipped for sglang 0.5.23: ")
