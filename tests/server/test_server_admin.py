"""Who may call the routes, what they accept, what they never reveal. One launch serves them all:
tp 1, booted with both ``--api-key`` and ``--admin-api-key``, ``folded_fence`` armed at boot (its
target is never imported here: pending) and a probe feature (shipped by a distribution on
``PYTHONPATH``, entry-point group ``dsv41_flags.features``) whose target every scheduler imports
(installed).

- the routes ``/dsv41_flags/set`` and ``/dsv41_flags/status`` admit exactly who sglang's
  ADMIN_OPTIONAL routes admit (``/flush_cache`` is one): with an admin key set, only
  ``Authorization: Bearer <admin key>``; the command sends the key (``--api-key`` or
  ``DSV41_API_KEY``) and says clearly when it is missing;
- neither key appears in what the framework writes (event lines, files) or answers (status, the
  launch's sidecar); sglang's own ``server_args=`` log line prints both keys: upstream, left out
  of the check;
- a scheduler that serves says so once (``flags.serving``), listing its installed and its
  pending armed features.
"""
from __future__ import annotations

import json
import textwrap

import pytest

from ._server import Launch, http

pytestmark = pytest.mark.server

API_KEY = "SECRETAPI"
ADMIN_KEY = "SECRETADMIN"
BEARER = {
    "no key": {},
    "a wrong key": {"Authorization": "Bearer not-the-key"},
    "the api key": {"Authorization": f"Bearer {API_KEY}"},
    "the admin key": {"Authorization": f"Bearer {ADMIN_KEY}"},
}
ADMIN = BEARER["the admin key"]

PROBE_MODULE = "server_tier_probe"
PROBE = '''
"""A feature shipped by an installed distribution, whose target every scheduler imports: it
installs and patches nothing."""
from dsv41_flags import Feature


def install(module, ctx):
    pass


FEATURE = Feature(
    name="server_probe",
    target="sglang.srt.managers.scheduler",
    install=install,
    summary="Installs where the scheduler module is imported; patches nothing",
    requires=("Scheduler.handle_rpc_request",),
)
'''


@pytest.fixture(scope="module")
def admin(kit, tmp_path_factory):
    work = tmp_path_factory.mktemp("admin")
    dist = work / "probe"
    info = dist / f"{PROBE_MODULE}-0.1.dist-info"
    info.mkdir(parents=True)
    (dist / f"{PROBE_MODULE}.py").write_text(textwrap.dedent(PROBE))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: server-tier-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[dsv41_flags.features]\nserver_probe = {PROBE_MODULE}:FEATURE\n")
    launch = Launch.server(kit, "admin", work, tp=1,
                           extra_args=("--api-key", API_KEY, "--admin-api-key", ADMIN_KEY),
                           env_extra={"DSV41_FOLDED_FENCE": "1", "DSV41_SERVER_PROBE": "1"},
                           pythonpath=(dist,))
    launch.start()
    try:
        yield launch.wait_healthy()
    finally:
        launch.stop()


def test_the_routes_admit_exactly_who_flush_cache_admits(admin):
    seen = {}
    for who, headers in BEARER.items():
        flush, _ = http("POST", admin.url + "/flush_cache", headers=headers)
        set_, _ = http("POST", admin.url + "/dsv41_flags/set", headers=headers, timeout=90,
                       body={"name": "folded_fence", "value": "on", "requested_by": "server-tier"})
        status, _ = http("GET", admin.url + "/dsv41_flags/status", headers=headers, timeout=90)
        seen[who] = (flush, set_, status)
    assert seen == {"no key": (401, 401, 401), "a wrong key": (401, 401, 401),
                    "the api key": (401, 401, 401), "the admin key": (200, 200, 200)}


def test_the_command_sends_the_admin_key(kit, admin):
    code, answer = kit.cli_json("set", "folded_fence=on", "--url", admin.url, "--api-key", ADMIN_KEY)
    assert code == 0 and answer["ok"] is True, answer
    env = kit.env(extra={"DSV41_API_KEY": ADMIN_KEY})
    code, status = kit.cli_json("status", "--url", admin.url, env=env)
    assert code == 0 and status["ok"] is True and len(status["ranks"]) == 1, status
    proc = kit.run_cli("set", "folded_fence=on", "--url", admin.url, env=env)
    assert proc.returncode == 0, proc.stderr


def test_the_command_without_the_key_exits_1_and_says_how_to_give_it(kit, admin):
    for args in (("set", "folded_fence=on", "--url", admin.url), ("status", "--url", admin.url)):
        proc = kit.run_cli(*args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert "401" in proc.stderr, proc.stderr
        assert "--api-key" in proc.stderr and "DSV41_API_KEY" in proc.stderr, proc.stderr
        code, answer = kit.cli_json(*args)
        assert code == 1 and answer["ok"] is False, answer
        assert "401" in answer["error"] and "--api-key" in answer["error"], answer


def _secret_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if API_KEY in line or ADMIN_KEY in line]


def test_no_key_appears_in_what_the_launch_wrote(kit, admin):
    # the log files: no event line of ours; sglang's own server_args= line is upstream's
    for path in [admin.stdout_path, admin.stderr_path]:
        leaked = [line for line in _secret_lines(path.read_text(errors="replace"))
                  if "server_args=" not in line]
        assert leaked == [], f"{path.name}: {[line[:300] for line in leaked]}"
    # every other file the launch wrote (home, caches, its working directory)
    for root in (kit.home, admin.workdir):
        for path in root.rglob("*"):
            if path.is_file() and path not in (admin.stdout_path, admin.stderr_path):
                data = path.read_bytes()
                assert API_KEY.encode() not in data and ADMIN_KEY.encode() not in data, path


def test_no_key_appears_in_the_status_answer_or_the_launch_sidecar(kit, admin, tmp_path):
    # the status answer (read with the key, which is the caller's own)
    env = kit.env(extra={"DSV41_API_KEY": ADMIN_KEY})
    code, status = kit.cli_json("status", "--url", admin.url, env=env)
    assert code == 0, status
    assert _secret_lines(json.dumps(status)) == []
    # the launch's sidecar (what autotune_keep writes beside a cache) for this exact command
    sidecar = tmp_path / "launch.sidecar"
    command = admin.command[admin.command.index("python"):]
    proc = kit.run_cli("fingerprint", "--write", str(sidecar), "--", *command, env=admin.env)
    assert proc.returncode == 0, proc.stderr
    assert _secret_lines(sidecar.read_text()) == []
    assert _secret_lines(proc.stdout + proc.stderr) == []


def test_a_serving_scheduler_lists_its_installed_and_pending_features_once(admin):
    serving = admin.wait_events("flags.serving", 1, timeout=10)
    (scheduler,) = [e for e in admin.events("flags.resolved") if e["role"] == "scheduler"]
    assert [e["pid"] for e in serving] == [scheduler["pid"]]
    (event,) = serving
    assert (event["role"], event["tp_rank"], event["pp_rank"]) == ("scheduler", 0, 0)
    assert event["installed"] == ["server_probe"]
    assert event["pending"] == ["folded_fence"]
    # it comes once the scheduler serves: after its rank guard and the probe's install
    order = [e["event"] for e in admin.events() if e["pid"] == scheduler["pid"]]
    assert order.index("flags.serving") > order.index("feature.installed")
    assert order.index("flags.serving") > order.index("ranks.agree")
