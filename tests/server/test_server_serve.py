"""``dsv41-flags serve --cpu``: the operator's own settings and features and sglang's own options
(``--tp``, ``--admin-api-key``, ``--enable-metrics``) on the packaged CPU platform with the
shipped tiny model, as docs/quickstart.md shows it; the quickstart's live feature
(``docs/examples/features/max_new_tokens_cap.py``, in the schedulers) changes what ``/generate``
answers after ``set ... =on``, and not before.

A live feature whose target runs in the HTTP server process (``SamplingParams.verify``, called by
the tokenizer manager) is switched there too, and in the detokenizer: ``set`` lists every process
with its role and applied state."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ._server import Launch, free_port_block, http, verify_cap_feature

pytestmark = pytest.mark.server

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "features" / "max_new_tokens_cap.py"
ADMIN_KEY = "SERVEADMIN"
VERIFY_CAP = verify_cap_feature("verify_cap")
BODY = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8, "temperature": 0}}


@pytest.fixture(scope="module")
def served(kit, tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    mine = work / "mine"
    (mine / "features").mkdir(parents=True)
    shutil.copy(EXAMPLE, mine / "features")
    (mine / "features" / "verify_cap.py").write_text(VERIFY_CAP)
    settings = mine / "settings.toml"
    settings.write_text("[default]\nfolded_fence = false\nautotune_keep = false\n"
                        "max_new_tokens_cap = false\nverify_cap = false\nstrict = true\n")
    port = free_port_block()
    env = kit.env("0")
    env.pop("DSV41_SETTINGS")
    env.pop("SGLANG_CPU_OMP_THREADS_BIND")      # serve --cpu binds one CPU per scheduler
    launch = Launch(kit, "serve", work, [str(kit.cli), "serve", "--cpu", "--settings", str(settings),
                                         "--tp", "2", "--port", str(port), "--enable-metrics",
                                         "--admin-api-key", ADMIN_KEY], env, port=port).start()
    try:
        yield launch.wait_healthy(), settings
    finally:
        launch.stop()


def completion_tokens(launch: Launch) -> int:
    status, text = http("POST", launch.url + "/generate", BODY, timeout=120)
    assert status == 200, text
    return json.loads(text)["meta_info"]["completion_tokens"]


def test_serve_takes_the_operators_settings_features_and_sglang_options(kit, served):
    launch, settings = served
    resolved = launch.events("flags.resolved")
    assert {e["role"] for e in resolved} >= {"launcher", "scheduler"}
    assert all(e["settings_files"] == [str(settings)] for e in resolved), resolved
    status, text = http("GET", launch.url + "/metrics")
    assert status == 200 and "max_new_tokens_cap" in text        # --enable-metrics passed on
    code, data = kit.cli_json("status", "--url", launch.url, env=kit.env())
    assert code != 0 and "admin" in json.dumps(data).lower()      # --admin-api-key passed on


def test_the_quickstart_switch_changes_what_generate_answers(kit, served):
    launch, _ = served
    assert completion_tokens(launch) == 8
    env = {**kit.env(), "DSV41_API_KEY": ADMIN_KEY}
    code, data = kit.cli_json("set", "max_new_tokens_cap=on", "--url", launch.url, "--by", "test",
                              env=env)
    assert code == 0, data
    assert completion_tokens(launch) == 2
    code, data = kit.cli_json("set", "max_new_tokens_cap=off", "--url", launch.url, "--by", "test",
                              env=env)
    assert code == 0, data
    assert completion_tokens(launch) == 8


def test_a_switch_reaches_the_http_process_and_the_detokenizer(kit, served):
    """The feature's target runs in the HTTP process: the switch applies there (and in every
    other process of the launch) and ``/generate`` answers 3 tokens, then 8 again."""
    launch, _ = served
    env = {**kit.env(), "DSV41_API_KEY": ADMIN_KEY}
    assert completion_tokens(launch) == 8
    code, data = kit.cli_json("set", "verify_cap=on", "--url", launch.url, "--by", "test", env=env)
    assert code == 0, data
    roles = sorted(p["role"] for p in data["processes"])
    assert roles == ["detokenizer", "launcher"], data["processes"]
    assert all(p["ok"] and p["new"] is True for p in data["processes"]), data["processes"]
    assert completion_tokens(launch) == 3
    code, data = kit.cli_json("status", "--url", launch.url, env=env)
    assert code == 0, data
    assert [p["role"] for p in data["processes"]] == ["detokenizer"], data
    code, data = kit.cli_json("set", "verify_cap=off", "--url", launch.url, "--by", "test", env=env)
    assert code == 0, data
    assert completion_tokens(launch) == 8
