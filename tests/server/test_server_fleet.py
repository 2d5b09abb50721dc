"""Fleet flags on real servers (docs/fleet.md): a real Unleash server (the session's
``unleash_service``) and a real flagd file drive live features of real ``python -m
sglang.launch_server`` launches on the CPU.

Three launches, booted together once for the module (module-scoped fixtures), each with its own
settings file and ``features/`` directory (the operator feature ``fleet_cap``: live, its target
``SamplingParams.verify`` runs in the HTTP server process, so a switch changes what ``/generate``
answers), ``--enable-metrics`` and ``--admin-api-key``:

- **canary**: tp 2, ``[default.fleet]`` Unleash (environment ``development``, poll 1 s, labels
  ``cluster = "canary"``), the client token in ``DSV41_FLEET_TOKEN`` only;
- **stable**: tp 1, the same Unleash with ``cluster = "stable"``;
- **flagd**: tp 1, a flagd flag file (flagd's file mode, poll 0.5 s).

What is checked: the boot value with fleet provenance in every process; a flag change in
Unleash switching both ranks at one step under ``/generate`` load with every request answered;
a rollout constrained to one label switching one server and not the other; an Unleash outage
(served on, said, recovered); ``/metrics`` and ``dsv41-flags fleet status`` over both servers;
no token anywhere the framework writes or answers; a flagd file edited, refused when
malformed, applied again when good.

Unleash is shared by the session: every flag here is made fresh by this module
(``dsv41.folded_fence``, ``dsv41.fleet_cap``), and Unleash is started again after the outage
whatever happens.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.files import write_text
from tests.services.unleash import AdminApiError, constraint

from ._server import GENERATE_BODY, Launch, Load, http, verify_cap_feature

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
#: the worktree's package first on every launch's PYTHONPATH (the environment's editable
#: install may point at another checkout)
SRC = REPO / "src"
ADMIN_KEY = "FLEETADMIN"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SERVER_ARGS = ("--enable-metrics", "--admin-api-key", ADMIN_KEY)
ENVIRONMENT = "development"
FENCE = "folded_fence"          # shipped, live; its target is never imported on a CPU (pending)
CAP = "fleet_cap"               # the operator feature below: live, in the HTTP process
FENCE_FLAG = f"dsv41.{FENCE}"
CAP_FLAG = f"dsv41.{CAP}"
WAIT_S = 30.0                   # the longest a change may take to reach every rank (poll 1 s)
STATUS_POLL_S = 0.1

FLEET_CAP = verify_cap_feature("fleet_cap")
BASE = ("[default]\nfolded_fence = false\nautotune_keep = false\nfleet_cap = false\n"
        "strict = true\n")


# ------------------------------------------------------------------ helpers
def operator_settings(work: Path, name: str, fleet_table: str) -> Path:
    """``work/name/settings.toml`` (BASE + ``fleet_table``) with ``features/fleet_cap.py``
    beside it."""
    directory = work / name
    (directory / "features").mkdir(parents=True)
    (directory / "features" / f"{CAP}.py").write_text(FLEET_CAP)
    settings = directory / "settings.toml"
    settings.write_text(BASE + fleet_table)
    return settings


def unleash_table(url: str, cluster: str) -> str:
    return (f'[default.fleet]\nprovider = "unleash"\nurl = "{url}"\n'
            f'environment = "{ENVIRONMENT}"\npoll_interval_s = 1\nmin_switch_interval_s = 0.2\n'
            f'labels = {{ cluster = "{cluster}" }}\n')


def write_fence_flag(path: Path, on: bool) -> None:
    write_text(path, json.dumps({"flags": {FENCE_FLAG: {
        "state": "ENABLED", "variants": {"on": True, "off": False},
        "defaultVariant": "on" if on else "off"}}}))


def route(launch: Launch) -> dict:
    """``GET /dsv41_flags/status`` with the admin key (200 expected)."""
    code, text = http("GET", launch.url + "/dsv41_flags/status", headers=ADMIN, timeout=60)
    assert code == 200, (launch.name, code, text[:2000])
    return json.loads(text)


def rank_values(data: dict, feature: str) -> list:
    return [{f["name"]: f for f in r["features"]}[feature]["value"] for r in data["ranks"]]


def fleet_row(data: dict, feature: str) -> dict:
    return {row["feature"]: row for row in data["fleet"]["features"]}[feature]


def wait_route(launch: Launch, predicate, what: str, timeout: float = WAIT_S) -> dict:
    """The status route's answer once ``predicate(answer)`` holds, polled every
    STATUS_POLL_S; fails after ``timeout`` seconds with the fleet record and the log's tail."""
    deadline = time.monotonic() + timeout
    while True:
        data = route(launch)
        if predicate(data):
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"{launch.name}: {what} not within {timeout:g} s\nfleet: "
                                 f"{json.dumps(data.get('fleet'))}\n{launch.tail(30)}")
        time.sleep(STATUS_POLL_S)


def wait_ranks(launch: Launch, feature: str, value: bool, timeout: float = WAIT_S) -> dict:
    return wait_route(launch, lambda d: d["ranks"] and set(rank_values(d, feature)) == {value},
                      f"{feature}={value} on every rank", timeout)


def completion_tokens(launch: Launch) -> int:
    code, text = http("POST", launch.url + "/generate", GENERATE_BODY, timeout=120)
    assert code == 200, text
    return json.loads(text)["meta_info"]["completion_tokens"]


def fresh_flag(service, name: str) -> None:
    """Flag ``name`` made anew in the session's Unleash (an older one archived and deleted)."""
    try:
        service.create_flag(name, type="kill-switch")
    except AdminApiError as exc:
        if exc.status != 409:
            raise
        try:
            service.archive_flag(name)
        except AdminApiError as again:
            if again.status != 404:
                raise
        service.delete_archived_flag(name)
        service.create_flag(name, type="kill-switch")


_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict, float]]:
    """``(labels, value)`` of every sample called ``name`` in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group("name") == name:
            out.append((dict(_LABEL.findall(m.group("labels") or "")), float(m.group("value"))))
    return out


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the launches
@dataclass
class Fleet:
    service: object
    token: str
    canary: Launch
    stable: Launch

    def change(self, flag: str, value: bool) -> float:
        """Switch ``flag`` in Unleash and wait until every canary rank has ``FENCE`` =
        ``value`` (``flag`` is FENCE_FLAG); returns the seconds it took."""
        started = time.monotonic()
        self.service.set_enabled(flag, ENVIRONMENT, value)
        wait_ranks(self.canary, FENCE, value)
        return time.monotonic() - started


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fleet")


@pytest.fixture(scope="module")
def flagd_started(kit, work):
    """The flagd launch, started (not yet waited for: it boots beside the Unleash launches)."""
    flags = work / "flags.json"
    write_fence_flag(flags, False)
    settings = operator_settings(work, "flagd", (
        f'[default.fleet]\nprovider = "flagd"\npath = "{flags}"\npoll_interval_s = 0.5\n'
        f"min_switch_interval_s = 0.2\n"))
    launch = Launch.server(kit, "flagd", work, tp=1, bind="0", extra_args=SERVER_ARGS,
                           env_extra={"DSV41_SETTINGS": str(settings)}, pythonpath=(SRC,))
    try:
        yield launch.start(), flags
    finally:
        launch.stop()


@pytest.fixture(scope="module")
def flagd_server(flagd_started):
    launch, flags = flagd_started
    return launch.wait_healthy(), flags


@pytest.fixture(scope="module")
def fleet(kit, work, flagd_started, unleash_service):
    """The canary (tp 2) and stable (tp 1) launches on the session's Unleash, booted with
    ``dsv41.folded_fence`` on for everyone and no ``dsv41.fleet_cap`` flag."""
    service = unleash_service
    service.ensure_context_field("cluster")
    fresh_flag(service, FENCE_FLAG)
    service.set_enabled(FENCE_FLAG, ENVIRONMENT, True)   # the default strategy: on for everyone
    try:        # the rollout test makes this flag: none at boot
        service.archive_flag(CAP_FLAG)
        service.delete_archived_flag(CAP_FLAG)
    except AdminApiError as exc:
        if exc.status != 404:
            raise
    token = service.client_token(ENVIRONMENT)
    launches = []
    for name, tp, bind in (("canary", 2, "0|1"), ("stable", 1, "1")):
        settings = operator_settings(work, name, unleash_table(service.url, name))
        launches.append(Launch.server(kit, name, work, tp=tp, bind=bind, extra_args=SERVER_ARGS,
                                      env_extra={"DSV41_SETTINGS": str(settings),
                                                 "DSV41_FLEET_TOKEN": token},
                                      pythonpath=(SRC,)))
    try:
        for launch in launches:
            launch.start()
        for launch in launches:
            launch.wait_healthy()
        yield Fleet(service, token, *launches)
    finally:
        # the flagd launch too: three process groups ended side by side (its own fixture's
        # stop then finds nothing left)
        try:
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(Launch.stop, [*launches, flagd_started[0]]))
        finally:
            if not service.running:   # an outage test that failed half-way: later tests need it
                service.start_unleash()


def cli_env(kit) -> dict:
    return kit.env(extra={"DSV41_API_KEY": ADMIN_KEY}, pythonpath=[SRC])


# ------------------------------------------------------------------ Unleash
@pytest.mark.services
class TestUnleash:
    """The canary and stable launches, driven by the session's Unleash (tests in order)."""

    def test_a_boot_with_the_flag_on_arms_it_with_fleet_provenance_in_every_process(self, fleet):
        source = f"fleet (unleash, flag {FENCE_FLAG}, environment {ENVIRONMENT})"
        for launch, roles in ((fleet.canary, {"launcher": 1, "scheduler": 2, "detokenizer": 1}),
                              (fleet.stable, {"launcher": 1, "scheduler": 1, "detokenizer": 1})):
            resolved = launch.events("flags.resolved")
            assert Counter(e["role"] for e in resolved) == Counter(roles), launch.tail()
            assert len({e["pid"] for e in resolved}) == len(resolved)
            for e in resolved:
                fence = e["features"][FENCE]
                assert (fence["value"], fence["source"]) == (True, source), (e["role"], fence)
                assert FENCE in e["armed"], e
                assert not e["features"][CAP]["source"].startswith("fleet"), e  # no such flag
                assert e["from_snapshot"] is (e["role"] != "launcher"), e
            assert len({e["fingerprint"] for e in resolved}) == 1
            assert not launch.events("flags.error"), launch.events("flags.error")
            # the watcher's first read: reachable, agrees, nothing switched (the boot had it)
            data = wait_route(launch, lambda d: d["fleet"]["last_read"] != "", "a first read")
            assert data["fleet"]["reachable"] is True and data["fleet"]["switches"] == 0, data["fleet"]
            assert data["fleet"]["instance_id"].endswith(f":{launch.port}"), data["fleet"]
            row = fleet_row(data, FENCE)
            assert (row["fleet_value"], row["applied"], row["agrees"]) == (True, True, True), row
            assert fleet_row(data, CAP)["fleet_value"] is None
            assert rank_values(data, FENCE) == [True] * roles["scheduler"]
            for r in data["ranks"]:
                assert {f["name"]: f for f in r["features"]}[FENCE]["source"] == source
            assert launch.events("fleet.connected"), launch.tail()

    def test_a_flag_change_switches_both_ranks_at_one_step_under_load(self, fleet):
        canary = fleet.canary
        before = route(canary)
        (g0,) = {r["generation"] for r in before["ranks"]}
        load = Load(canary.url, threads=3, per_thread=60, deadline_s=150).start()
        try:
            assert load.wait_done(3) >= 3, f"no request answered under load\n{canary.tail()}"
            for value in (False, True):
                fleet.change(FENCE_FLAG, value)
                answered = load.done()
                assert load.wait_done(answered + 3) >= answered + 3, "no request answered since"
        finally:
            load.stop()
        assert not load.running(), "a client is still waiting for an answer"
        statuses = Counter(status for status, _ in load.results)
        assert statuses == Counter({200: len(load.results)}), statuses

        after = route(canary)
        by = f"unleash:{FENCE_FLAG}@{ENVIRONMENT}"
        switches = sorted((t["generation"], r["tp_rank"], t["new"], t["step"], t["requested_by"])
                          for r in after["ranks"] for t in r["switches"] if t["generation"] > g0)
        assert [s[:3] for s in switches] == [(g0 + 1, 0, False), (g0 + 1, 1, False),
                                             (g0 + 2, 0, True), (g0 + 2, 1, True)], switches
        assert {s[4] for s in switches} == {by}, switches
        # lockstep: both ranks at the same forward step for each generation
        (off_step,) = {s[3] for s in switches if s[0] == g0 + 1}
        (on_step,) = {s[3] for s in switches if s[0] == g0 + 2}
        assert on_step > off_step, "no forward step between the two switches under load"
        # every other process of the launch followed, at the ranks' generation
        others = [after["server"], *after["processes"]]
        assert sorted(p["role"] for p in others) == ["detokenizer", "launcher"], others
        for p in others:
            assert p["generation"] == g0 + 2, p
            assert {f["name"]: f for f in p["features"]}[FENCE]["value"] is True, p
        switched = canary.wait_events("fleet.switched", 2, feature=FENCE, requested_by=by)
        assert [e["value"] for e in switched] == [False, True], switched
        assert after["fleet"]["switches"] == 2 and fleet_row(after, FENCE)["agrees"] is True

    def test_a_rollout_constrained_to_a_label_switches_only_that_server(self, kit, fleet):
        service, canary, stable = fleet.service, fleet.canary, fleet.stable
        stable_before = route(stable)
        assert completion_tokens(canary) == 8 and completion_tokens(stable) == 8
        service.create_flag(CAP_FLAG)
        service.add_flexible_rollout(CAP_FLAG, ENVIRONMENT, rollout=100, stickiness="default",
                                     constraints=[constraint("cluster", "IN", ["canary"])])
        service.set_enabled(CAP_FLAG, ENVIRONMENT, True)
        data = wait_ranks(canary, CAP, True)
        assert completion_tokens(canary) == 3           # the HTTP process applied it
        row = fleet_row(data, CAP)
        assert (row["fleet_value"], row["applied"], row["agrees"]) == (True, True, True), row
        assert data["server"]["features"] and \
            {f["name"]: f for f in data["server"]["features"]}[CAP]["value"] is True
        # the stable server reads the same flag: off for its label, so nothing switches
        data = wait_route(stable, lambda d: fleet_row(d, CAP)["fleet_value"] is False,
                          f"{CAP_FLAG} read as off on the stable server")
        row = fleet_row(data, CAP)
        assert (row["applied"], row["agrees"]) == (False, True), row
        assert data["fleet"]["switches"] == stable_before["fleet"]["switches"], data["fleet"]
        assert [r["generation"] for r in data["ranks"]] == \
            [r["generation"] for r in stable_before["ranks"]]
        assert rank_values(data, CAP) == [False]
        assert completion_tokens(stable) == 8
        assert not [e for e in stable.events("fleet.switched") if e["feature"] == CAP]
        # a manual switch outside the flag service stands, and the status says it is one
        code, answer = kit.cli_json("set", f"{CAP}=on", "--url", stable.url, "--api-key", ADMIN_KEY)
        assert code == 0 and answer["ok"] is True, answer
        row = fleet_row(route(stable), CAP)
        assert (row["fleet_value"], row["applied"], row["agrees"]) == (False, True, False), row
        assert row["reason"].startswith("overridden: switched outside the flag service"), row
        code, answer = kit.cli_json("set", f"{CAP}=off", "--url", stable.url, "--api-key", ADMIN_KEY)
        assert code == 0 and fleet_row(route(stable), CAP)["agrees"] is True
        assert completion_tokens(stable) == 8

    def test_metrics_and_fleet_status_show_both_servers(self, kit, fleet):
        code, text = http("GET", fleet.canary.url + "/metrics")
        assert code == 200
        for name in ("dsv41_flags_fleet_value", "dsv41_flags_fleet_applied"):
            got = {labels["feature"]: value for labels, value in samples(text, name)}
            assert got.get(FENCE) == 1.0 and got.get(CAP) == 1.0, (name, got)
        assert [v for _, v in samples(text, "dsv41_flags_fleet_reachable")] == [1.0]
        code, text = http("GET", fleet.stable.url + "/metrics")
        got = {labels["feature"]: value for labels, value in samples(text, "dsv41_flags_fleet_value")}
        assert got.get(FENCE) == 1.0 and got.get(CAP) == 0.0, got

        urls = [fleet.canary.url, fleet.stable.url]
        code, data = kit.cli_json("fleet", "status", *urls, env=cli_env(kit))
        assert code == 0 and data["ok"] is True, data
        assert [s["url"] for s in data["servers"]] == urls
        for server, cap in zip(data["servers"], (True, False)):
            assert server["error"] == "" and server["fleet"]["reachable"] is True, server
            rows = {row["feature"]: row for row in server["fleet"]["features"]}
            assert (rows[FENCE]["fleet_value"], rows[FENCE]["applied"]) == (True, True), rows
            assert (rows[CAP]["fleet_value"], rows[CAP]["applied"]) == (cap, cap), rows
        # a server that cannot be asked: exit 1, the others still read
        dead = f"http://127.0.0.1:{unused_port()}"
        code, data = kit.cli_json("fleet", "status", *urls, dead, env=cli_env(kit), timeout=60)
        assert code == 1 and data["ok"] is False, data
        assert [bool(s["error"]) for s in data["servers"]] == [False, False, True], data
        # not an http:// URL: a usage error, nothing asked
        proc = kit.run_cli("fleet", "status", "127.0.0.1:1", env=cli_env(kit))
        assert proc.returncode == 2, (proc.stdout, proc.stderr)

    def test_an_outage_is_served_through_said_and_recovered(self, fleet):
        service, canary = fleet.service, fleet.canary
        generation = {r["generation"] for r in route(canary)["ranks"]}
        try:
            service.stop_unleash()
            data = wait_route(canary, lambda d: d["fleet"]["reachable"] is False,
                              "the outage seen")
            assert data["fleet"]["unreachable_since"], data["fleet"]
            assert "unreachable since" in fleet_row(data, FENCE)["reason"], data["fleet"]
            for _ in range(3):
                assert completion_tokens(canary) == 3       # serving, fleet_cap still applied
            data = route(canary)
            assert {r["generation"] for r in data["ranks"]} == generation  # nothing switched
            assert rank_values(data, FENCE) == [True, True]
            service.start_unleash()
            data = wait_route(canary, lambda d: d["fleet"]["reachable"] is True,
                              "the service reachable again", timeout=90)
            assert data["fleet"]["unreachable_since"] == "", data["fleet"]
        finally:
            if not service.running:
                service.start_unleash()
        assert canary.events("fleet.unreachable") and canary.events("fleet.reachable")
        fleet.change(FENCE_FLAG, False)        # the next change is applied

    def test_the_token_is_never_written_nor_answered(self, kit, fleet):
        secret = fleet.token.split(".", 1)[1]
        assert len(secret) >= 32
        for launch in (fleet.canary, fleet.stable):
            assert secret not in launch.text(), f"{launch.name} printed the fleet token"
            proc = kit.run_cli("status", "--url", launch.url, "--json", env=cli_env(kit))
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout)["fleet"]["provider"] == "unleash"
            assert secret not in proc.stdout + proc.stderr
            # the snapshot every child received (DSV41_SNAPSHOT: JSON, or a spill file)
            ranks = route(launch)["ranks"]
            snapshot = snapshot_of(ranks[0]["pid"])
            assert '"FLEET"' in snapshot and secret not in snapshot
        proc = kit.run_cli("fleet", "status", fleet.canary.url, fleet.stable.url, "--json",
                           env=cli_env(kit))
        assert secret not in proc.stdout + proc.stderr


def snapshot_of(pid: int) -> str:
    """The text of process ``pid``'s ``DSV41_SNAPSHOT`` (a spill file's content when it names
    one)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (raw,) = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"DSV41_SNAPSHOT=")]
    if raw.startswith("file:"):
        return Path(raw[len("file:"):].split("#sha256=")[0]).read_text()
    return raw


# ------------------------------------------------------------------ flagd
def test_a_flagd_file_edited_switches_the_server_a_malformed_one_is_refused(flagd_server):
    launch, flags = flagd_server
    (e,) = [e for e in launch.events("flags.resolved") if e["role"] == "launcher"]
    assert e["features"][FENCE]["value"] is False
    assert e["features"][FENCE]["source"].startswith(f"fleet (flagd, flag {FENCE_FLAG}, file "
                                                     f"{flags}@sha256:"), e["features"][FENCE]
    before = wait_route(launch, lambda d: d["fleet"]["last_read"] != "", "a first read")
    (g0,) = {r["generation"] for r in before["ranks"]}

    write_fence_flag(flags, True)
    digest = "sha256:" + hashlib.sha256(flags.read_bytes()).hexdigest()
    data = wait_ranks(launch, FENCE, True)
    (switch,) = [t for r in data["ranks"] for t in r["switches"] if t["generation"] > g0]
    assert switch["requested_by"] == f"flagd:{flags}@{digest}", switch
    assert switch["requested_by"].startswith("flagd:") and "@sha256:" in switch["requested_by"]

    refused = data["fleet"]["refused"]
    write_text(flags, '{"flags": {"dsv41.folded_fence": ')       # does not parse
    data = wait_route(launch, lambda d: d["fleet"]["refused"] > refused, "the file refused")
    assert "refused" in data["fleet"]["problem"], data["fleet"]
    assert launch.wait_events("fleet.refused", 1), launch.tail()
    time.sleep(1.5)                                             # three polls: nothing changes
    data = route(launch)
    assert {r["generation"] for r in data["ranks"]} == {g0 + 1}
    assert rank_values(data, FENCE) == [True] and data["fleet"]["refused"] == refused + 1

    write_fence_flag(flags, False)                              # a good file applies again
    data = wait_ranks(launch, FENCE, False)
    assert {r["generation"] for r in data["ranks"]} == {g0 + 2}
    assert data["fleet"]["problem"] == "" and fleet_row(data, FENCE)["agrees"] is True, data["fleet"]
