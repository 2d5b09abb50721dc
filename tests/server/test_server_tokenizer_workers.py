"""``--tokenizer-worker-num 2``: sglang serves HTTP from two uvicorn worker processes, each started
by import path (``uvicorn.run(app_path, workers=2)``), and its plugin loader enters neither. A live
feature whose target runs where requests are tokenized (``SamplingParams.verify``, capped at 3
tokens by ``verify_cap_feature``) is patched in every worker only when they are activated.

Two launches of one shape (tp 1, the operator's feature off at boot), booted at once:

- **the plain plugin** (``python -m sglang.launch_server``): the workers never activate, so the
  process that answers HTTP has no dsv41_flags routes. ``dsv41-flags set NAME=on --url`` is
  refused (exit 1, one line naming the tokenizer workers, why, and ``dsv41-flags run --``),
  nothing is switched in any process, and ``/generate`` answers what it answered before;
- **under ``dsv41-flags run --``**: each worker activates and is a peer of the launch (role
  ``tokenizer_worker``); ``set NAME=on`` applies on the rank and in every process (both workers,
  the launcher, the detokenizer) with one generation, every ``/generate`` is capped whichever
  worker takes it, and ``status --url`` lists every process.

On 2 busy cores a worker needs more than uvicorn's default 10 s to import sglang before it
answers its supervisor's health ping, and is killed and restarted meanwhile
(``SGLANG_UVICORN_WORKER_HEALTHCHECK_TIMEOUT``, sglang's default 10): both launches give it
``WORKER_HEALTHCHECK_S``.
"""
from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ._server import Kit, Launch, http, verify_cap_feature

pytestmark = pytest.mark.server

CAP = "tw_cap"
WORKERS = 2
WORKER_HEALTHCHECK_S = 180
WORKERS_UP_S = 120.0      # seconds from /health answering to every worker serving
REQUESTS = 8              # /generate requests per check, sent 4 at a time (spread over workers)
STATUS_TRIES = 20         # GET /dsv41_flags/status calls to see each worker answer one
BODY = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
SETTINGS = f"[default]\nfolded_fence = false\nautotune_keep = false\n{CAP} = false\nstrict = true\n"
#: what a refusal through a worker without the routes must say: the cause, the fix, no change
REFUSAL = ("404", "no dsv41_flags routes", "nothing was changed", "--tokenizer-worker-num",
           "tokenizer workers", "plain sglang plugin", "dsv41-flags run --")
WORKER_LINE = re.compile(r"Start multi-tokenizer worker process (\d+)")


#: the admin key of the launch under dsv41-flags run (its routes must check it themselves)
ADMIN_KEY = "WORKERSADMIN"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

def operator_settings(work: Path) -> Path:
    """``work/settings.toml`` with ``features/tw_cap.py`` beside it (the feature off at boot)."""
    (work / "features").mkdir(parents=True)
    (work / "features" / f"{CAP}.py").write_text(verify_cap_feature(CAP))
    settings = work / "settings.toml"
    settings.write_text(SETTINGS)
    return settings


def worker_pids(launch: Launch, timeout: float = WORKERS_UP_S) -> list[int]:
    """The pids of the launch's tokenizer workers, as sglang logs them, once ``WORKERS`` serve
    (uvicorn's ``Application startup complete.`` once per worker); fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        text = launch.text()
        pids = sorted({int(p) for p in WORKER_LINE.findall(text)})
        if text.count("Application startup complete.") >= WORKERS and len(pids) >= WORKERS:
            return pids
        if not launch.alive() or time.monotonic() > deadline:
            raise AssertionError(f"{launch.name}: {WORKERS} tokenizer workers not serving within "
                                 f"{timeout:g} s (pids seen: {pids})\n{launch.tail()}")
        time.sleep(1.0)


def completion_tokens(launch: Launch) -> list[int]:
    """``REQUESTS`` ``/generate`` answers (completion tokens each), 4 in flight at a time."""
    def one(_):
        status, text = http("POST", launch.url + "/generate", BODY, timeout=120)
        assert status == 200, (launch.name, status, text[:500])
        return json.loads(text)["meta_info"]["completion_tokens"]
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(REQUESTS)))


def cap_values(process: dict) -> bool | None:
    return {f["name"]: f for f in process["features"]}[CAP]["value"]


@pytest.fixture(scope="module")
def launches(kit: Kit, tmp_path_factory):
    """``{"plain": (launch, worker pids), "run": (launch, worker pids)}``, booted at the same
    time, every tokenizer worker of each serving; both stopped (their whole process groups) at
    the end."""
    work = tmp_path_factory.mktemp("tokenizer_workers")
    settings = operator_settings(work / "operator")
    env = {"DSV41_SETTINGS": str(settings),
           "SGLANG_UVICORN_WORKER_HEALTHCHECK_TIMEOUT": str(WORKER_HEALTHCHECK_S)}
    args = ("--tokenizer-worker-num", str(WORKERS))
    started = {
        "plain": Launch.server(kit, "plain", work / "plain", tp=1, bind="0", extra_args=args,
                               env_extra=env),
        "run": Launch.server(kit, "run", work / "run", tp=1, bind="1",
                             extra_args=args + ("--admin-api-key", ADMIN_KEY),
                             env_extra=env, prefix=(str(kit.cli), "run", "--")),
    }
    try:
        for launch in started.values():
            launch.start()
        yield {name: (launch.wait_healthy(), worker_pids(launch))
               for name, launch in started.items()}
    finally:
        for launch in started.values():
            launch.stop()


def test_under_the_plain_plugin_a_switch_is_refused_naming_the_workers(kit, launches):
    plain, workers = launches["plain"]
    assert completion_tokens(plain) == [8] * REQUESTS
    # the workers never activated: only sglang's processes that call load_plugins() did
    activated = {e["pid"]: e["role"] for e in plain.events("flags.resolved")}
    assert sorted(activated.values()) == ["detokenizer", "launcher", "scheduler"], activated
    assert not set(workers) & set(activated), (workers, activated)

    proc = kit.run_cli("set", f"{CAP}=on", "--url", plain.url, "--by", "test")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    refusal = proc.stderr.strip()
    assert len(refusal.splitlines()) == 1 and all(p in refusal for p in REFUSAL), refusal
    code, answer = kit.cli_json("set", f"{CAP}=on", "--url", plain.url, "--by", "test")
    assert code == 1 and answer["ok"] is False, answer
    assert all(p in answer["error"] for p in REFUSAL), answer
    code, status = kit.cli_json("status", "--url", plain.url)
    assert code == 1 and "--tokenizer-worker-num" in status["error"], status

    # nothing changed anywhere: no process switched, and /generate answers as before
    assert plain.events("feature.toggled") == []
    assert completion_tokens(plain) == [8] * REQUESTS


def test_under_dsv41_flags_run_a_switch_reaches_every_worker(kit, launches):
    run, workers = launches["run"]
    assert completion_tokens(run) == [8] * REQUESTS
    # sglang adds its key middleware in single-tokenizer mode only: the routes check the key
    # themselves, with sglang's own decision (decide_request_auth)
    for key in (None, "WRONG"):
        code, answer = kit.cli_json("set", f"{CAP}=on", "--url", run.url, "--by", "test",
                                    *(("--api-key", key) if key else ()))
        assert code == 1 and answer["ok"] is False, answer
        status, _ = http("GET", run.url + "/dsv41_flags/status", timeout=90,
                         headers={"Authorization": f"Bearer {key}"} if key else None)
        assert status == 401, status
    assert run.events("feature.toggled") == []
    code, answer = kit.cli_json("set", f"{CAP}=on", "--url", run.url, "--by", "test",
                                "--api-key", ADMIN_KEY)
    assert code == 0 and answer["ok"] is True and answer["generation"] == 1, answer
    processes = answer["processes"]
    assert sorted(p["role"] for p in processes) == \
        ["detokenizer", "launcher"] + ["tokenizer_worker"] * WORKERS, processes
    assert sorted(p["pid"] for p in processes if p["role"] == "tokenizer_worker") == workers
    assert all(p["ok"] and p["new"] is True and p["generation"] == 1 for p in processes), processes

    # every request is capped, whichever worker takes it
    assert completion_tokens(run) == [3] * REQUESTS

    # connections are spread over both workers: each answers the status route in turn, and each
    # lists every other process of the launch, every one switched on at generation 1
    answered = set()
    for _ in range(STATUS_TRIES):
        code, text = http("GET", run.url + "/dsv41_flags/status", timeout=90, headers=ADMIN)
        assert code == 200, text[:2000]
        data = json.loads(text)
        answered.add(data["server"]["pid"])
        everyone = [data["server"], *data["processes"]]
        assert sorted(p["role"] for p in everyone) == \
            ["detokenizer", "launcher"] + ["tokenizer_worker"] * WORKERS, everyone
        assert {(cap_values(p), p["generation"]) for p in everyone} == {(True, 1)}, everyone
        if answered == set(workers):
            break
    assert answered == set(workers), (answered, workers)
    code, status = kit.cli_json("status", "--url", run.url, "--api-key", ADMIN_KEY)
    assert code == 0 and status["ok"] is True, status
    listed = sorted([status["server"]["pid"]] + [p["pid"] for p in status["processes"]])
    launcher = [e["pid"] for e in run.events("flags.resolved") if e["role"] == "launcher"]
    detokenizer = [e["pid"] for e in run.events("flags.resolved") if e["role"] == "detokenizer"]
    assert listed == sorted(workers + launcher + detokenizer), status

    code, answer = kit.cli_json("set", f"{CAP}=off", "--url", run.url, "--by", "test",
                                "--api-key", ADMIN_KEY)
    assert code == 0 and answer["generation"] == 2, answer
    assert completion_tokens(run) == [8] * REQUESTS
