"""Engine tier, drift caught before serving: the static check against the real
sglang 0.5.23 source, without importing the engine."""
import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from dsv41_flags.cli import app

pytestmark = pytest.mark.engine

DV = "sglang.srt.speculative.dspark_components.dspark_verify"


@pytest.fixture
def check(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("DSV41_")]:
        monkeypatch.delenv(key)
    feats = tmp_path / "features"
    feats.mkdir()
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\n")

    def run(features: dict[str, str], *extra):
        for name, decl in features.items():
            (feats / f"{name}.py").write_text(textwrap.dedent(f"""
                from dsv41_flags import Feature
                FEATURE = Feature(name={name!r}, install=lambda m, c: None, summary="s", {decl})
            """))
        result = CliRunner().invoke(app, ["check", "--all", "--json", "-s", str(settings), *extra])
        data = json.loads(result.stdout)   # only the features written here (not the shipped ones)
        data["features"] = [f for f in data["features"] if f["feature"] in features]
        return result.exit_code, data
    return run


def test_both_ported_features_pass_check_without_importing_the_engine(monkeypatch):
    from tests.conftest import REPO_SETTINGS

    for key in [k for k in __import__("os").environ if k.startswith("DSV41_")]:
        monkeypatch.delenv(key)
    before = {m for m in sys.modules if m.startswith("sglang")}
    result = CliRunner().invoke(app, ["check", "--all", "--json", "-s", str(REPO_SETTINGS)])
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["ok"] and data["mode"] == "static"
    assert {f["feature"] for f in data["features"]} == {"folded_fence", "autotune_keep"}
    assert all(f["source"].endswith(".py") for f in data["features"])
    assert {m for m in sys.modules if m.startswith("sglang")} == before   # nothing imported


@pytest.mark.parametrize("decl,piece", [
    (f"target={DV!r}, requires=('TargetVerifyExecutor.accept_and_finalise',)",
     "TargetVerifyExecutor.accept_and_finalise"),                                   # renamed method
    (f"target={DV!r}, requires=('TargetVerifyExecutor.accept_and_finalize(folded)',)",
     "TargetVerifyExecutor.accept_and_finalize(folded)"),                           # removed parameter
    ("target='sglang.srt.speculative.dspark_components.gone', requires=('X',)",
     "module sglang.srt.speculative.dspark_components.gone"),                       # missing module
    ("target='sglang.srt.model_executor.runner.flashinfer_autotune', "
     "requires=('_drop_diverged_autotune_cache(cache_path, group, env, extra)',)",
     "_drop_diverged_autotune_cache(extra)"),
    (f"target={DV!r}, requires=('AcceptOuts.out_tokens', 'AcceptOuts.accept_lens')",
     "AcceptOuts.accept_lens"),                                                     # struct field
    ("target='sglang.srt.managers.scheduler', "
     "requires=('Scheduler.event_loop_pp', 'Scheduler.event_loop_nope')",          # inherited from
     "Scheduler.event_loop_nope"),                                                  # a mixin: found
])
def test_drifted_feature_exits_1_naming_the_piece(check, decl, piece):
    code, data = check({"drifty": decl})
    assert code == 1 and not data["ok"]
    assert data["features"][0]["missing"] == [piece]


def test_module_level_names_and_reexports_count(check):
    code, data = check({"names": "target='sglang.srt.model_executor.runner.flashinfer_autotune', "
                                 "requires=('FLASHINFER_AUTOTUNE_WORKAROUND_SKIPS', 'logger', 'envs', "
                                 "'log_info_on_rank0', 'Path')"})
    assert code == 0, data


def test_version_range_and_fixed_in(check):
    code, data = check({"future": f"target={DV!r}, engine='sglang>=0.6'"})
    assert code == 1 and "sglang 0.5.23 is outside sglang>=0.6" in data["features"][0]["missing"][0]
    code, data = check({"future": f"target={DV!r}, engine='sglang>=0.5', fixed_in='>=0.5.23'"})
    assert "upstream carries the fix" in data["features"][0]["fixed_upstream"]


def test_live_check_in_a_subprocess_agrees(check):
    code, data = check({"live": f"target={DV!r}, requires=('TargetVerifyExecutor.accept_and_finalize"
                                f"(folded_accept, nope)', 'AcceptOuts')"}, "--import")
    assert code == 1 and data["mode"] == "import"
    assert data["features"][0]["missing"] == ["TargetVerifyExecutor.accept_and_finalize(nope)"]


SA = "sglang.srt.server_args"


@pytest.mark.parametrize("requires,missing", [
    (("ServerArgs.tp_size", "ServerArgs.model_path", "ServerArgs(tp_size, dp_size)",
      "ServerArgs.resolve_once", "ServerArgs.from_cli_args"), []),
    (("ServerArgs.tp_sizee",), ["ServerArgs.tp_sizee"]),            # a misspelt field
    (("ServerArgs.attn_tp_size",), ["ServerArgs.attn_tp_size"]),    # derived: not a field
    (("ServerArgs(tp_size, nope)",), ["ServerArgs(nope)"]),
])
def test_server_args_fields_are_read_from_its_defstruct_rebuild(check, requires, missing):
    """sglang rebuilds ServerArgs with msgspec.defstruct from the fields collect_input_fields
    gathers over the namespace classes: the static check reads the same fields."""
    code, data = check({"sa": f"target={SA!r}, requires={requires!r}"})
    (feature,) = data["features"]
    assert feature["missing"] == missing and feature["undecided"] == [], feature
    assert code == (1 if missing else 0)
    if requires == ("ServerArgs.tp_sizee",):
        assert feature["verdicts"][0]["closest"] == "ServerArgs.tp_size"


def test_status_of_a_feature_on_server_args_fields_is_armed(check, tmp_path):
    check({"sa": f"target={SA!r}, requires=('ServerArgs.tp_size',)"})
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\nsa = true\n")
    result = CliRunner().invoke(app, ["status", "--json", "-s", str(settings)])
    (row,) = [r for r in json.loads(result.stdout)["features"] if r["name"] == "sa"]
    assert result.exit_code == 0 and row["state"] == "armed" and row["missing"] == [], row


def test_names_of_a_compiled_engine_module_are_decided_live_when_asked(check):
    decl = ("target='sglang.srt.rust_extensions._server', "
            "requires=('ServerArgs', 'Server', 'NoSuchBinding')")
    code, data = check({"ext": decl})
    assert code == 0 and [v["verdict"] for v in data["features"][0]["verdicts"]] == ["undecided"] * 3
    code, data = check({"ext": decl}, "--live-extensions")
    assert code == 1 and [v["verdict"] for v in data["features"][0]["verdicts"]] == \
        ["ok", "ok", "missing"]
    assert data["features"][0]["missing"] == ["NoSuchBinding"]


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A package index of this machine for ``pip download``: a find-links directory listing
    sglang 0.5.20 and 0.5.23 (names only: no release that exists is fetched), no other index,
    no user pip configuration, the engine cache under tmp_path."""
    links = tmp_path / "links"
    links.mkdir()
    for version in ("0.5.20", "0.5.23"):
        (links / f"sglang-{version}-py3-none-any.whl").write_bytes(b"")
    for key in [k for k in __import__("os").environ if k.startswith(("DSV41_", "PIP_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", __import__("os").devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return links


def _gate(*specs):
    from tests.conftest import REPO_SETTINGS

    result = CliRunner().invoke(app, ["check", "--all", "--json", "-s", str(REPO_SETTINGS),
                                      *[a for s in specs for a in ("--engine", s)]])
    return result.exit_code, json.loads(result.stdout)


def test_a_version_the_index_does_not_have_is_named_with_the_ones_it_has(index, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    code, data = _gate("sglang==0.5.99")
    (release,) = data["releases"]
    assert code == 1 and data["ok"] is False
    assert release["error"] == ("sglang==0.5.99 does not exist on the package index: no release "
                                "matches; the index lists 0.5.20, 0.5.23")
    assert "reachable" not in release["error"]


def test_an_index_that_cannot_be_reached_is_said_as_such(index, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple")   # nothing listens there
    monkeypatch.setenv("PIP_FIND_LINKS", str(index.parent / "empty"))
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    code, data = _gate("sglang==0.5.99")
    (release,) = data["releases"]
    assert code == 1
    assert release["error"].startswith("pip download sglang==0.5.99: the package index could not "
                                       "be reached (Failed to establish a new connection"), release


# ------------------------------------------------------------------ names under a compiled package
#: torch's names come from its compiled extension (``from torch._C import *``, ``globals()``
#: writes, a module ``__getattr__``): no source decides them; the import probe does
TORCH = ("target='torch', engine='sglang>=0.5.23,<0.6', "
         "requires=('float32', 'zeros', 'Tensor.add_', 'nn.Module', 'zeross', 'Tensor.addd_')")


def test_torch_names_are_decided_by_the_import_probe_in_check(check):
    code, data = check({"tt": TORCH})
    (feature,) = data["features"]
    verdicts = {v["requirement"]: v for v in feature["verdicts"]}
    assert [v["verdict"] for v in verdicts.values()] == ["ok"] * 4 + ["missing"] * 2, verdicts
    assert verdicts["zeross"]["closest"] == "zeros"
    assert verdicts["Tensor.addd_"]["closest"] == "Tensor.add_"
    assert "imported in a child process" in verdicts["zeross"]["why"]
    assert feature["missing"] == ["zeross", "Tensor.addd_"] and feature["undecided"] == []
    assert code == 1


def test_a_misspelt_torch_name_stops_status_and_run(check, tmp_path):
    check({"tt": TORCH})
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ntt = true\n")
    result = CliRunner().invoke(app, ["status", "--json", "-s", str(settings)])
    (row,) = [r for r in json.loads(result.stdout)["features"] if r["name"] == "tt"]
    assert row["state"] == "drifted" and row["missing"] == ["zeross", "Tensor.addd_"], row
    assert row["undecided"] == [] and result.exit_code == 1
    result = CliRunner().invoke(app, ["run", "-s", str(settings), "--", sys.executable, "-c", "pass"])
    assert result.exit_code == 1 and "zeross" in result.output and "not starting" in result.output


def test_a_sglang_target_is_never_imported_by_the_probe(check):
    """The engine's own undecided names stay undecided: the static check never imports it."""
    before = {m for m in sys.modules if m.startswith("sglang")}
    code, data = check({"ext": "target='sglang.srt.rust_extensions._server', requires=('Server',)"})
    (v,) = data["features"][0]["verdicts"]
    assert v["verdict"] == "undecided" and "child process" not in v["why"], v
    assert {m for m in sys.modules if m.startswith("sglang")} == before
