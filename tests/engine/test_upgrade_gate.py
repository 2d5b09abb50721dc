"""Engine tier, the upgrade gate: ``dsv41-flags check --engine`` on real sglang wheels
read in place (never installed, never imported), and on a source tree.

The wheels (13-39 MB each) are fetched once with ``pip download --no-deps`` into the stable cache
(``$XDG_CACHE_HOME/dsv41-flags/engines``) and reused by later runs. When the package registry
cannot be reached the tests fail saying so: they are never skipped.
"""
import json
import shutil
import sys

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app
from dsv41_flags.upgrade_gate.releases import cache_dir, open_release

pytestmark = pytest.mark.engine

VERSIONS = ("0.5.15", "0.5.20", "0.5.22", "0.5.23")
FF_TARGET = "sglang/srt/speculative/dspark_components/dspark_verify.py"
AK_TARGET = "sglang/srt/model_executor/runner/flashinfer_autotune.py"


@pytest.fixture(scope="module")
def wheels():
    """``{version: wheel path}``, fetched into the cache once (fails when the registry is down)."""
    out = {}
    for v in VERSIONS:
        release = open_release(f"sglang=={v}")
        if release.error:
            pytest.fail(f"cannot fetch sglang=={v} into {cache_dir()} (the package registry must be "
                        f"reachable for this test): {release.error}")
        assert release.version == v and release.name == "sglang"
        out[v] = release.where
    return out


@pytest.fixture
def gate(monkeypatch):
    from tests.conftest import REPO_SETTINGS

    for key in [k for k in __import__("os").environ if k.startswith("DSV41_")]:
        monkeypatch.delenv(key)

    def run(*specs):
        args = ["check", "--all", "--json", "-s", str(REPO_SETTINGS)]
        for s in specs:
            args += ["--engine", str(s)]
        result = CliRunner().invoke(app, args)
        data = json.loads(result.stdout)
        return result.exit_code, {r["feature"]: r["cells"] for r in data["features"]}, data
    return run


def test_matrix_on_four_real_releases(wheels, gate):
    before = {m for m in sys.modules if m.startswith("sglang")}
    code, rows, data = gate(*(f"sglang=={v}" for v in VERSIONS))   # cached: no network needed
    assert code == 1 and not data["ok"]
    assert [r["label"] for r in data["releases"]] == [f"sglang {v}" for v in VERSIONS]
    ff = {c["version"]: c for c in rows["folded_fence"]}
    ak = {c["version"]: c for c in rows["autotune_keep"]}

    # 0.5.15: the verify module does not exist; the autotune module lacks both gate functions
    assert ff["0.5.15"]["state"] == "drifted"
    assert ff["0.5.15"]["missing"] == ["module sglang.srt.speculative.dspark_components.dspark_verify"]
    assert ak["0.5.15"]["state"] == "drifted"
    assert ak["0.5.15"]["missing"] == ["_autotune_cache_digest", "_drop_diverged_autotune_cache"]
    verdicts = {v["requirement"]: v["verdict"] for v in ak["0.5.15"]["verdicts"]}
    assert verdicts["flashinfer_autotune_context"] == "ok"

    # 0.5.20 and 0.5.22: the structure is there, the release is outside the range
    for v in ("0.5.20", "0.5.22"):
        for cell in (ff[v], ak[v]):
            assert cell["state"] == "out-of-range", cell
            assert "structure ok" in cell["detail"] and f"{v} is outside" in cell["detail"]
            assert all(x["verdict"] == "ok" for x in cell["verdicts"])

    # 0.5.23: clean
    assert ff["0.5.23"]["state"] == ak["0.5.23"]["state"] == "ok"
    assert {m for m in sys.modules if m.startswith("sglang")} == before   # nothing imported


def test_wheel_path_and_only_the_clean_release_exits_0(wheels, gate):
    code, rows, _ = gate(wheels["0.5.23"])
    assert code == 0 and [c["state"] for cells in rows.values() for c in cells] == ["ok", "ok"]


def test_source_tree_with_a_renamed_method_suggests_the_rename(tmp_path, gate):
    import sglang

    installed = __import__("pathlib").Path(sglang.__file__).parent.parent
    for rel in (FF_TARGET, AK_TARGET, "sglang/version.py", "sglang/_version.py"):
        dest = tmp_path / "checkout" / "python" / rel        # sglang's own checkout layout
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed / rel, dest)
    ff = tmp_path / "checkout" / "python" / FF_TARGET
    ff.write_text(ff.read_text().replace("def accept_and_finalize(", "def accept_and_finalize_v2("))
    code, rows, data = gate(tmp_path / "checkout")
    assert code == 1
    cell = rows["folded_fence"][0]
    assert cell["state"] == "drifted" and cell["version"] == sglang.__version__
    (v,) = [v for v in cell["verdicts"] if v["verdict"] != "ok"]
    assert v["piece"] == "TargetVerifyExecutor.accept_and_finalize"
    assert v["closest"] == "TargetVerifyExecutor.accept_and_finalize_v2"
    assert "closest: TargetVerifyExecutor.accept_and_finalize_v2" in cell["detail"]
    assert rows["autotune_keep"][0]["state"] == "ok"


def test_unreadable_specs_say_why(tmp_path, gate):
    bad = tmp_path / "broken.whl"
    bad.write_text("not a zip")
    code, rows, data = gate(bad, tmp_path / "nothing-here", "sglang==0.0.0.dev9999")
    states = [c["state"] for c in rows["folded_fence"]]
    assert code == 1 and states == ["unreadable"] * 3
    details = [c["detail"] for c in rows["folded_fence"]]
    assert "not a readable wheel" in details[0] and "no such file" in details[1]
    # the index answered (no such version, the ones it has listed) or could not be reached
    assert details[2].startswith(("sglang==0.0.0.dev9999 does not exist on the package index",
                                  "pip download sglang==0.0.0.dev9999: the package index could "
                                  "not be reached")), details[2]
    assert not list(cache_dir().glob(".download-*"))      # no half-written download left behind


def test_a_real_wheel_renamed_to_another_distribution_never_passes(wheels, gate, tmp_path):
    """The real sglang 0.5.23 wheel, every member copied, as ``sglang_othername-0.5.24`` whose
    METADATA says ``Name: evil-pkg``: no feature reads n/a and passes; the column is refused
    naming the file, the name found and the one expected."""
    import zipfile

    fake = tmp_path / "sglang_othername-0.5.24-py3-none-any.whl"
    with zipfile.ZipFile(wheels["0.5.23"]) as src, zipfile.ZipFile(fake, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"Name: sglang\n", b"Name: evil-pkg\n", 1)
                data = data.replace(b"Version: 0.5.23\n", b"Version: 0.5.24\n", 1)
                assert b"Name: evil-pkg\n" in data
            dst.writestr(info.filename, data)
    code, rows, data = gate(fake)
    assert code == 1 and not data["ok"]
    for cells in rows.values():
        (cell,) = cells
        assert cell["state"] == "unreadable", cell
        assert str(fake) in cell["detail"] and "'evil-pkg'" in cell["detail"] and \
            "'sglang'" in cell["detail"], cell["detail"]
