"""A real ``python -m sglang.launch_server --tp 2`` on the CPU, with the plugin the package
installs: every process activates, reports its role and ranks, and agrees on the launch; a live
switch applies on both ranks at the same generation while clients keep generating; the same
launch under ``dsv41-flags run``; a strict drift stops the launch instead of hanging it. A
``requested_by`` over 256 characters is refused, and a switch to the current value bumps no
generation.

One plain launch serves the first five tests (``TestPlainLaunch``, class scope: it is stopped
before the next launch boots); the ``run`` launch and the drift launch are their tests' own.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from ._server import BOOT_TIMEOUT, Launch, Load, http

pytestmark = pytest.mark.server

LAUNCH_ROLES = Counter({"launcher": 1, "scheduler": 2, "detokenizer": 1})


@pytest.fixture(scope="class")
def plain(kit, tmp_path_factory):
    launch = Launch.server(kit, "plain", tmp_path_factory.mktemp("plain"), tp=2).start()
    try:
        yield launch.wait_healthy()
    finally:
        launch.stop()


def resolved_by_pid(launch: Launch) -> dict[int, dict]:
    """Each process's ``flags.resolved`` event (exactly one per process)."""
    events = launch.events("flags.resolved")
    pids = Counter(e["pid"] for e in events)
    assert all(n == 1 for n in pids.values()), f"a process resolved twice: {pids}"
    return {e["pid"]: e for e in events}


def assert_every_process_activated(launch: Launch, *, from_snapshot_launcher: bool) -> str:
    """Main process, both schedulers and the detokenizer each emitted ``flags.resolved`` with its
    role and ranks, on one fingerprint and the session's settings; returns the fingerprint."""
    resolved = resolved_by_pid(launch)
    roles = Counter(e["role"] for e in resolved.values())
    assert roles == LAUNCH_ROLES, f"roles seen: {roles}\n{launch.tail()}"
    schedulers = sorted((e for e in resolved.values() if e["role"] == "scheduler"),
                        key=lambda e: e["tp_rank"])
    assert [(e["tp_rank"], e["pp_rank"]) for e in schedulers] == [(0, 0), (1, 0)]
    for e in resolved.values():
        if e["role"] != "scheduler":
            assert "tp_rank" not in e, e
        assert e["settings_files"] == [str(launch.kit.settings)], e
        assert e["armed"] == [] and e["warnings"] == [], e
        assert e["from_snapshot"] is (from_snapshot_launcher or e["role"] != "launcher"), e
    fingerprints = {e["fingerprint"] for e in resolved.values()}
    assert len(fingerprints) == 1, f"processes disagree on the fingerprint: {fingerprints}"
    assert not launch.events("flags.error"), launch.events("flags.error")
    # the rank guard ran over both ranks and they agreed
    agree = launch.events("ranks.agree")
    assert sorted(e["tp_rank"] for e in agree) == [0, 1] and {e["ranks"] for e in agree} == {2}
    return fingerprints.pop()


def fingerprint_of(kit, launch: Launch) -> str:
    """What ``dsv41-flags fingerprint -- CMD`` says of the launch's command, in its environment."""
    command = launch.command[launch.command.index("python"):]
    code, data = kit.cli_json("fingerprint", "--", *command, env=launch.env)
    assert code == 0, data
    return data["fingerprint"]


class TestPlainLaunch:
    """``python -m sglang.launch_server --tp 2`` as an operator types it: the plugin activates
    every process; status and live switches go through the HTTP routes."""

    def test_every_process_of_a_plain_launch_activates_with_one_fingerprint(self, kit, plain):
        fingerprint = assert_every_process_activated(plain, from_snapshot_launcher=False)
        assert fingerprint == fingerprint_of(kit, plain)
        launcher = [e for e in plain.events("flags.resolved") if e["role"] == "launcher"]
        assert launcher[0]["pid"] == plain.proc.pid

    def test_status_url_lists_both_ranks_and_agrees_with_the_events(self, kit, plain):
        code, status = kit.cli_json("status", "--url", plain.url)
        assert code == 0, status
        assert status["ok"] is True and status["generations_agree"] is True
        resolved = resolved_by_pid(plain)
        ranks = sorted(status["ranks"], key=lambda r: r["tp_rank"])
        assert [(r["tp_rank"], r["pp_rank"], r["role"]) for r in ranks] == \
            [(0, 0, "scheduler"), (1, 0, "scheduler")]
        for r in ranks:
            event = resolved[r["pid"]]      # the rank is the process that logged this event
            assert (event["role"], event["tp_rank"]) == ("scheduler", r["tp_rank"])
            assert r["fingerprint"] == event["fingerprint"]
            assert r["profile"] == event["profile"] and r["settings_files"] == event["settings_files"]
            assert r["generation"] == 0 and r["switches"] == []
            features = {f["name"]: f for f in r["features"]}
            assert set(features) == set(event["features"])
            for name, f in features.items():
                assert f["value"] == event["features"][name]["value"], (name, f)
                assert f["source"] == event["features"][name]["source"], (name, f)
            assert features["folded_fence"]["live"] is True
            assert features["autotune_keep"]["live"] is False
        server = status["server"]
        assert server["role"] == "launcher" and server["pid"] == plain.proc.pid
        assert server["fingerprint"] == resolved[server["pid"]]["fingerprint"]

        human = kit.run_cli("status", "--url", plain.url)
        assert human.returncode == 0, human.stderr
        assert f"{plain.url}: 2 scheduler rank(s), generation 0 on every rank" in human.stdout

    def test_a_switch_under_generate_load_applies_on_every_rank_at_one_generation(self, kit, plain):
        code, before = kit.cli_json("status", "--url", plain.url)
        assert code == 0, before
        (g0,) = {r["generation"] for r in before["ranks"]}
        scheduler_pids = sorted(r["pid"] for r in before["ranks"])
        load = Load(plain.url, threads=4, per_thread=12, deadline_s=240).start()
        try:
            assert load.wait_done(4) >= 4, f"no request answered under load\n{plain.tail()}"
            code_on, on = kit.cli_json("set", "folded_fence=on", "--url", plain.url,
                                       "--by", "server-tier")
            n_on = load.done()
            assert load.wait_done(n_on + 4) >= n_on + 4, "no request answered while switched on"
            code_off, off = kit.cli_json("set", "folded_fence=off", "--url", plain.url,
                                         "--by", "server-tier")
            n_off = load.done()
            load.wait_done(n_off + 2)
        finally:
            load.stop()
        assert not load.running(), "a client is still waiting for an answer"
        statuses = Counter(status for status, _ in load.results)
        assert statuses == Counter({200: len(load.results)}), statuses
        for _, body in load.results:
            assert len(json.loads(body)["output_ids"]) == 8
        assert len(load.results) >= n_off + 2

        for code, answer, old, new, generation in ((code_on, on, False, True, g0 + 1),
                                                   (code_off, off, True, False, g0 + 2)):
            assert code == 0, answer
            assert (answer["ok"], answer["feature"], answer["old"], answer["new"]) == \
                (True, "folded_fence", old, new)
            assert answer["generation"] == generation
            ranks = answer["ranks"]
            assert sorted(r["pid"] for r in ranks) == scheduler_pids
            assert sorted(r["tp_rank"] for r in ranks) == [0, 1]
            # lockstep: every rank applied it at the same generation and the same forward step
            assert {r["generation"] for r in ranks} == {generation}
            assert {r["step"] for r in ranks} == {answer["step"]}
        assert off["step"] > on["step"], "the server ran no forward step between the two switches"

        # every other process of the launch applied each switch too (peers: the HTTP process,
        # the detokenizer), with the ranks' generation
        others = plain.wait_events("feature.toggled", 4, requested_by="server-tier",
                                   feature="folded_fence")
        others = [e for e in others if e["role"] != "scheduler" and e["generation"] > g0]
        assert sorted((e["role"], e["generation"], e["new"]) for e in others) == [
            ("detokenizer", g0 + 1, True), ("detokenizer", g0 + 2, False),
            ("launcher", g0 + 1, True), ("launcher", g0 + 2, False)], others
        assert sorted(p["role"] for p in on["processes"]) == ["detokenizer", "launcher"], on
        toggled = plain.wait_events("feature.toggled", 4, role="scheduler")
        seen = sorted((e["generation"], e["tp_rank"], e["new"], e["step"], e["requested_by"])
                      for e in toggled if e["generation"] > g0)
        assert seen == [(g0 + 1, 0, True, on["step"], "server-tier"),
                        (g0 + 1, 1, True, on["step"], "server-tier"),
                        (g0 + 2, 0, False, off["step"], "server-tier"),
                        (g0 + 2, 1, False, off["step"], "server-tier")]
        assert sorted(e["pid"] for e in toggled if e["generation"] == g0 + 1) == scheduler_pids
        assert not plain.events("feature.toggle_refused")

        code, after = kit.cli_json("status", "--url", plain.url)
        assert code == 0 and after["generations_agree"] is True, after
        for r in after["ranks"]:
            assert r["generation"] == g0 + 2
            ff = {f["name"]: f for f in r["features"]}["folded_fence"]
            assert ff["value"] is False
            assert ff["source"].startswith(f"live switch generation {g0 + 2} by server-tier")
            assert [(t["generation"], t["new"]) for t in r["switches"][-2:]] == \
                [(g0 + 1, True), (g0 + 2, False)]


    def _status(self, plain) -> dict:
        code, body = http("GET", plain.url + "/dsv41_flags/status", timeout=90)
        assert code == 200, body
        return json.loads(body)

    def test_a_requested_by_over_256_characters_is_refused_and_changes_nothing(self, plain):
        before = self._status(plain)["ranks"]
        value = {f["name"]: f for f in before[0]["features"]}["folded_fence"]["value"]
        code, body = http("POST", plain.url + "/dsv41_flags/set", timeout=90,
                          body={"name": "folded_fence", "value": not value, "requested_by": "x" * 257})
        assert 400 <= code < 500, (code, body)
        assert json.loads(body)["ok"] is False
        after = self._status(plain)["ranks"]
        assert [(r["generation"], len(r["switches"])) for r in after] == \
            [(r["generation"], len(r["switches"])) for r in before]
        assert {f["name"]: f for f in after[0]["features"]}["folded_fence"]["value"] == value
        assert not [e for e in plain.events("feature.toggled") if e["requested_by"] == "x" * 257]

    def test_a_switch_to_the_current_value_bumps_no_generation(self, plain):
        before = self._status(plain)["ranks"]
        (g0,) = {r["generation"] for r in before}
        value = {f["name"]: f for f in before[0]["features"]}["folded_fence"]["value"]
        who = "y" * 256  # the longest requested_by accepted
        code, body = http("POST", plain.url + "/dsv41_flags/set", timeout=90,
                          body={"name": "folded_fence", "value": value, "requested_by": who})
        assert code == 200, body
        answer = json.loads(body)
        assert answer["ok"] is True and answer["generation"] == g0, answer
        after = self._status(plain)["ranks"]
        assert [(r["generation"], len(r["switches"])) for r in after] == \
            [(g0, len(r["switches"])) for r in before]
        assert not [e for e in plain.events("feature.toggled") if e["requested_by"] == who]
        unchanged = plain.wait_events("feature.toggle_unchanged", 2, requested_by=who,
                                      role="scheduler")
        assert sorted(e["tp_rank"] for e in unchanged) == [0, 1]


def test_the_same_launch_under_dsv41_flags_run_activates_every_process(kit, tmp_path):
    launch = Launch.server(kit, "run", tmp_path, tp=2, prefix=(str(kit.cli), "run", "--"))
    launch.start()
    try:
        launch.wait_healthy()
        # run resolved once and handed the launch down: every process took it from the snapshot,
        # and the launcher is the run process itself (the command replaced it)
        fingerprint = assert_every_process_activated(launch, from_snapshot_launcher=True)
        launcher = [e for e in launch.events("flags.resolved") if e["role"] == "launcher"]
        assert launcher[0]["pid"] == launch.proc.pid
        assert fingerprint == fingerprint_of(kit, launch)
        code, status = kit.cli_json("status", "--url", launch.url)
        assert code == 0 and status["generations_agree"] is True, status
        assert sorted(r["tp_rank"] for r in status["ranks"]) == [0, 1]
        assert {r["fingerprint"] for r in status["ranks"]} == {fingerprint}
    finally:
        launch.stop()


DRIFT_FEATURE = '''
"""A feature whose requirement the engine lacks: its target is imported by the scheduler
processes only (the model registry imports it while loading the model)."""
from dsv41_flags import Feature


def install(module, ctx):
    pass


FEATURE = Feature(
    name="drift_probe",
    target="sglang.srt.models.llama",
    install=install,
    summary="Requires a method sglang's LlamaForCausalLM does not have",
    requires=("LlamaForCausalLM.dsv41_server_tier_missing",),
)
'''

DRIFT_TIMEOUT = BOOT_TIMEOUT  # seconds: the launch must have exited by then (it stops before serving)


def test_a_strict_drift_in_the_schedulers_stops_the_launch_with_the_message(kit, tmp_path):
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "drift_probe.py").write_text(DRIFT_FEATURE)
    settings = tmp_path / "settings.toml"
    settings.write_text("[default]\ndrift_probe = true\nstrict = true\n")
    launch = Launch.server(kit, "drift", tmp_path, tp=2, env_extra={"DSV41_SETTINGS": str(settings)})
    launch.start()
    try:
        status = launch.wait_exit(DRIFT_TIMEOUT)
        assert status is not None, f"the launch still runs {DRIFT_TIMEOUT:.0f} s after its start " \
                                   f"(hung on a drifted scheduler?)\n{launch.tail()}"
        assert status != 0
        message = ("feature 'drift_probe': target sglang.srt.models.llama drifted: missing "
                   "LlamaForCausalLM.dsv41_server_tier_missing")
        drifted = launch.events("feature.drifted")
        assert drifted and {e["role"] for e in drifted} == {"scheduler"}, launch.tail()
        assert all(e["missing"] == ["LlamaForCausalLM.dsv41_server_tier_missing"] for e in drifted)
        errors = launch.events("flags.error")
        assert errors and {e["role"] for e in errors} == {"scheduler"}
        for e in errors:
            assert e["error_type"] == "DriftError" and e["strict"] is True
            assert message in e["cause"] and "strict mode" in e["cause"]
            assert e["outcome"] == "stopped: exit status 3 (strict mode)"
            assert e["entry"] == "import of drift_probe's target"
        # the launcher saw a scheduler stop with the framework's status, and stopped
        assert "scheduler died during initialization (exit code: 3)" in launch.text()
    finally:
        launch.stop()
