"""The InferenceProvider controller against real in-process mock providers.

Each test starts a mock vLLM server on a free loopback port, declares an
InferenceProvider for it in the in-memory store, and lets the controller's
check loop run every 50 ms (the refresh cap) with 250 ms check timeouts.
Conditions are polled with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from grid.core.crdt.record import ProviderRecord
from grid.core.resources import API_VERSION, SITE_LABEL, InferenceProvider
from grid.core.resources.lifecycle import ProviderObservation
from grid.core.resources.phases import ProviderPhase
from grid.demo.mock_provider import KV_BASELINE, MockProvider, MockSettings
from grid.operator.providers import (
    ProviderController,
    phase_reason,
    record_health,
)
from grid.operator.schedule import provider_jobs
from grid.testing.poll import eventually

MODEL = "llama"
PACE = "250ms"


class Records:
    """Collects what the controller reports, per provider, in order."""

    def __init__(self) -> None:
        self.seen: dict[str, list[ProviderRecord | None]] = {}

    def __call__(self, name: str, record: ProviderRecord | None) -> None:
        self.seen.setdefault(name, []).append(record)

    def last(self, name: str) -> ProviderRecord | None:
        return self.seen.get(name, [None])[-1]


@pytest.fixture
async def mock() -> AsyncIterator[tuple[MockProvider, str]]:
    """A steady mock provider and its base URL."""
    provider = MockProvider(MockSettings(model=MODEL, profile="steady"))
    host, port = await provider.start()
    yield provider, f"http://{host}:{port}"
    await provider.stop()


@pytest.fixture
async def controller(store: Any) -> AsyncIterator[tuple[ProviderController, Records]]:
    """East's provider controller, re-publishing every 50 ms at most."""
    records = Records()
    ctl = ProviderController(store, "east", records, refresh_s=0.05)
    await ctl.start()
    yield ctl, records
    await ctl.stop()


def provider_doc(name: str, endpoint: str | None, *, checks: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "gridNetworkRef": "prod",
        "backendKind": "local",
        "providerKind": "self_hosted",
        "models": [{"name": MODEL}],
        "cost": {"perMillionInputTokens": 0.5},
    }
    if endpoint is not None:
        spec["endpoint"] = endpoint
    if checks:
        spec["healthCheck"] = {"path": "/health", "interval": PACE, "timeout": PACE}
        spec["metricsConfig"] = {
            "path": "/metrics",
            "interval": PACE,
            "timeout": PACE,
            "queueCapacity": 16,
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": name, "labels": {SITE_LABEL: "east"}},
        "spec": spec,
    }


async def declare(store: Any, doc: dict[str, Any]) -> InferenceProvider:
    return InferenceProvider.model_validate(await store.create(doc))


async def phase(store: Any, name: str) -> str | None:
    obj = await store.get("InferenceProvider", name)
    return obj.get("status", {}).get("phase")


class PhaseLog:
    """Every phase the controller wrote for a provider, in order (from store writes)."""

    def __init__(self, store: Any) -> None:
        self.phases: list[str] = []
        original = store.patch_status

        async def patch_status(kind: str, name: str, status: Any, *a: Any, **kw: Any) -> Any:
            if kind == "InferenceProvider" and "phase" in status:
                self.phases.append(status["phase"])
            return await original(kind, name, status, *a, **kw)

        store.patch_status = patch_status


async def test_a_healthy_provider_becomes_available_with_its_scraped_signals(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    ctl, records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", mock[1]))])

    async def available() -> bool:
        return await phase(store, "vllm-east") == "Available"

    def published_available() -> bool:
        r = records.last("vllm-east")
        return r is not None and r.phase == "Available"

    await eventually(available, "provider Available")
    await eventually(published_available, "an Available record")
    record = records.last("vllm-east")
    assert record is not None
    assert (record.name, record.site, record.cluster) == ("vllm-east", "east", "vllm-east")
    assert record.models == (MODEL,)
    assert record.healthy is True
    # An idle server has no queue (present and zero, not missing) and its baseline KV use.
    assert record.signals.queue_depth == 0.0
    assert record.signals.kv_cache_utilization == KV_BASELINE
    # No prompt was ever looked up and no request finished: missing, never zero.
    assert record.signals.prefix_cache_hit_ratio is None
    assert record.signals.p99_latency_ms is None
    assert record.signals.cost_per_million_input_tokens == 0.5
    obj = await store.get("InferenceProvider", "vllm-east")
    assert obj["status"]["reason"] == "Healthy"


async def test_load_on_the_provider_shows_in_the_record(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    server, url = mock
    ctl, records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", url))])
    await asyncio.gather(*(server.serve_one("hello grid, a shared prefix " * 4) for _ in range(3)))

    def loaded() -> bool:
        r = records.last("vllm-east")
        return r is not None and r.signals.p99_latency_ms is not None

    await eventually(loaded, "a p99 latency from the served requests")
    record = records.last("vllm-east")
    assert record is not None and record.signals.p99_latency_ms is not None
    assert record.signals.p99_latency_ms > 0
    assert record.signals.prefix_cache_hit_ratio is not None


async def test_a_failing_health_check_degrades_then_makes_the_provider_unavailable(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    server, url = mock
    log = PhaseLog(store)
    ctl, records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", url))])

    async def is_(wanted: str) -> bool:
        return await phase(store, "vllm-east") == wanted

    await eventually(lambda: is_("Available"), "Available")
    server.settings = dataclasses.replace(server.settings, profile="failing")
    await eventually(lambda: is_("Unavailable"), "Unavailable")
    assert log.phases == ["Available", "Degraded", "Unavailable"]
    obj = await store.get("InferenceProvider", "vllm-east")
    assert obj["status"]["reason"] == "HealthCheckFailing"

    def unhealthy_record() -> bool:
        r = records.last("vllm-east")
        return r is not None and r.phase == "Unavailable"

    await eventually(unhealthy_record, "an Unavailable record")
    record = records.last("vllm-east")
    assert record is not None and record.healthy is False
    # While only Degraded (one failure) the provider stays routable: not healthy False.
    degraded = [r for r in records.seen["vllm-east"] if r is not None and r.phase == "Degraded"]
    assert degraded and all(r.healthy is not False for r in degraded)


async def test_a_provider_failing_from_the_start_stays_pending_and_unhealthy(
    store: Any, controller: Any
) -> None:
    server = MockProvider(MockSettings(model=MODEL, profile="failing"))
    host, port = await server.start()
    try:
        ctl, records = controller
        ctl.sync([await declare(store, provider_doc("vllm-east", f"http://{host}:{port}"))])
        await eventually(lambda: len(records.seen.get("vllm-east", [])) >= 3, "three rounds")
    finally:
        await server.stop()
    obj = await store.get("InferenceProvider", "vllm-east")
    assert (obj["status"]["phase"], obj["status"]["reason"]) == ("Pending", "HealthCheckFailing")
    assert store.calls["patch_status", "InferenceProvider"] == 1
    record = records.last("vllm-east")
    assert record is not None and record.healthy is False and record.phase == "Pending"


async def test_a_failing_scrape_without_a_health_check_degrades_for_metrics(
    store: Any, controller: Any
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: every scrape fails to connect
    doc = provider_doc("vllm-east", f"http://127.0.0.1:{port}")
    del doc["spec"]["healthCheck"]
    ctl, records = controller
    ctl.sync([await declare(store, doc)])

    async def degraded() -> bool:
        return await phase(store, "vllm-east") == "Degraded"

    await eventually(degraded, "Degraded")
    obj = await store.get("InferenceProvider", "vllm-east")
    assert obj["status"]["reason"] == "MetricsFailing"
    record = records.last("vllm-east")
    assert record is not None and record.healthy is None


@pytest.mark.parametrize(
    ("phase_", "health_ok", "metric_healthy", "healthy"),
    [
        (ProviderPhase.AVAILABLE, True, None, True),
        (ProviderPhase.AVAILABLE, None, None, None),
        (ProviderPhase.AVAILABLE, True, False, False),
        (ProviderPhase.DEGRADED, False, None, None),
        (ProviderPhase.DEGRADED, False, True, True),
        (ProviderPhase.PENDING, False, True, False),
        (ProviderPhase.UNAVAILABLE, True, True, False),
    ],
)
def test_the_record_health_follows_the_phase(
    phase_: ProviderPhase, health_ok: bool | None, metric_healthy: bool | None, healthy: bool | None
) -> None:
    assert record_health(phase_, health_ok, metric_healthy) is healthy


@pytest.mark.parametrize(
    ("phase_", "health_ok", "reason"),
    [
        (ProviderPhase.PENDING, None, "Pending"),
        (ProviderPhase.PENDING, False, "HealthCheckFailing"),
        (ProviderPhase.AVAILABLE, True, "Healthy"),
        (ProviderPhase.DEGRADED, True, "MetricsFailing"),
        (ProviderPhase.DEGRADED, None, "MetricsFailing"),
        (ProviderPhase.DEGRADED, False, "HealthCheckFailing"),
        (ProviderPhase.UNAVAILABLE, False, "HealthCheckFailing"),
    ],
)
def test_the_status_reason_names_what_failed(
    phase_: ProviderPhase, health_ok: bool | None, reason: str
) -> None:
    assert phase_reason(phase_, ProviderObservation(health_ok, None)) == reason


async def test_recovery_after_failures_returns_the_provider_to_available(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    server, url = mock
    ctl, _records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", url))])

    async def is_(wanted: str) -> bool:
        return await phase(store, "vllm-east") == wanted

    await eventually(lambda: is_("Available"), "Available")
    server.settings = dataclasses.replace(server.settings, profile="failing")
    await eventually(lambda: is_("Unavailable"), "Unavailable")
    server.settings = dataclasses.replace(server.settings, profile="steady")
    await eventually(lambda: is_("Available"), "Available again")


async def test_a_provider_without_checks_is_never_contacted_and_is_available(
    store: Any, controller: Any
) -> None:
    connections = 0

    async def count(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    listener = await asyncio.start_server(count, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        ctl, records = controller
        doc = provider_doc("openai", f"http://127.0.0.1:{port}", checks=False)
        ctl.sync([await declare(store, doc)])
        await eventually(lambda: len(records.seen.get("openai", [])) >= 3, "three rounds")
    finally:
        listener.close()
        await listener.wait_closed()
    assert connections == 0
    assert await phase(store, "openai") == "Available"
    record = records.last("openai")
    assert record is not None and record.healthy is None
    assert record.signals.queue_depth is None
    assert record.signals.cost_per_million_input_tokens == 0.5


async def test_status_is_written_once_per_phase_change_not_every_round(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    ctl, records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", mock[1]))])
    await eventually(lambda: len(records.seen.get("vllm-east", [])) >= 5, "five rounds")
    assert store.calls["patch_status", "InferenceProvider"] == 1


async def test_removing_a_provider_stops_its_loop_and_withdraws_its_record(
    store: Any, mock: tuple[MockProvider, str], controller: Any
) -> None:
    ctl, records = controller
    ctl.sync([await declare(store, provider_doc("vllm-east", mock[1]))])
    await eventually(lambda: records.last("vllm-east") is not None, "a first record")
    (loop,) = [t for t in asyncio.all_tasks() if t.get_name() == "provider-vllm-east"]
    ctl.sync([])
    assert records.seen["vllm-east"][-1] is None
    assert ctl.names == set()
    await asyncio.wait([loop], timeout=5)
    assert loop.cancelled()


def test_each_declared_check_is_its_own_job_beside_the_refresh() -> None:
    with_checks = InferenceProvider.model_validate(provider_doc("p", "http://127.0.0.1:1"))
    without = InferenceProvider.model_validate(provider_doc("p", None, checks=False))
    jobs = {j.name: (j.interval_s, j.timeout_s) for j in provider_jobs(with_checks, 5.0)}
    assert set(jobs) == {"health", "scrape", "publish"}
    assert jobs["publish"] == (5.0, 5.0)
    assert [j.name for j in provider_jobs(without, 5.0)] == ["publish"]


def _with_secret_ref(doc: dict[str, Any]) -> dict[str, Any]:
    ref = {"name": "openai-credentials", "namespace": "grid-system", "key": "token"}
    doc["spec"]["auth"] = {"strategy": "BearerToken", "secretRef": ref}
    return doc


async def _credential_condition(store: Any, name: str) -> tuple[str, str] | None:
    obj = await store.get("InferenceProvider", name)
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == "CredentialsResolved":
            return c["status"], c["reason"]
    return None


async def test_a_missing_credential_secret_keeps_the_provider_out_of_routing(
    store: Any, controller: Any
) -> None:
    ctl, records = controller
    doc = _with_secret_ref(provider_doc("openai", None, checks=False))
    ctl.sync([await declare(store, doc)])
    await eventually(lambda: records.last("openai") is not None, "a record")
    assert await _credential_condition(store, "openai") == ("False", "SecretNotFound")
    assert not ctl.credentials_ok("openai")
    record = records.last("openai")
    assert record is not None and record.healthy is False

    await store.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "openai-credentials", "namespace": "grid-system"},
            "data": {"other": "eA=="},
        }
    )

    async def key_missing() -> bool:
        return await _credential_condition(store, "openai") == ("False", "SecretKeyMissing")

    await eventually(key_missing, "the key is reported missing")
    secret = await store.get("Secret", "openai-credentials", namespace="grid-system")
    secret["data"] = {"token": "dG9rZW4="}
    await store.replace(secret)

    async def resolved() -> bool:
        return await _credential_condition(store, "openai") == ("True", "SecretFound")

    await eventually(resolved, "the credential resolves")
    await eventually(lambda: ctl.credentials_ok("openai"), "the provider is routable")
    await eventually(
        lambda: (r := records.last("openai")) is not None and r.healthy is None, "healthy again"
    )
