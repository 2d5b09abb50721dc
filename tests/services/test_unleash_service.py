"""The Unleash test service driven from Python the way live features will read it: OpenFeature
with openfeature-provider-unleash, UnleashClient under it, polling every second.

One Unleash serves the whole session (``unleash_service``), so each test makes its own flags.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest
from openfeature import api
from openfeature.contrib.provider.unleash import UnleashProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import EventDetails, ProviderEvent
from openfeature.flag_evaluation import Reason
from openfeature.provider import ProviderStatus
from UnleashClient.cache import FileCache

from .unleash import AdminApiError, Installation, UnleashService, constraint, variant

REFRESH_S = 1
#: bound on every wait for a change to reach a client: one poll (1 s) after Unleash's own
#: revision check (every 1 s), with slack for a busy 2-core machine
SEEN_WITHIN_S = 15.0


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = SEEN_WITHIN_S) -> float:
    """Poll ``predicate`` every 20 ms; return the seconds until it held, fail the test after
    ``timeout_s``."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            pytest.fail(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - t0


@pytest.fixture
def make_client(unleash_service: UnleashService, tmp_path, request):
    """``make_client(name, cache_name=None, environment="development") -> (client, provider)``:
    an OpenFeature client of its own domain on a fresh UnleashProvider that polls every second,
    sends no metrics and keeps its backup file in tmp_path/<cache_name>/cache (fcache names the
    file "cache" in the directory it is given: providers of one directory share one file, so a
    later provider may start from an earlier one's). Every provider is shut down at teardown."""

    def make(name: str, cache_name: str | None = None, environment: str = "development"):
        domain = f"{request.node.name}-{name}"
        cache_name = cache_name or domain
        provider = UnleashProvider(
            url=unleash_service.url, app_name=cache_name,
            api_token=unleash_service.client_token(environment),
            cache=FileCache(cache_name, directory=str(tmp_path / "unleash-cache" / cache_name)))
        provider.client.unleash_refresh_interval = REFRESH_S
        provider.client.unleash_disable_metrics = True
        api.set_provider_and_wait(provider, domain=domain)
        return api.get_client(domain=domain), provider

    yield make
    api.shutdown()


def sees(provider: UnleashProvider, flag: str) -> Callable[[], bool]:
    return lambda: flag in provider.client.feature_definitions()


@pytest.mark.services
def test_flag_is_off_until_enabled_then_on_after_a_refresh(unleash_service, make_client):
    unleash_service.create_flag("dsv41.smoke", type="kill-switch")
    client, provider = make_client("a")
    wait_until(sees(provider, "dsv41.smoke"), "the client receives the new flag")
    off = client.get_boolean_details("dsv41.smoke", False)
    assert (off.value, off.reason, off.error_code) == (False, Reason.DEFAULT, None)

    unleash_service.set_enabled("dsv41.smoke", "development", True)
    wait_until(lambda: client.get_boolean_value("dsv41.smoke", False), "switched on")
    on = client.get_boolean_details("dsv41.smoke", False)
    assert (on.value, on.reason, on.error_code) == (True, Reason.TARGETING_MATCH, None)
    # another environment keeps its own state
    production, _ = make_client("production", environment="production")
    assert production.get_boolean_value("dsv41.smoke", False) is False

    unleash_service.set_enabled("dsv41.smoke", "development", False)
    wait_until(lambda: not client.get_boolean_value("dsv41.smoke", True), "switched off")
    kinds = [e["type"] for e in unleash_service.events("dsv41.smoke")]
    assert kinds.count("feature-environment-enabled") == 1
    assert kinds.count("feature-environment-disabled") == 1


@pytest.mark.services
def test_constraint_on_a_custom_context_field(unleash_service, make_client):
    unleash_service.ensure_context_field("cluster", legal_values=["canary", "main"])
    unleash_service.create_flag("dsv41.smoke_canary")
    unleash_service.add_flexible_rollout("dsv41.smoke_canary", "development",
                                         constraints=[constraint("cluster", "IN", ["canary"])])
    unleash_service.set_enabled("dsv41.smoke_canary", "development", True)
    client, provider = make_client("a")
    wait_until(sees(provider, "dsv41.smoke_canary"), "the client receives the flag")

    def on(ctx: EvaluationContext | None) -> bool:
        return client.get_boolean_value("dsv41.smoke_canary", False, ctx)

    # the provider puts attributes at the top of Unleash's context; UnleashClient moves fields
    # it does not know into ``properties``, where constraints on custom fields look
    assert on(EvaluationContext(attributes={"cluster": "canary"})) is True
    assert on(EvaluationContext(attributes={"properties": {"cluster": "canary"}})) is True
    assert on(EvaluationContext(attributes={"cluster": "main"})) is False
    assert on(EvaluationContext(targeting_key="canary")) is False
    assert on(None) is False


@pytest.mark.services
@pytest.mark.parametrize("stickiness", ["userId", "sessionId", "host"])
def test_half_rollout_is_sticky_across_fresh_clients(unleash_service, make_client, stickiness):
    """targeting_key becomes userId; sessionId and custom fields come from the attributes."""
    flag = f"dsv41.smoke_half_{stickiness}"
    if stickiness == "host":
        unleash_service.ensure_context_field("host", stickiness=True)
    unleash_service.create_flag(flag)
    unleash_service.add_flexible_rollout(flag, "development", rollout=50, stickiness=stickiness)
    unleash_service.set_enabled(flag, "development", True)

    def context(i: int) -> EvaluationContext:
        if stickiness == "userId":
            return EvaluationContext(targeting_key=f"rank-{i}")
        return EvaluationContext(attributes={stickiness: f"rank-{i}"})

    answers = []
    for name in ("first", "second"):
        client, provider = make_client(name)
        wait_until(sees(provider, flag), "the client receives the flag")
        answers.append([client.get_boolean_value(flag, False, context(i)) for i in range(64)])
    assert answers[0] == answers[1]
    assert 16 <= sum(answers[0]) <= 48  # about half of 64 ids (murmur3 of groupId:id)
    # without the sticky field the default "random" fallback is not what the flag is about:
    # the rollout by userId needs the targeting key
    if stickiness == "userId":
        client, _ = make_client("third")
        assert [client.get_boolean_value(flag, False, context(i)) for i in range(64)] == answers[0]


@pytest.mark.services
def test_variant_payload_reaches_object_and_string_evaluation(unleash_service, make_client):
    unleash_service.create_flag("dsv41.smoke_variant", type="experiment")
    unleash_service.add_flexible_rollout(
        "dsv41.smoke_variant", "development",
        variants=[variant("wide", {"max_tokens": 7})])
    unleash_service.set_enabled("dsv41.smoke_variant", "development", True)
    client, provider = make_client("a")
    wait_until(sees(provider, "dsv41.smoke_variant"), "the client receives the flag")
    got = client.get_object_details("dsv41.smoke_variant", {})
    assert (got.value, got.variant) == ({"max_tokens": 7}, "wide")
    assert client.get_string_value("dsv41.smoke_variant", "") == '{"max_tokens": 7}'
    assert client.get_boolean_value("dsv41.smoke_variant", False) is True


@pytest.mark.services
def test_outage_keeps_last_values_and_recovers(unleash_service, make_client):
    unleash_service.create_flag("dsv41.smoke_outage", type="kill-switch")
    unleash_service.set_enabled("dsv41.smoke_outage", "development", True)
    client, provider = make_client("a", cache_name="smoke-outage")
    wait_until(lambda: client.get_boolean_value("dsv41.smoke_outage", False), "switched on")
    port, old_pid = unleash_service.port, unleash_service.pids["unleash"]

    unleash_service.stop_unleash()
    try:
        with pytest.raises(ProcessLookupError):
            os.kill(old_pid, 0)  # the process group is ended, not left behind
        time.sleep(3 * REFRESH_S)  # a few failed polls
        kept = client.get_boolean_details("dsv41.smoke_outage", False)
        assert (kept.value, kept.error_code) == (True, None)
        # a fresh provider that never reached the server answers the caller's default, without
        # an error, and the SDK calls it READY: only the UnleashClient under it knows it has no
        # flags
        blind, blind_provider = make_client("blind")
        got = blind.get_boolean_details("dsv41.smoke_outage", False)
        assert (got.value, got.reason, got.error_code) == (False, Reason.DEFAULT, None)
        assert blind.get_provider_status() is ProviderStatus.READY
        assert blind_provider.client.feature_definitions() == {}
        # a fresh provider on the first one's backup file starts from the last fetched values
        cached, _ = make_client("cached", cache_name="smoke-outage")
        assert cached.get_boolean_value("dsv41.smoke_outage", False) is True
    finally:
        unleash_service.start_unleash()  # the session's later tests need it
    assert unleash_service.port == port
    unleash_service.set_enabled("dsv41.smoke_outage", "development", False)
    wait_until(lambda: not client.get_boolean_value("dsv41.smoke_outage", True),
               "the first client sees the change after the outage")
    wait_until(lambda: "dsv41.smoke_outage" in blind_provider.client.feature_definitions()
               and not blind.get_boolean_value("dsv41.smoke_outage", True),
               "the blind client fetches the flags after the outage")


@pytest.mark.services
def test_change_events_reach_the_provider_handlers_only(unleash_service, make_client):
    """openfeature-provider-unleash 0.1.2 calls the handlers added with provider.add_handler on
    every fetch that brings new flag data (flag_keys: every flag of the answer); it does not emit
    through the SDK, so api.add_handler / client.add_handler hear nothing."""
    on_provider: list[dict] = []
    on_sdk: list[EventDetails] = []

    def sdk_handler(details: EventDetails) -> None:
        on_sdk.append(details)

    api.add_handler(ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, sdk_handler)
    try:
        unleash_service.create_flag("dsv41.smoke_events")
        client, provider = make_client("a")
        provider.add_handler(ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, on_provider.append)
        wait_until(sees(provider, "dsv41.smoke_events"), "the client receives the flag")
        on_provider.clear()
        unleash_service.set_enabled("dsv41.smoke_events", "development", True)
        wait_until(lambda: any("dsv41.smoke_events" in e["flag_keys"] for e in on_provider),
                   "a configuration-changed event on the provider")
        assert client.get_boolean_value("dsv41.smoke_events", False) is True
        time.sleep(1.0)
        assert on_sdk == []
    finally:
        api.remove_handler(ProviderEvent.PROVIDER_CONFIGURATION_CHANGED, sdk_handler)


@pytest.mark.services
def test_provider_threads_end_on_shutdown(unleash_service, make_client):
    """UnleashClient runs an APScheduler BackgroundScheduler (thread "APScheduler", the poll on a
    ThreadPoolExecutor of its own) and an event dispatcher thread (started by the first event);
    the provider's shutdown (api.shutdown) ends them all. The SDK's own event thread
    ("openfeature-event-handler_*", a daemon) stays for the process."""
    before = set(threading.enumerate())
    unleash_service.create_flag("dsv41.smoke_threads")
    _, provider = make_client("a")
    wait_until(sees(provider, "dsv41.smoke_threads"), "the client receives the flag")
    started = {t for t in set(threading.enumerate()) - before
               if not t.name.startswith("openfeature-event-handler")}
    assert {"APScheduler", "UnleashEventDispatcher"} <= {t.name for t in started}
    api.shutdown()
    wait_until(lambda: not any(t.is_alive() for t in started), "the client's threads end",
               timeout_s=10.0)


@pytest.mark.services
def test_admin_api_errors_name_the_request(unleash_service):
    unleash_service.create_flag("dsv41.smoke_twice")
    with pytest.raises(AdminApiError) as err:
        unleash_service.create_flag("dsv41.smoke_twice")
    assert err.value.status == 409 and err.value.method == "POST"
    with pytest.raises(AdminApiError) as err:
        unleash_service.flag("dsv41.no_such_flag")
    assert err.value.status == 404


def test_installation_is_none_before_the_install_step(tmp_path):
    assert Installation.load(tmp_path) is None


def test_constraint_and_variant_shapes():
    assert constraint("cluster", "IN", ["canary"]) == {
        "contextName": "cluster", "operator": "IN", "values": ["canary"], "inverted": False,
        "caseInsensitive": False}
    assert constraint("version", "SEMVER_GT", ["1.2.0"])["value"] == "1.2.0"
    with pytest.raises(ValueError):
        constraint("n", "NUM_GT", ["1", "2"])
    assert variant("v", {"a": 1})["payload"] == {"type": "json", "value": '{"a": 1}'}
    assert variant("v", "x", weight=500)["weightType"] == "fix"


@pytest.mark.services
def test_the_frameworks_provider_reads_a_real_unleash_through_its_answer_cap(unleash_service):
    """``fleet_providers.UnleashFleetProvider`` (streamed, capped answers: ``CappedBody``) reads
    the real server's flag definitions, and sees a change after one poll."""
    from dsv41_flags.fleet_providers import UnleashFleetProvider
    from dsv41_flags.fleet_settings import FleetSettings

    unleash_service.create_flag("dsv41.capped", type="kill-switch")
    unleash_service.set_enabled("dsv41.capped", "development", True)
    settings = FleetSettings(provider="unleash", url=unleash_service.url, poll_interval_s=1,
                             environment="development")
    provider = UnleashFleetProvider(settings, unleash_service.client_token("development"))
    provider.initialize()
    try:
        wait_until(lambda: provider.resolve_boolean_details("dsv41.capped", False).value,
                   "the provider reads the flag on")
        assert provider.refusal() == "" and provider.unreachable() == ""
        unleash_service.set_enabled("dsv41.capped", "development", False)
        wait_until(lambda: not provider.resolve_boolean_details("dsv41.capped", True).value,
                   "the provider reads the flag off")
    finally:
        provider.shutdown()
