"""Fleet flags: the ``fleet`` table typed with provenance and its problems, the boot read of a
flag service into the resolution (targeting, precedence, the snapshot, no token anywhere), and
the watcher thread of a server (one switch per change, refusals, restart needed, coalescing, an
unreachable service, stop, fork).

Every flag service here is the real flagd provider (``openfeature-provider-flagd`` in FILE mode)
reading real flag files in ``tmp_path``; the watcher's ``switch`` is a recorder standing for the
server's live route, which the server tier exercises."""
import hashlib
import json
import math
import os
import socket
import threading
import time
import types
from datetime import datetime

import pytest
from structlog.testing import CapturingLogger, capture_logs


from dsv41_flags import SettingsError
from dsv41_flags import fleet
from dsv41_flags.assembly import build
from dsv41_flags.discovery import discover
from dsv41_flags.errors import SnapshotError
from dsv41_flags.fleet_settings import FleetSettings
from dsv41_flags.snapshot import read as read_snapshot
from tests.files import write_text

from ..conftest import FEATURES_DIR
from ._child import REPO, clean_env, run_code

BASE = "[default]\nstrict = true\nfolded_fence = false\nautotune_keep = false\n"
#: the flagd file beside the settings file (a relative path is taken from the settings file's
#: directory); a short poll so that the provider's own thread ends soon after each boot
FLEET = ('[default.fleet]\nprovider = "flagd"\npath = "flags.json"\npoll_interval_s = 0.2\n'
         'boot_timeout_s = 5\n')
#: sglang server options of the launch: the evaluation context's facts
ARGV = ["--model-path", "/models/tiny", "--port", "31000", "--tp-size", "2"]
TOKEN = "tok-7f3a-do-not-show"
FEATURES = {f.name: f for f in discover(FEATURES_DIR) if f.name in ("folded_fence", "autotune_keep")}


# ------------------------------------------------------------------ flag files
def flag(on: bool, targeting=None, variants=None) -> dict:
    """A flagd flag definition: variants ``on``/``off`` (booleans unless ``variants``)."""
    out = {"state": "ENABLED", "variants": variants or {"on": True, "off": False},
           "defaultVariant": "on" if on else "off"}
    if targeting is not None:
        out["targeting"] = targeting
    return out


def write_flags(path, flags: dict) -> None:
    write_text(path, json.dumps({"flags": flags}))


def sha256(path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def wait_for(predicate, what: str, timeout: float = 5.0):
    """``predicate()``'s first true value, polled every 20 ms; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"not within {timeout} s: {what}")


def message(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value)


# ------------------------------------------------------------------ 1. settings
def test_the_fleet_table_is_typed_with_each_fields_source(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {})
    rt = make_runtime(BASE + FLEET + 'min_switch_interval_s = 2\nlabels = { cluster = "canary" }\n')
    table = rt.resolution.reserved["FLEET"]
    settings = FleetSettings.model_validate(table["settings"])
    assert settings.provider == "flagd" and settings.path == str(tmp_path / "flags.json")
    assert settings.poll_interval_s == 0.2 and settings.min_switch_interval_s == 2.0
    assert type(settings.min_switch_interval_s) is float and settings.labels == {"cluster": "canary"}
    assert settings.required is False and settings.prefix == "dsv41."  # declared defaults
    origin = f"{tmp_path / 'settings.toml'} [default.fleet]"
    assert table["sources"] == {field: origin for field in (
        "provider", "path", "poll_interval_s", "boot_timeout_s", "min_switch_interval_s", "labels")}


def test_fleet_variables_override_the_file_with_their_own_source(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {})
    rt = make_runtime(BASE + FLEET, env={"DSV41_FLEET_POLL_INTERVAL_S": "0.3",
                                         "DSV41_FLEET_LABELS": "cluster=canary, region = eu",
                                         "DSV41_FLEET_REQUIRED": "yes",
                                         "DSV41_FLEET_INSTANCE_ID": "gpu-node-7"})
    table = rt.resolution.reserved["FLEET"]
    settings = FleetSettings.model_validate(table["settings"])
    assert (settings.poll_interval_s, settings.required, settings.instance_id) == (0.3, True, "gpu-node-7")
    assert settings.labels == {"cluster": "canary", "region": "eu"}
    assert table["sources"]["poll_interval_s"] == "env DSV41_FLEET_POLL_INTERVAL_S"
    assert table["sources"]["labels"] == "env DSV41_FLEET_LABELS"
    assert table["sources"]["required"] == "env DSV41_FLEET_REQUIRED"
    assert table["sources"]["provider"] == f"{tmp_path / 'settings.toml'} [default.fleet]"
    assert table["context"]["targeting_key"] == "gpu-node-7"


def test_variables_alone_make_a_fleet_table(make_runtime, tmp_path):
    path = tmp_path / "elsewhere.json"
    write_flags(path, {})
    rt = make_runtime(BASE, env={"DSV41_FLEET_PROVIDER": "FLAGD", "DSV41_FLEET_PATH": str(path)})
    table = rt.resolution.reserved["FLEET"]
    assert table["settings"]["provider"] == "flagd" and table["settings"]["path"] == str(path)
    assert table["sources"] == {"provider": "env DSV41_FLEET_PROVIDER", "path": "env DSV41_FLEET_PATH"}


def test_a_profiles_fleet_table_overrides_defaults_field_by_field(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {})
    text = BASE + FLEET + 'labels = { cluster = "prod" }\n' + (
        '[tp3]\nfolded_fence = false\n[tp3.fleet]\nmin_switch_interval_s = 3\n'
        'labels = { cluster = "canary" }\n')
    default = make_runtime(text).resolution.reserved["FLEET"]
    tp3 = make_runtime(text, profile="tp3").resolution.reserved["FLEET"]
    settings_file = tmp_path / "settings.toml"
    assert default["settings"]["min_switch_interval_s"] == 1.0
    assert "min_switch_interval_s" not in default["sources"]
    assert tp3["settings"]["min_switch_interval_s"] == 3.0
    assert tp3["sources"]["min_switch_interval_s"] == f"{settings_file} [tp3.fleet]"
    assert tp3["settings"]["labels"] == {"cluster": "canary"}
    assert tp3["sources"]["labels"] == f"{settings_file} [tp3.fleet]"
    # the fields tp3 does not set keep [default]'s value and source
    assert tp3["settings"]["path"] == str(tmp_path / "flags.json")
    assert tp3["sources"]["provider"] == tp3["sources"]["path"] == f"{settings_file} [default.fleet]"


ORIGIN = "{file} [default.fleet]"
#: a fleet table with only what it needs
FLAGD = '[default.fleet]\nprovider = "flagd"\npath = "flags.json"\n'


@pytest.mark.parametrize("table,env,expected", [
    pytest.param(FLAGD + "poll_intervl_s = 1\n", {}, [
        "fleet.poll_intervl_s is not a fleet setting", ORIGIN, "accepted: provider, prefix, url",
        "did you mean poll_interval_s?"], id="unknown-field"),
    pytest.param(FLAGD + 'poll_interval_s = "fast"\n', {}, [
        "fleet.poll_interval_s = 'fast'", f"({ORIGIN})",
        "is not accepted; accepted: a number of seconds from 0.1 to 3600"], id="wrong-type"),
    pytest.param(FLAGD + "poll_interval_s = 0.01\n", {}, [
        "fleet.poll_interval_s = 0.01", f"({ORIGIN})",
        "accepted: a number of seconds from 0.1 to 3600"], id="below-range"),
    pytest.param(FLAGD + "boot_timeout_s = 500\n", {}, [
        "fleet.boot_timeout_s = 500", f"({ORIGIN})",
        "accepted: a number of seconds from 0 to 120"], id="above-range"),
    pytest.param('[default.fleet]\nprovider = "launchdarkly"\n', {}, [
        "fleet.provider = 'launchdarkly'", f"({ORIGIN})", "accepted: unleash or flagd"],
        id="unknown-provider"),
    pytest.param('[default.fleet]\nprovider = "unleash"\n', {}, [
        "fleet.provider = 'unleash'", f"({ORIGIN})", "needs fleet.url",
        "http://HOST:4242/api", "it is not set"], id="unleash-without-url"),
    pytest.param('[default.fleet]\nprovider = "flagd"\n', {}, [
        "fleet.provider = 'flagd'", f"({ORIGIN})", "needs fleet.path",
        "flagd flag definition file"], id="flagd-without-path"),
    pytest.param(FLAGD + 'labels = { cluster = 3 }\n', {}, [
        "fleet.labels.cluster = 3", f"({ORIGIN})",
        "accepted: a table of at most 64 text values"], id="label-not-text"),
    pytest.param('fleet = "flagd"\n', {}, [
        "fleet = 'flagd' must be a table", "{file} [default]"], id="not-a-table"),
    pytest.param("", {"DSV41_FLEET_LABELS": "cluster"}, [
        "DSV41_FLEET_LABELS='cluster' (environment variable) is not a valid fleet.labels",
        "accepted: name=value pairs joined by commas"], id="labels-variable-no-equals"),
    pytest.param("", {"DSV41_FLEET_LABELS": "=canary"}, [
        "DSV41_FLEET_LABELS='=canary' (environment variable)",
        "accepted: name=value pairs joined by commas"], id="labels-variable-no-name"),
    pytest.param(FLEET, {"DSV41_FLEET_POLL_INTERVAL_S": "fast"}, [
        "DSV41_FLEET_POLL_INTERVAL_S='fast' (environment variable) is not a valid "
        "fleet.poll_interval_s", "accepted: a number of seconds from 0.1 to 3600"],
        id="variable-wrong-type"),
    pytest.param(FLEET, {"DSV41_FLEET_POLL_INTERVAL_S": "0"}, [
        "fleet.poll_interval_s = 0.0 (env DSV41_FLEET_POLL_INTERVAL_S)",
        "accepted: a number of seconds from 0.1 to 3600"],
        id="variable-out-of-range"),
    pytest.param('[default.fleet]\nprovider = "unleash"\nurl = "ftp://flags:4242/api"\n', {}, [
        "fleet.url = 'ftp://flags:4242/api'", f"({ORIGIN})",
        "is not accepted: it is not an http:// or https:// URL with a host",
        "accepted: the Unleash client API URL"], id="url-not-http"),
    pytest.param('[default.fleet]\nprovider = "unleash"\nurl = "http://flags:port/api"\n', {}, [
        "fleet.url = 'http://flags:port/api'", "it is not a URL"], id="url-bad-port"),
    pytest.param('[default.fleet]\nprovider = "unleash"\nurl = "http://flags:4242/"\n', {}, [
        "its path does not end in /api"], id="url-not-api"),
    pytest.param('[default.fleet]\nprovider = "unleash"\nurl = "http:///api"\n', {}, [
        "it is not an http:// or https:// URL with a host"], id="url-no-host"),
    pytest.param('[default.fleet]\nprovider = "flagd"\n', {"DSV41_FLEET_PATH": ""}, [
        "it is empty (env DSV41_FLEET_PATH)"], id="empty-path-variable"),
    pytest.param('[fleet]\nprovider = "flagd"\n', {}, ["[default.fleet]"], id="top-level-table"),
    pytest.param(FLEET, {"DSV41_FLEET_PROVIDER": "launchdarkly"}, [
        "DSV41_FLEET_PROVIDER='launchdarkly' (environment variable)", "unleash", "flagd"],
        id="variable-unknown-provider"),
])
def test_a_bad_fleet_setting_is_a_settings_error_naming_it(make_runtime, tmp_path, table, env,
                                                           expected):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + table, env=env)
    text = message(exc)
    for part in expected:
        assert part.format(file=tmp_path / "settings.toml") in text, text
    assert len(exc.value.problems) == 1, text


def test_a_token_in_a_settings_file_is_refused_without_showing_it(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {})
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + FLEET + f'token = "{TOKEN}"\n')
    text = message(exc)
    assert f"{tmp_path / 'settings.toml'} [default.fleet]: fleet.token (***, a secret) is refused" in text
    assert "accepted: the variable DSV41_FLEET_TOKEN or fleet.token_file" in text
    assert TOKEN not in text and TOKEN not in repr(exc.value.problems)


SECRET = "s3cr3t-in-url"


@pytest.mark.parametrize("url,env", [
    pytest.param(f"http://flags:4242/api?token={SECRET}", False, id="query-token-file"),
    pytest.param(f"http://ops:{SECRET}@flags:4242/api", False, id="userinfo-file"),
    pytest.param(f"http://flags:4242/api#{SECRET}", False, id="fragment-file"),
    pytest.param(f"http://flags:4242/api?token={SECRET}", True, id="query-token-variable"),
    pytest.param(f"http://ops:{SECRET}@flags:4242/api", True, id="userinfo-variable"),
])
def test_a_url_with_a_secret_in_it_is_refused_without_showing_it(make_runtime, url, env):
    table = '[default.fleet]\nprovider = "unleash"\n'
    variables = {}
    if env:
        variables["DSV41_FLEET_URL"] = url
    else:
        table += f'url = "{url}"\n'
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + table, env=variables)
    text = message(exc)
    assert "fleet.url = " in text and "is not accepted" in text, text
    assert SECRET not in text and SECRET not in repr(exc.value.problems), text


def test_masked_url_hides_a_token_query_and_a_signature():
    from dsv41_flags.secrecy import masked_url
    assert masked_url(f"http://h:1/api?token={SECRET}&x=1") == "http://h:1/api?token=***&x=1"
    assert SECRET not in masked_url(f"https://h/api?X-Amz-Signature={SECRET}")
    assert masked_url("http://h:1/api?model=tiny") == "http://h:1/api?model=tiny"


def _fifo(path):
    os.mkfifo(path)
    return path


def test_a_fifo_token_file_is_refused_at_once_and_the_launch_goes_on(make_runtime, tmp_path,
                                                                     unleash):
    """Nothing writes the FIFO: a blocking open would hang the launch; it is refused instead."""
    unleash.body = _features(True)
    _fifo(tmp_path / "token")
    started = time.monotonic()
    rt = make_runtime(BASE.replace("strict = true", "strict = false")
                      + f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
                      + 'boot_timeout_s = 3\ntoken_file = "token"\n', argv=ARGV)
    assert time.monotonic() - started < 30
    text = " ".join(p.message for p in rt.resolution.problems)
    assert "fleet.token_file" in text and "not a regular file" in text, text


def test_a_fifo_flag_file_is_said_at_once_without_opening_a_provider(make_runtime, tmp_path):
    _fifo(tmp_path / "flags.json")
    before = set(threading.enumerate())
    started = time.monotonic()
    rt = make_runtime(BASE + FLEET, argv=ARGV)
    assert time.monotonic() - started < 30
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert problem.severity == "warning" and "not a regular file" in problem.message, problem
    assert rt.resolution.values["FOLDED_FENCE"].value is False
    assert not [t for t in set(threading.enumerate()) - before if "flagd" in t.name.lower()]


def test_the_fingerprint_is_the_same_with_fleet_variables_as_with_the_table(make_runtime, tmp_path):
    """The fleet drives live values, not the program: its table and its DSV41_FLEET_*
    variables follow one rule, neither moves the launch fingerprint."""
    write_flags(tmp_path / "flags.json", {})
    plain = make_runtime(BASE).fingerprint
    table = make_runtime(BASE + FLEET).fingerprint
    variables = make_runtime(BASE, env={"DSV41_FLEET_PROVIDER": "flagd",
                                        "DSV41_FLEET_PATH": str(tmp_path / "flags.json")}).fingerprint
    assert plain.digest == table.digest == variables.digest


def test_status_reads_the_fleet_once_with_the_launchs_targeting_key(tmp_path):
    """``dsv41-flags status`` with a fleet table reads the flag service, as a launch would, and
    says where from and with which targeting key (the port of the launch after ``--``)."""
    (tmp_path / "settings.toml").write_text(BASE.replace("strict = true", "strict = false") + FLEET)
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(True)})
    env = clean_env(DSV41_SETTINGS=str(tmp_path / "settings.toml"))
    code = ("import sys; from dsv41_flags.cli import main; "
            "sys.argv = ['dsv41-flags', 'status', '--json', '--', '--port', '31000']; main()")
    out = run_code(code, env, tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["fleet"]["targeting_key"].endswith(":31000"), data["fleet"]
    assert str(tmp_path / "flags.json") in data["fleet"]["where"]
    row = next(r for r in data["features"] if r["name"] == "folded_fence")
    assert row["value"] is True and "fleet (flagd" in row["source"], row


def test_a_problem_of_the_default_table_is_said_once_in_a_profile(make_runtime, tmp_path):
    """A profile's layer repeats [default]'s fleet fields (Dynaconf merges the tables): those
    keep [default]'s source, and their problems are not said again for the profile."""
    write_flags(tmp_path / "flags.json", {})
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + FLAGD + f'token = "{TOKEN}"\npoll_intervl_s = 1\n'
                     + '[tp3.fleet]\nprefix = "fleet."\n', profile="tp3")
    origin = f"{tmp_path / 'settings.toml'} [default.fleet]"
    assert [p.origin for p in exc.value.problems] == [origin, origin], message(exc)
    assert "[tp3]" not in message(exc) and TOKEN not in message(exc)


def test_an_unknown_fleet_variable_is_an_unknown_key_with_a_suggestion(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {})
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + FLEET, env={"DSV41_FLEET_POLL_INTERVAL": "1"})
    assert "DSV41_FLEET_POLL_INTERVAL is not a fleet setting; accepted: DSV41_FLEET_" in message(exc)
    assert "did you mean DSV41_FLEET_POLL_INTERVAL_S?" in message(exc)


def test_without_a_fleet_table_nothing_of_the_fleet_is_loaded(tmp_path):
    """A launch with no fleet table and no DSV41_FLEET_* variable: FLEET is {}, and building its
    runtime imports no OpenFeature and starts no thread (a fresh interpreter sees it)."""
    plain = tmp_path / "plain.toml"
    plain.write_text(BASE)
    (tmp_path / "with").mkdir()
    with_fleet = tmp_path / "with" / "settings.toml"
    with_fleet.write_text(BASE + FLEET)
    write_flags(tmp_path / "with" / "flags.json", {})
    code = f"""
        import json, sys, threading
        from dsv41_flags.assembly import build

        def seen():
            return sorted(m for m in sys.modules if m.split(".")[0] in ("openfeature", "UnleashClient")
                          or m == "dsv41_flags.fleet_providers")

        rt = build([{str(plain)!r}], environ={{}}, argv=[], use_snapshot=False, configure_logging=False)
        rt.announce()
        out = {{"fleet": rt.resolution.reserved["FLEET"], "modules": seen(),
               "threads": [t.name for t in threading.enumerate()],
               "snapshot": json.loads(rt.snapshot())["resolution"]["reserved"]["FLEET"]}}
        build([{str(with_fleet)!r}], environ={{}}, argv=[], use_snapshot=False, configure_logging=False)
        out["after_a_fleet_launch"] = seen()
        print(json.dumps(out))
    """
    proc = run_code(code, clean_env(PYTHONPATH=str(REPO / "src")), tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fleet"] == {} and out["snapshot"] == {}
    assert out["modules"] == []
    assert out["threads"] == ["MainThread"]
    # the same check sees them once a launch has a fleet table
    assert {"openfeature", "dsv41_flags.fleet_providers"} <= set(out["after_a_fleet_launch"])


# ------------------------------------------------------------------ 2. boot
def test_flagd_values_become_the_resolution_with_fleet_provenance(make_runtime, tmp_path):
    path = tmp_path / "flags.json"
    write_flags(path, {"dsv41.folded_fence": flag(True)})
    rt = make_runtime(BASE + FLEET, argv=ARGV)
    ff = rt.resolution.values["FOLDED_FENCE"]
    head = f"fleet (flagd, flag dsv41.folded_fence, file {path}@sha256:"
    assert ff.value is True and ff.source.startswith(head) and ff.source.endswith(")")
    assert sha256(path).startswith(ff.source[len(head) - len("sha256:"):-1])
    assert ff.chain == (("declared default", False), (f"{tmp_path / 'settings.toml'} [default]", False),
                        (ff.source, True))
    assert [f.name for f in rt.armed()] == ["folded_fence"]
    # a flag the file does not hold leaves the settings' value and source
    ak = rt.resolution.values["AUTOTUNE_KEEP"]
    assert ak.value is False and ak.source == f"{tmp_path / 'settings.toml'} [default]"
    assert not [p for p in rt.resolution.problems if p.key == "FLEET"]


def test_a_fleet_value_wins_over_the_flags_variable(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(True)})
    rt = make_runtime(BASE + FLEET, env={"DSV41_FOLDED_FENCE": "0"}, argv=ARGV)
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is True and ff.source.startswith("fleet (flagd, flag dsv41.folded_fence")
    assert [s for s, _ in ff.chain][-2:] == ["env DSV41_FOLDED_FENCE", ff.source]
    # and a fleet "off" wins over settings that arm the feature
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(False)})
    rt = make_runtime(BASE.replace("folded_fence = false", "folded_fence = true") + FLEET,
                      env={"DSV41_FOLDED_FENCE": "1"}, argv=ARGV)
    assert rt.resolution.values["FOLDED_FENCE"].value is False and rt.armed() == []


def test_targeting_on_a_label_and_on_a_launch_fact(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {
        "dsv41.folded_fence": flag(False, {"if": [{"==": [{"var": "cluster"}, "canary"]}, "on", "off"]}),
        "dsv41.autotune_keep": flag(False, {"if": [{"==": [{"var": "tp_size"}, 2]}, "on", "off"]}),
    })

    def values(env, argv=ARGV):
        got = make_runtime(BASE + FLEET, env=env, argv=argv).resolution.values
        return got["FOLDED_FENCE"].value, got["AUTOTUNE_KEEP"].value

    assert values({"DSV41_FLEET_LABELS": "cluster=canary"}) == (True, True)
    assert values({"DSV41_FLEET_LABELS": "cluster=prod"}) == (False, True)
    assert values({}, argv=["--model-path", "/models/tiny", "--tp-size", "1"]) == (False, False)


def test_a_fractional_rollout_is_stable_per_instance_and_splits_instances(make_runtime, tmp_path):
    path = tmp_path / "flags.json"
    write_flags(path, {"dsv41.folded_fence": flag(False, {"fractional": [["on", 50], ["off", 50]]})})

    def boot(instance):
        rt = make_runtime(BASE + FLEET, env={"DSV41_FLEET_INSTANCE_ID": instance}, argv=ARGV)
        assert rt.resolution.reserved["FLEET"]["context"]["targeting_key"] == instance
        return rt.resolution.values["FOLDED_FENCE"].value

    from openfeature.evaluation_context import EvaluationContext

    settings = FleetSettings(provider="flagd", path=str(path), poll_interval_s=0.2)
    copy = fleet.flag_file_for(settings)
    connection = fleet.connect(settings, "x", {}, {}, 5.0, copy)
    try:
        assert connection.problem == ""
        ids = [f"gpu-node-{i}:30000" for i in range(40)]
        answers = {key: fleet.evaluate(connection.client, "dsv41.folded_fence", False,
                                       EvaluationContext(targeting_key=key)) for key in ids}
    finally:
        fleet.disconnect(connection)
        copy.close()
    assert {ev.answer for ev in answers.values()} == {fleet.Answer.VALUE}
    on = [key for key, ev in answers.items() if ev.value]
    assert 8 <= len(on) <= 32, on   # 50/50 over the targeting key
    off = next(key for key in ids if key not in on)
    assert boot(on[0]) is True and boot(on[0]) is True   # two boots, the same answer
    assert boot(off) is False and boot(off) is False


def test_a_missing_flag_file_warns_and_keeps_the_settings_values(make_runtime, tmp_path):
    rt = make_runtime(BASE + FLEET, argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert problem.severity == "warning"
    assert f"the flag service (flagd file {tmp_path / 'flags.json'}) could not be read at boot" in problem.message
    assert "does not exist" in problem.message and ": ;" not in problem.message
    assert problem.message.endswith("the settings' values are used")
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is False and ff.source == f"{tmp_path / 'settings.toml'} [default]"


def test_a_required_flag_service_that_cannot_be_read_stops_a_strict_launch(make_runtime, tmp_path):
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + FLEET + "required = true\n", argv=ARGV)
    assert "could not be read at boot" in message(exc)
    assert "fleet.required = true in strict mode: the launch stops" in message(exc)
    # not strict: the same launch goes on with its settings' values
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + FLEET + "required = true\n",
                      argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert problem.severity == "warning" and rt.resolution.values["FOLDED_FENCE"].value is False


def test_a_flag_that_is_not_a_boolean_is_refused(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {
        "dsv41.folded_fence": flag(True, variants={"on": "yes", "off": "no"})})
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + FLEET, argv=ARGV)
    assert "flag dsv41.folded_fence is not a boolean" in message(exc)
    assert "refused; in strict mode a flag the service cannot give is an error: the launch " \
        "stops; accepted: a boolean flag" in message(exc)
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + FLEET, argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FOLDED_FENCE"]
    assert problem.severity == "warning" and problem.origin == "fleet flag dsv41.folded_fence"
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is False and not ff.source.startswith("fleet")


def test_the_snapshot_carries_the_fleet_table_and_values(make_runtime, tmp_path):
    path = tmp_path / "flags.json"
    write_flags(path, {"dsv41.folded_fence": flag(True)})
    rt = make_runtime(BASE + FLEET, env={"DSV41_FLEET_LABELS": "cluster=canary"}, argv=ARGV)
    raw = rt.snapshot()
    launch, _features = read_snapshot(raw)
    table = launch.resolution.reserved["FLEET"]
    assert table["settings"] == rt.resolution.reserved["FLEET"]["settings"]
    assert table["sources"]["labels"] == "env DSV41_FLEET_LABELS"
    context = table["context"]
    assert context["targeting_key"] == f"{socket.gethostname()}:31000"
    attributes = context["attributes"]
    assert attributes["cluster"] == "canary" and attributes["model_path"] == "/models/tiny"
    assert attributes["tp_size"] == 2 and attributes["port"] == "31000"
    assert attributes["profile"] == "default" and len(attributes["fingerprint"]) == 64
    ff = launch.resolution.values["FOLDED_FENCE"]
    assert (ff.value, ff.source) == (True, rt.resolution.values["FOLDED_FENCE"].source)
    # a child takes the launch's fleet value from the snapshot: it reads no flag service
    path.unlink()
    child = build(None, None, environ={"DSV41_SNAPSHOT": raw}, argv=ARGV, configure_logging=False)
    try:
        assert child.from_snapshot and child.resolution.values["FOLDED_FENCE"].value is True
        assert child.resolution.reserved["FLEET"] == table
    finally:
        child.uninstall()


def _tamper(where, value):
    def mutate(fleet_table):
        *path, last = where
        node = fleet_table
        for part in path:
            node = node[part]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return mutate


@pytest.mark.parametrize("mutate,expected", [
    (_tamper(("settings", "poll_interval_s"), "fast"), "FLEET.poll_interval_s"),
    (_tamper(("settings", "provider"), "launchdarkly"), "FLEET.provider"),
    (_tamper(("settings", "token"), TOKEN), "FLEET.token"),
    (_tamper(("settings", "min_switch_interval_s"), -1), "FLEET.min_switch_interval_s"),
    (_tamper(("sources",), KeyError), "FLEET is not {settings, sources}"),
    (_tamper(("context", "attributes", "tp_size"), [2]), "FLEET.context"),
    (_tamper(("context", "targeting_key"), 7), "FLEET.context"),
])
def test_a_tampered_fleet_table_in_a_snapshot_is_refused(make_runtime, tmp_path, mutate, expected):
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(True)})
    data = json.loads(make_runtime(BASE + FLEET, argv=ARGV).snapshot())
    mutate(data["resolution"]["reserved"]["FLEET"])
    with pytest.raises(SnapshotError) as exc:
        read_snapshot(json.dumps(data))
    assert "DSV41_SNAPSHOT refused" in message(exc) and expected in message(exc)
    assert TOKEN not in message(exc)


def test_the_fleet_token_is_never_kept_or_shown(make_runtime, tmp_path):
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(True)})
    rt = make_runtime(BASE + FLEET, env={"DSV41_FLEET_TOKEN": TOKEN}, argv=ARGV)
    assert rt.resolution.values["FOLDED_FENCE"].source.startswith("fleet (flagd")
    raw = rt.snapshot()
    assert TOKEN not in raw and "DSV41_FLEET_TOKEN" not in json.loads(raw)["env"]
    assert TOKEN not in repr(rt.resolution) and TOKEN not in repr(rt.launch)
    with capture_logs() as logs:
        rt.announce()
    assert [e["event"] for e in logs] == ["flags.resolved"] and TOKEN not in repr(logs)


# ------------------------------------------------------------------ 3. watcher
class Switches:
    """The watcher's ``switch``: records ``(monotonic time, name, value, requested_by)`` and
    answers ``answer(name, value)`` (default: applied)."""

    def __init__(self, answer=None):
        self.calls: list[tuple[float, str, bool, str]] = []
        self.answer = answer

    def __call__(self, name, value, requested_by):
        self.calls.append((time.monotonic(), name, value, requested_by))
        return self.answer(name, value) if self.answer else fleet.Outcome(True, value)

    def made(self):
        return [(name, value) for _, name, value, _ in self.calls]


def events(log: CapturingLogger, name: str | None = None) -> list:
    out = [(call.args[0], call.kwargs) for call in log.calls]
    return [kw for event, kw in out if event == name] if name else [event for event, _ in out]


@pytest.fixture
def watch(tmp_path):
    """``watch(flags, launch=None, answer=None, **fields)``: a flag file holding ``flags``, and a
    started ``fleet.Watcher`` over it (the shipped features; launch values ``launch``, all off by
    default) whose first read is done. Returns ``watcher, switch, log, path, row(name)``. Every
    watcher is stopped at teardown."""
    made = []

    def start(flags, launch=None, answer=None, **fields):
        path = tmp_path / "flags.json"
        write_flags(path, flags)
        fields = {"poll_interval_s": 0.1, "min_switch_interval_s": 0.0, **fields}
        settings = FleetSettings(provider="flagd", path=str(path), **fields)
        switch, log = Switches(answer), CapturingLogger()
        watcher = fleet.Watcher(settings, {"targeting_key": "test-server:31000"}, FEATURES,
                                launch or {"folded_fence": False, "autotune_keep": False}, switch,
                                log, environ={"DSV41_FLEET_TOKEN": TOKEN})
        made.append(watcher)
        watcher.start()
        wait_for(lambda: watcher.status().last_read, "the watcher's first read")

        def row(name):
            return next(r for r in watcher.status().features if r.feature == name)

        return types.SimpleNamespace(watcher=watcher, switch=switch, log=log, path=path, row=row)

    yield start
    for watcher in made:
        watcher.stop()


def test_an_edited_file_makes_exactly_one_switch(watch):
    w = watch({"dsv41.folded_fence": flag(False)})
    assert w.switch.calls == [] and w.row("folded_fence").fleet_value is False
    write_flags(w.path, {"dsv41.folded_fence": flag(True)})
    digest = sha256(w.path)
    wait_for(lambda: w.switch.calls, "the switch")
    time.sleep(0.5)  # several more reads: the change is switched once
    assert [(n, v, by) for _, n, v, by in w.switch.calls] == [
        ("folded_fence", True, f"flagd:{w.path}@{digest}")]
    status = w.watcher.status()
    assert (status.switches, status.refused, status.reachable) == (1, 0, True)
    row = w.row("folded_fence")
    assert (row.fleet_value, row.applied, row.agrees, row.reason) == (True, True, True, "")
    assert datetime.fromisoformat(row.changed_at).tzinfo is not None
    assert [kw["requested_by"] for kw in events(w.log, "fleet.switched")] == [f"flagd:{w.path}@{digest}"]
    assert TOKEN not in repr(w.log.calls) and TOKEN not in status.model_dump_json()


def test_a_malformed_file_is_refused_once_and_a_later_good_file_applies(watch):
    w = watch({"dsv41.folded_fence": flag(False)})
    write_text(w.path, '{"flags": {"dsv41.folded_fence": ')
    wait_for(lambda: w.watcher.status().refused, "the refusal")
    time.sleep(0.6)  # flagd refuses the file at each of its reads: said once
    status = w.watcher.status()
    assert status.refused == 1 and status.switches == 0 and w.switch.calls == []
    assert status.problem.startswith("refused: ") and status.reachable
    assert len(events(w.log, "fleet.refused")) == 1
    row = w.row("folded_fence")
    assert (row.fleet_value, row.applied) == (False, False)
    write_flags(w.path, {"dsv41.folded_fence": flag(True)})
    wait_for(lambda: w.switch.calls, "the switch after a good file")
    assert w.switch.made() == [("folded_fence", True)]
    wait_for(lambda: w.watcher.status().problem == "", "the refusal cleared")
    assert w.watcher.status().refused == 1 and w.row("folded_fence").applied is True


def test_a_change_of_a_feature_that_is_not_live_needs_a_restart(watch):
    assert not FEATURES["autotune_keep"].live
    w = watch({"dsv41.autotune_keep": flag(False)})
    write_flags(w.path, {"dsv41.autotune_keep": flag(True)})
    wait_for(lambda: w.row("autotune_keep").fleet_value is True, "the change")
    time.sleep(0.4)
    row = w.row("autotune_keep")
    assert row.reason.startswith("restart needed") and "next launch" in row.reason
    assert (row.applied, row.agrees) == (False, False)
    assert w.switch.calls == [] and w.watcher.status().switches == 0
    assert len(events(w.log, "fleet.restart_needed")) == 1


def test_a_refused_switch_is_said_on_the_row_and_counted(watch):
    reason = "rank 1 refused: folded_fence is drifted on this rank"
    w = watch({"dsv41.folded_fence": flag(False)}, min_switch_interval_s=30,
              answer=lambda name, value: fleet.Outcome(False, None, reason))
    write_flags(w.path, {"dsv41.folded_fence": flag(True)})
    wait_for(lambda: w.watcher.status().refused, "the refusal")
    time.sleep(0.4)  # the retry waits for min_switch_interval_s
    status = w.watcher.status()
    assert (status.refused, status.switches, len(w.switch.calls)) == (1, 0, 1)
    row = w.row("folded_fence")
    assert row.reason == f"refused: {reason}" and (row.fleet_value, row.applied) == (True, False)
    assert not row.agrees
    assert [kw["reason"] for kw in events(w.log, "fleet.refused")] == [reason]


def test_flapping_is_coalesced_and_the_last_value_applies(watch):
    interval = 0.5
    w = watch({"dsv41.folded_fence": flag(False)}, min_switch_interval_s=interval)
    started = time.monotonic()
    for i in range(50):
        write_flags(w.path, {"dsv41.folded_fence": flag(i % 2 == 1)})
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    wait_for(lambda: w.row("folded_fence").applied is True, "the last value applied")
    time.sleep(interval + 0.3)   # nothing more to switch
    calls = w.switch.calls
    assert 1 <= len(calls) <= 2 + math.ceil(elapsed / interval), (elapsed, calls)
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert all(gap >= interval - 0.01 for gap in gaps), gaps   # the ranks never see a higher rate
    assert calls[-1][2] is True and w.row("folded_fence").fleet_value is True
    status = w.watcher.status()
    assert status.switches == len(calls)
    assert 1 <= status.coalesced <= 50   # changes held back, not reads made while waiting


def test_a_deleted_file_is_unreachable_until_it_is_back(watch):
    w = watch({"dsv41.folded_fence": flag(True)}, launch={"folded_fence": True})
    assert w.watcher.status().reachable
    w.path.unlink()
    wait_for(lambda: not w.watcher.status().reachable, "unreachable")
    time.sleep(0.3)
    status = w.watcher.status()
    assert datetime.fromisoformat(status.unreachable_since).tzinfo is not None
    assert str(w.path) in status.problem and "does not exist" in status.problem
    assert status.refused == 0 and w.switch.calls == []
    row = w.row("folded_fence")
    assert row.applied is True and row.reason == f"flag service unreachable since {status.unreachable_since}"
    assert len(events(w.log, "fleet.unreachable")) == 1
    write_flags(w.path, {"dsv41.folded_fence": flag(False)})
    wait_for(lambda: w.watcher.status().reachable, "reachable again")
    wait_for(lambda: w.switch.calls, "the switch of the file that came back")
    status = w.watcher.status()
    assert status.unreachable_since == "" and status.problem == ""
    assert w.switch.made() == [("folded_fence", False)] and w.row("folded_fence").reason == ""
    assert len(events(w.log, "fleet.reachable")) == 2   # at the first read, and back


def test_stop_ends_the_watcher_thread_within_its_bound(watch):
    w = watch({"dsv41.folded_fence": flag(False)}, poll_interval_s=30)
    threads = [t for t in threading.enumerate() if t.name == "dsv41-fleet"]
    assert len(threads) == 1 and threads[0].daemon
    started = time.monotonic()
    w.watcher.stop(timeout_s=2.0)
    assert time.monotonic() - started < 2.0 and not threads[0].is_alive()


def test_a_forked_child_runs_no_watcher_and_cannot_start_the_parents(tmp_path):
    path = tmp_path / "flags.json"
    write_flags(path, {"dsv41.folded_fence": flag(False)})
    code = f"""
        import json, os, threading, time
        from pathlib import Path
        from structlog.testing import CapturingLogger
        from dsv41_flags import fleet
        from dsv41_flags.discovery import discover
        from dsv41_flags.fleet_settings import FleetSettings

        features = {{f.name: f for f in discover(Path({str(FEATURES_DIR)!r}))}}
        settings = FleetSettings(provider="flagd", path={str(path)!r}, poll_interval_s=0.1)
        watcher = fleet.Watcher(settings, {{"targeting_key": "k"}}, features, {{}},
                                lambda name, value, by: fleet.Outcome(True, value), CapturingLogger())
        watcher.start()
        deadline = time.monotonic() + 10
        while not watcher.status().last_read and time.monotonic() < deadline:
            time.sleep(0.02)
        parent = [t.name for t in threading.enumerate()]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                names = [t.name for t in threading.enumerate()]
                try:
                    watcher.start()
                    start = "started"
                except RuntimeError as exc:
                    start = "RuntimeError: " + str(exc)
                os.write(w, json.dumps({{"threads": names, "start": start}}).encode())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        _, status = os.waitpid(pid, 0)
        watcher.stop()
        print(json.dumps({{"parent": parent, "child": json.loads(data), "status": status}}))
    """
    proc = run_code(code, clean_env(PYTHONPATH=str(REPO / "src")), tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "dsv41-fleet" in out["parent"] and out["status"] == 0
    assert "dsv41-fleet" not in out["child"]["threads"]
    assert out["child"]["start"] == "RuntimeError: a fleet watcher runs only in the process that built it"


# ------------------------------------------------------------------ the CLI's words for the fleet
@pytest.fixture
def cli(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from dsv41_flags.cli import app

    for key in [k for k in os.environ if k.upper().startswith("DSV41_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def run(*args, env=None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        return CliRunner().invoke(app, list(args), catch_exceptions=False, prog_name="dsv41-flags")
    return run


def test_explain_shows_the_fleet_as_the_last_layer_of_a_flag(cli, tmp_path):
    (tmp_path / "settings.toml").write_text(BASE + FLEET)
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": flag(True)})
    r = cli("explain", "folded_fence", "--json", "-s", str(tmp_path / "settings.toml"))
    assert r.exit_code == 0, r.output
    layers = json.loads(r.stdout)["keys"]["FOLDED_FENCE"]["layers"]
    assert [layer["source"].split(" (")[0] for layer in layers][-1] == "fleet"
    assert layers[-1]["wins"] and layers[-1]["raw"] is True


@pytest.mark.parametrize("key", ["fleet.poll_interval_s", "DSV41_FLEET_POLL_INTERVAL_S"])
def test_explain_names_a_fleet_settings_source_and_what_it_accepts(cli, tmp_path, key):
    (tmp_path / "settings.toml").write_text(BASE + FLEET)
    r = cli("explain", key, "-s", str(tmp_path / "settings.toml"),
            env={"DSV41_FLEET_POLL_INTERVAL_S": "2"})
    assert r.exit_code == 0, r.output
    assert ("fleet.poll_interval_s = 2.0  (from env DSV41_FLEET_POLL_INTERVAL_S); accepted: a "
            "number of seconds from 0.1 to 3600") in r.stdout, r.stdout
    r = cli("explain", "fleet", "--json", "-s", str(tmp_path / "settings.toml"),
            env={"DSV41_FLEET_TOKEN": TOKEN})
    rows = {row["key"]: row for row in json.loads(r.stdout)["fields"]}
    assert rows["fleet.path"]["source"] == f"{tmp_path / 'settings.toml'} [default.fleet]"
    assert rows["fleet.prefix"]["source"] == "declared default"
    assert TOKEN not in r.stdout


def test_fleet_status_help_and_errors_speak_of_its_url_arguments(cli):
    r = cli("fleet", "status", "--help")
    assert "URL..." in r.stdout and "<list" not in r.stdout, r.stdout
    r = cli("fleet", "status", "flags:1")
    assert r.exit_code == 2
    assert "URL 'flags:1' is not an http:// URL" in r.stderr and "write http://flags:1" in r.stderr
    assert "--url" not in r.stderr


# ------------------------------------------------------------------ a hostile Unleash answer
class _Unleash:
    """A loopback HTTP server that answers as Unleash's client API would (``/health``,
    ``/api/client/register``, ``/api/client/features``), with ``self.body`` as the features
    answer: bytes sent with a Content-Length, or an iterable of chunks sent chunked."""

    def __init__(self):
        import http.server

        outer = self
        self.body = b""
        self.features_calls = 0
        self.features_status = 200

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code, body=b"{}"):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(202)

            def do_GET(self):
                if self.path.startswith("/health"):
                    return self._send(200, b'{"health": "GOOD"}')
                if not self.path.startswith("/api/client/features"):
                    return self._send(404)
                outer.features_calls += 1
                if outer.features_status != 200:
                    return self._send(outer.features_status, b'{"error": "unauthorized"}')
                body = outer.body
                if isinstance(body, bytes):
                    return self._send(200, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in body:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _features(on: bool) -> bytes:
    return json.dumps({"version": 1, "features": [{
        "name": "dsv41.folded_fence", "enabled": on, "strategies": [{"name": "default"}]}]}).encode()


def _huge_chunks(total=6 << 20, size=1 << 16):
    """A features answer that never ends as JSON, larger than the cap, sent chunked."""
    yield b'{"version": 1, "features": ["'
    for _ in range(total // size):
        yield b"x" * size


@pytest.fixture
def unleash():
    server = _Unleash()
    yield server
    server.close()


@pytest.mark.parametrize("kind", ["content-length", "chunked"])
def test_a_huge_unleash_answer_is_refused_at_boot_and_the_settings_stand(make_runtime, unleash,
                                                                          kind):
    unleash.body = b"[" * (5 << 20) if kind == "content-length" else _huge_chunks()
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 5\npoll_interval_s = 1\n')
    started = time.monotonic()
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + table, argv=ARGV)
    assert time.monotonic() - started < 30
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert "its answer is larger than 4 MiB" in problem.message, problem.message
    assert problem.message.endswith("the settings' values are used")
    assert rt.resolution.values["FOLDED_FENCE"].value is False


def test_an_unleash_answer_under_the_cap_is_read(make_runtime, unleash):
    unleash.body = _features(True)
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 5\npoll_interval_s = 1\n')
    rt = make_runtime(BASE + table, argv=ARGV)
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is True and ff.source.startswith("fleet (unleash"), ff


def test_a_huge_unleash_answer_while_serving_is_refused_once_and_nothing_changes(unleash):
    """Unleash answers well, then past the cap (chunked), then well again with a change: the
    huge answer is refused once and counted, the values read before stay, the change applies."""
    unleash.body = _features(False)
    settings = FleetSettings(provider="unleash", url=unleash.url, poll_interval_s=1,
                             min_switch_interval_s=0.0, boot_timeout_s=5)
    switch, log = Switches(None), CapturingLogger()
    watcher = fleet.Watcher(settings, {"targeting_key": "test-server:31000"}, FEATURES,
                            {"folded_fence": False, "autotune_keep": False}, switch, log,
                            environ={"DSV41_FLEET_TOKEN": TOKEN})
    watcher.start()
    try:
        wait_for(lambda: watcher.status().last_read, "the watcher's first read", timeout=15)
        calls = unleash.features_calls
        unleash.body = list(_huge_chunks())
        wait_for(lambda: watcher.status().refused, "the refusal", timeout=15)
        wait_for(lambda: unleash.features_calls >= calls + 3, "two more reads", timeout=15)
        status = watcher.status()
        assert status.refused == 1 and switch.calls == [], status
        assert "its answer is larger than 4 MiB" in status.problem and status.reachable
        unleash.body = _features(True)
        wait_for(lambda: switch.calls, "the switch after a good answer", timeout=15)
        assert switch.made() == [("folded_fence", True)]
        wait_for(lambda: watcher.status().problem == "", "the refusal cleared", timeout=15)
    finally:
        watcher.stop()


def test_a_token_unleash_refuses_is_said_not_read_as_no_flags(make_runtime, unleash):
    """A wrong token makes Unleash answer 401: the launch says the token was refused (a warning,
    the settings' values), never that every flag is absent; the token itself is never shown."""
    unleash.body, unleash.features_status = _features(True), 401
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 5\npoll_interval_s = 1\n')
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + table,
                      env={"DSV41_FLEET_TOKEN": TOKEN}, argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert "it answered 401 to the token" in problem.message, problem.message
    assert TOKEN not in problem.message and rt.resolution.values["FOLDED_FENCE"].value is False


# ------------------------------------------------------------------ flags the service holds but cannot give
def test_a_disabled_flagd_flag_leaves_the_settings_to_decide(make_runtime, tmp_path):
    """flagd's ``state: DISABLED`` gives back the caller's default: never a fleet value."""
    disabled = {**flag(True), "state": "DISABLED"}
    write_flags(tmp_path / "flags.json", {"dsv41.folded_fence": disabled})
    rt = make_runtime(BASE + FLEET, env={"DSV41_FOLDED_FENCE": "1"}, argv=ARGV)
    ff = rt.resolution.values["FOLDED_FENCE"]
    assert ff.value is True and ff.source == "env DSV41_FOLDED_FENCE", ff
    assert not [p for p in rt.resolution.problems if p.key in ("FLEET", "FOLDED_FENCE")]


def test_a_flag_whose_definition_does_not_resolve_is_refused_by_name(make_runtime, tmp_path):
    """A ``defaultVariant`` naming no variant is that flag's problem, not the service's: the
    other flags are still read."""
    write_flags(tmp_path / "flags.json", {
        "dsv41.folded_fence": {**flag(True), "defaultVariant": "of"},
        "dsv41.autotune_keep": flag(True)})
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + FLEET, argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FOLDED_FENCE"]
    assert "flag dsv41.folded_fence cannot be resolved" in problem.message, problem.message
    assert not [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert rt.resolution.values["AUTOTUNE_KEEP"].value is True


def test_unquoted_yaml_variants_get_a_hint(make_runtime, tmp_path):
    (tmp_path / "flags.yaml").write_text(
        "flags:\n  dsv41.folded_fence:\n    state: ENABLED\n    variants: {on: true, off: false}\n"
        "    defaultVariant: \"on\"\n")
    rt = make_runtime(BASE.replace("strict = true", "strict = false")
                      + FLEET.replace("flags.json", "flags.yaml"), argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FOLDED_FENCE"]
    assert "in YAML, quote the variant names" in problem.message, problem.message


def test_validate_reads_the_fleet_as_a_boot_would(cli, tmp_path):
    (tmp_path / "settings.toml").write_text(BASE + FLEET + "required = true\n")
    r = cli("validate", "--json", "-s", str(tmp_path / "settings.toml"))
    assert r.exit_code == 1, r.output
    [problem] = json.loads(r.stdout)["problems"]
    assert "could not be read at boot" in problem["message"] and problem["severity"] == "error"


def test_explain_refuses_an_unknown_fleet_field_and_says_an_invalid_table(cli, tmp_path):
    (tmp_path / "settings.toml").write_text(BASE + FLEET)
    r = cli("explain", "fleet.pth", "-s", str(tmp_path / "settings.toml"))
    assert r.exit_code == 1 and "fleet.pth is not a fleet setting" in r.stderr
    assert "did you mean path?" in r.stderr
    (tmp_path / "settings.toml").write_text(BASE + FLEET + 'required = "yes"\n')
    r = cli("explain", "fleet", "-s", str(tmp_path / "settings.toml"))
    assert r.exit_code == 1 and "the fleet table is invalid" in r.stdout, r.output
    assert "fleet.required = 'yes'" in r.stderr


# ------------------------------------------------------------------ the attacker's kinds
@pytest.mark.parametrize("how", ["variable", "file"])
def test_a_token_that_cannot_be_a_header_is_refused_and_never_shown(make_runtime, unleash,
                                                                    tmp_path, how):
    """A token with a line break (a header injection, or a token file of two lines) would make
    the HTTP library's error quote it: it is refused, named by where it came from, never shown,
    and never sent."""
    secret = "SEKRIT-TOK"
    env = {}
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 3\npoll_interval_s = 1\n')
    if how == "variable":
        env["DSV41_FLEET_TOKEN"] = f"{secret}\r\nX-Evil: 1"
    else:
        (tmp_path / "token").write_text(f"{secret}\nsecond line\n")
        table += 'token_file = "token"\n'
    unleash.body = _features(True)
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + table, env=env, argv=ARGV)
    text = " ".join(p.message for p in rt.resolution.problems)
    assert "(not shown) is refused" in text and "one line of visible ASCII" in text, text
    assert secret not in text and secret not in rt.snapshot()
    with capture_logs() as logs:
        rt.announce()
    assert secret not in repr(logs)


def test_a_flag_file_swapped_for_a_fifo_then_back_still_switches(watch):
    """The provider reads a private copy, never the operator's path: a FIFO swapped in is said
    as unreachable, and the file put back (with an older modification time, as cp -p leaves
    it) switches."""
    w = watch({"dsv41.folded_fence": flag(False)})
    os.unlink(w.path)
    os.mkfifo(w.path)
    wait_for(lambda: not w.watcher.status().reachable, "the FIFO said as unreachable")
    assert "not a regular file" in w.watcher.status().problem
    new = w.path.with_name("new.json")
    write_flags(new, {"dsv41.folded_fence": flag(True)})
    os.utime(new, (time.time() - 3600, time.time() - 3600))
    os.replace(new, w.path)
    wait_for(lambda: w.switch.calls, "the switch after the file is back")
    assert w.switch.made() == [("folded_fence", True)]
    assert w.switch.calls[0][3] == f"flagd:{w.path}@{sha256(w.path)}"


BOMB = ('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f'{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},'
                  f'*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},'
                  f'*{chr(97 + i)}]\n' for i in range(8))
        + "flags: {}\n")


@pytest.mark.parametrize("text,expected", [
    pytest.param(BOMB, "has a YAML alias *a at line 2", id="alias-bomb"),
    pytest.param("flags: " + "[" * 200000 + "]" * 200000 + "\n", "nests deeper than 256 levels",
                 id="deep"),
])
def test_a_hostile_yaml_file_is_refused_before_any_parse(make_runtime, tmp_path, text, expected):
    (tmp_path / "flags.yaml").write_text(text)
    started = time.monotonic()
    rt = make_runtime(BASE.replace("strict = true", "strict = false")
                      + FLEET.replace("flags.json", "flags.yaml"), argv=ARGV)
    assert time.monotonic() - started < 15
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert expected in problem.message, problem.message


def test_a_yaml_alias_bomb_while_watching_is_refused_once(tmp_path):
    path = tmp_path / "flags.yaml"
    path.write_text('flags:\n  dsv41.folded_fence:\n    state: ENABLED\n    variants: {"on": true, '
                    '"off": false}\n    defaultVariant: "off"\n')
    settings = FleetSettings(provider="flagd", path=str(path), poll_interval_s=0.1,
                             min_switch_interval_s=0.0)
    switch, log = Switches(None), CapturingLogger()
    watcher = fleet.Watcher(settings, {"targeting_key": "t:1"}, FEATURES,
                            {"folded_fence": False, "autotune_keep": False}, switch, log)
    watcher.start()
    try:
        wait_for(lambda: watcher.status().last_read, "the first read")
        write_text(path, BOMB)
        wait_for(lambda: watcher.status().refused, "the bomb refused")
        time.sleep(0.5)
        status = watcher.status()
        assert status.refused == 1 and "has a YAML alias" in status.problem, status
        assert switch.calls == [] and status.reachable
    finally:
        watcher.stop()


def test_an_unleash_answer_that_is_not_flag_definitions_is_refused(make_runtime, unleash):
    unleash.body = b"<html>maintenance</html>"
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 3\npoll_interval_s = 1\nrequired = true\n')
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + table, argv=ARGV)
    assert "its answer is not JSON" in message(exc) and "the launch stops" in message(exc)
    unleash.features_status = 500
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + table, argv=ARGV)
    assert "it gave no answer of flag definitions (a server error or a timeout" in message(exc)


def test_a_health_probe_that_trickles_is_bounded(make_runtime):
    """A server that sends /health a byte every 0.5 s: one deadline for the whole probe."""
    import http.server
    import socketserver

    class Drip(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            try:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 100:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from dsv41_flags.fleet_providers import PROBE_TIMEOUT_S, UnleashFleetProvider

        url = f"http://127.0.0.1:{server.server_address[1]}/api"
        provider = UnleashFleetProvider(FleetSettings(provider="unleash", url=url), "")
        started = time.monotonic()
        why = provider.unreachable()
        assert time.monotonic() - started < PROBE_TIMEOUT_S + 1.5
        assert "did not answer within" in why, why
        assert "has not answered the previous probe yet" in provider.unreachable()
    finally:
        server.shutdown()
        server.server_close()


def test_start_from_many_threads_starts_one_watcher(watch):
    w = watch({"dsv41.folded_fence": flag(False)})
    barrier = threading.Barrier(16)

    def start():
        barrier.wait()
        w.watcher.start()
    threads = [threading.Thread(target=start) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len([t for t in threading.enumerate() if t.name == "dsv41-fleet"
                and t is w.watcher._thread]) == 1
    assert len([t for t in threading.enumerate() if t.name == "dsv41-fleet"]) >= 1


@pytest.mark.parametrize("field,value", [
    ("app_name", "模型"), ("app_name", "a\r\nX-Evil: 1"), ("instance_id", "node\n1"),
    ("environment", "prod\x07"), ("path", "flags\x07.json"),
], ids=["cjk", "crlf", "newline", "bell", "path-bell"])
def test_a_fleet_value_that_cannot_be_sent_is_a_settings_error(make_runtime, field, value):
    table = '[default.fleet]\nprovider = "flagd"\npath = "flags.json"\n'
    with pytest.raises(SettingsError) as exc:
        make_runtime(BASE + table, env={f"DSV41_FLEET_{field.upper()}": value})
    assert f"fleet.{field} = " in message(exc) and "character" in message(exc), message(exc)


# ------------------------------------------------------------------ the second attacker's kinds
def test_evaluators_that_expand_past_the_cap_are_refused(make_runtime, tmp_path):
    evaluators = {f"e{i}": {"or": [{"$ref": f"e{i + 1}"}, {"$ref": f"e{i + 1}"}]} for i in range(40)}
    evaluators["e40"] = {"==": [1, 1]}
    fence = {**flag(True), "targeting": {"if": [{"$ref": "e0"}, "on", "off"]}}
    write_text(tmp_path / "flags.json", json.dumps({"flags": {"dsv41.folded_fence": fence},
                                                    "$evaluators": evaluators}))
    started = time.monotonic()
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + FLEET, argv=ARGV)
    assert time.monotonic() - started < 15
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert "expands past 4 MiB once its $ref are put in place" in problem.message


def test_the_copy_directory_removed_while_watching_is_made_again(watch):
    import shutil

    w = watch({"dsv41.folded_fence": flag(False)})
    shutil.rmtree(w.watcher._flag_file.directory)
    write_flags(w.path, {"dsv41.folded_fence": flag(True)})
    wait_for(lambda: w.switch.calls, "the switch after the copy directory is gone", timeout=10)
    assert w.switch.made() == [("folded_fence", True)] and w.watcher._thread.is_alive()


def test_two_watchers_in_one_process_read_each_their_own_file(tmp_path):
    made = []
    for name, on in (("m1.json", False), ("m2.json", True)):
        write_flags(tmp_path / name, {"dsv41.folded_fence": flag(on)})
        settings = FleetSettings(provider="flagd", path=str(tmp_path / name), poll_interval_s=0.1,
                                 min_switch_interval_s=0.0)
        switch = Switches(None)
        w = fleet.Watcher(settings, {"targeting_key": name}, FEATURES,
                          {"folded_fence": False, "autotune_keep": False}, switch,
                          CapturingLogger())
        w.start()
        made.append((w, switch))
    try:
        wait_for(lambda: made[1][1].calls, "the second watcher's switch")
        time.sleep(0.5)
        assert made[0][1].calls == [], made[0][1].calls      # m1 says off: nothing to switch
        made[1][0].stop()
        write_flags(tmp_path / "m1.json", {"dsv41.folded_fence": flag(True)})
        wait_for(lambda: made[0][1].calls, "the first watcher still reads its own file")
        assert made[0][1].calls[0][3].startswith(f"flagd:{tmp_path / 'm1.json'}@")
    finally:
        for w, _ in made:
            w.stop()


def test_unleash_flag_entries_that_are_not_definitions_are_refused(make_runtime, unleash):
    unleash.body = json.dumps({"version": 1, "features": [
        1, {"name": "dsv41.folded_fence", "enabled": "yes", "strategies": "zz"}]}).encode()
    table = (f'[default.fleet]\nprovider = "unleash"\nurl = "{unleash.url}"\n'
             'boot_timeout_s = 3\npoll_interval_s = 1\n')
    rt = make_runtime(BASE.replace("strict = true", "strict = false") + table, argv=ARGV)
    [problem] = [p for p in rt.resolution.problems if p.key == "FLEET"]
    assert "its flag definition 0 is not one" in problem.message, problem.message


def test_a_copy_directory_of_a_killed_process_is_swept(tmp_path):
    """A server killed with SIGKILL leaves its FlagFileCopy directory: the next copy made on the
    machine removes those whose process is gone, never a live one's."""
    import subprocess
    import tempfile

    from dsv41_flags.fleet_providers import COPY_PREFIX, sweep_copies

    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    root = tempfile.gettempdir()
    gone = os.path.join(root, f"{COPY_PREFIX}{dead.pid}-test")
    live = os.path.join(root, f"{COPY_PREFIX}{os.getppid()}-test")
    for path in (gone, live):
        os.makedirs(path, exist_ok=True)
    try:
        removed = sweep_copies(root)
        assert gone in removed and not os.path.exists(gone)
        assert os.path.isdir(live)
    finally:
        import shutil

        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(gone, ignore_errors=True)
