"""The Kubernetes store and the strict API emulator: what the contract suite cannot show.

The contract suite already runs against the Kubernetes store; these tests cover
the API-server behaviours it leans on (status isolation, apply ownership,
bookmarks, 410) and the adapter's own duties (resume, retries, Events, and
keeping Secret bytes out of errors and logs).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grid.adapters.kube.lease import LeadershipLost
from grid.adapters.store.kubernetes import KubernetesStore
from grid.adapters.store.port import EventType, Expired, WatchEvent
from grid.errors import Conflict, GridError
from grid.testing.kube_api import KubeApiEmulator, connect_store
from grid.testing.poll import eventually

API = "grid.praxis-proxy.io/v1alpha1"
SECRET_VALUE = "s3cr3t-Value-never-logged"


def site(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": "grid-demo"},
    }


@pytest.fixture
async def emulator() -> AsyncIterator[KubeApiEmulator]:
    emu = KubeApiEmulator(bookmark_interval_s=0.05)
    await emu.start()
    yield emu
    await emu.stop()


@pytest.fixture
async def kube(emulator: KubeApiEmulator, tmp_path: Path) -> AsyncIterator[KubernetesStore]:
    store = await connect_store(emulator, tmp_path, event_min_interval_s=60.0)
    yield store
    await store.close()


async def raw(emulator: KubeApiEmulator, method: str, path: str, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {emulator.token}", **kwargs.pop("headers", {})}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, emulator.url + path, headers=headers, **kwargs) as resp,
    ):
        return resp.status, await resp.json()


async def take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    got: list[WatchEvent] = []

    async def collect() -> None:
        async for event in events:
            got.append(event)
            if len(got) == count:
                return

    await asyncio.wait_for(collect(), 5.0)
    return got


async def test_create_is_201_and_status_and_spec_writes_are_isolated(
    emulator: KubeApiEmulator,
) -> None:
    path = "/apis/grid.praxis-proxy.io/v1alpha1/gridsites"
    status, created = await raw(emulator, "POST", path, json={**site("east"), "status": {"x": 1}})
    assert status == 201
    assert "status" not in created
    assert created["metadata"]["generation"] == 1
    item = f"{path}/east"
    _, patched = await raw(
        emulator,
        "PATCH",
        f"{item}/status",
        json={"status": {"phase": "Pending"}, "spec": {"gridNetworkRef": "other"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched["spec"] == {"gridNetworkRef": "grid-demo"}
    assert patched["metadata"]["generation"] == 1
    put = {**patched, "spec": {"gridNetworkRef": "other"}, "status": {"phase": "Active"}}
    _, updated = await raw(emulator, "PUT", item, json=put)
    assert updated["status"] == {"phase": "Pending"}
    assert updated["metadata"]["generation"] == 2
    status, stale = await raw(emulator, "PUT", item, json=put)
    assert status == 409
    assert stale["reason"] == "Conflict"


async def test_configmaps_are_applied_by_the_grid_operator_field_manager(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "overlay", "namespace": "praxis"},
        "data": {"a": "1"},
    }
    created = await kube.create(cm)
    replaced = await kube.replace({**created, "data": {"a": "2"}})
    assert replaced["data"] == {"a": "2"}
    assert "managedFields" not in replaced["metadata"]
    (stored,) = emulator.objects_of("ConfigMap")
    managers = {(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]}
    assert managers == {("grid-operator", "Apply")}
    assert emulator.audit["patch", "", "configmaps", "praxis"] == 1
    path = "/api/v1/namespaces/praxis/configmaps/overlay?fieldManager=kubectl"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "overlay"}}
    status, answer = await raw(
        emulator,
        "PATCH",
        path,
        json={**body, "data": {"a": "3"}},
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert (status, answer["reason"]) == (409, "Conflict")
    with pytest.raises(Conflict):
        await kube.replace({**created, "data": {"a": "4"}})  # stale resourceVersion


async def test_a_dropped_watch_resumes_without_losing_or_repeating_events(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    await kube.create(site("east"))
    async with contextlib.aclosing(kube.watch("GridSite")) as events:
        (first,) = await take(events, 1)
        for phase in ("Pending", "Discovered"):
            await kube.patch_status("GridSite", "east", {"phase": phase})
        got = await take(events, 2)
        emulator.drop_watches()
        await kube.patch_status("GridSite", "east", {"phase": "Active"})
        await kube.create(site("west"))
        got += await take(events, 2)
    assert first.type is EventType.ADDED
    phases = [e.object.get("status", {}).get("phase") for e in got[:3]]
    assert phases == ["Pending", "Discovered", "Active"]
    assert (got[3].type, got[3].object["metadata"]["name"]) == (EventType.ADDED, "west")
    versions = [int(e.resource_version) for e in [first, *got]]
    assert versions == sorted(set(versions))


async def test_bookmarks_carry_a_quiet_watch_past_compaction_and_a_gap_is_expired(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    await kube.create(site("east"))
    async with contextlib.aclosing(kube.watch("GridSite")) as events:
        await take(events, 1)
        waiter = asyncio.ensure_future(take(events, 1))  # keeps the stream open
        await kube.create({**site("net"), "kind": "GridNetwork", "spec": {"region": "eu"}})
        rv = emulator._rv
        # A bookmark moves the quiet GridSite watch past the GridNetwork write.
        await eventually(lambda: emulator.bookmarked_rv >= rv, "a bookmark past the write")
        emulator.compact()
        emulator.drop_watches()
        await kube.patch_status("GridSite", "east", {"phase": "Pending"})
        (event,) = await waiter
    assert int(event.resource_version) > rv
    with pytest.raises(Expired):
        async with contextlib.aclosing(kube.watch("GridSite", "1")) as stale:
            await take(stale, 1)


async def test_429_and_5xx_are_retried_and_a_persistent_failure_is_a_grid_error(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    await kube.create(site("east"))
    emulator.fail_next(429, 503, 500)
    assert (await kube.get("GridSite", "east"))["metadata"]["name"] == "east"
    emulator.fail_next(*([500] * 10))
    with pytest.raises(GridError) as failed:
        await kube.get("GridSite", "east")
    assert failed.value.code == "store_unavailable"
    emulator._failures.clear()
    emulator.fail_next(403)
    with pytest.raises(GridError) as forbidden:
        await kube.list("GridSite")
    assert forbidden.value.code == "forbidden"


async def test_secret_bytes_reach_no_log_and_no_error(
    kube: KubernetesStore, emulator: KubeApiEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "swim", "namespace": "grid"},
        "stringData": {"key": SECRET_VALUE},
    }
    await kube.create(secret)
    got = await kube.get("Secret", "swim", namespace="grid")
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    assert got["data"] == {"key": encoded}
    await kube.list("Secret")
    errors = []
    for code in (422, 409, 500):
        emulator.fail_next(*([code] * 10))
        with pytest.raises(GridError) as failed:
            await kube.get("Secret", "swim", namespace="grid")
        errors.append(str(failed.value))
        emulator._failures.clear()
    text = caplog.text + "".join(errors)
    assert SECRET_VALUE not in text
    assert encoded not in text


async def test_a_phase_change_is_an_event_throttled_per_object(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    await kube.create(site("east"))
    await kube.patch_status("GridSite", "east", {"phase": "Pending"})
    await kube.patch_status("GridSite", "east", {"phase": "Pending", "x": 1})
    await kube.patch_status("GridSite", "east", {"phase": "Active"})  # inside the gap
    (event,) = emulator.objects_of("Event")
    assert event["involvedObject"]["name"] == "east"
    assert event["reason"] == "PhaseChanged"
    assert event["message"] == "phase unset -> Pending"
    assert event["metadata"]["namespace"] == "default"


async def test_the_write_guard_fences_every_attempt_and_the_phase_event(
    kube: KubernetesStore, emulator: KubeApiEmulator
) -> None:
    await kube.create(site("east"))
    calls: list[int] = []

    def lapses_after_first_attempt() -> None:
        calls.append(emulator.requests)
        if len(calls) > 2:  # the write's own check and its first attempt pass
            raise LeadershipLost("not the leader")

    kube.write_guard = lapses_after_first_attempt
    emulator.fail_next(503)
    before = len(emulator.writes)
    with pytest.raises(LeadershipLost):
        await kube.patch_status("GridSite", "east", {"phase": "Pending"})
    # The first attempt reached the server (503); the retry was refused before it left.
    assert len(calls) == 3 and calls[2] == calls[1] + 1
    assert emulator.writes[before:] == []
    kube.write_guard = None
    await kube.create(site("west"))
    fenced = 0

    def refuse_events() -> None:
        nonlocal fenced
        fenced += 1
        if fenced > 2:  # the patch's own check and attempt pass; the Event's does not
            raise LeadershipLost("not the leader")

    kube.write_guard = refuse_events
    await kube.patch_status("GridSite", "west", {"phase": "Pending"})
    assert emulator.objects_of("Event") == []
    assert fenced == 3


async def test_a_wrong_token_is_refused(emulator: KubeApiEmulator, tmp_path: Path) -> None:
    emulator.token = "rotated"
    store = await connect_store(KubeApiEmulator(), tmp_path)
    store.client._api.configuration.host = emulator.url
    try:
        with pytest.raises(GridError) as refused:
            await store.list("GridSite")
        assert refused.value.code == "forbidden"
    finally:
        await store.close()


async def test_configuration_prefers_the_flag_then_kubeconfig_then_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, emulator: KubeApiEmulator
) -> None:
    from grid.adapters.kube import client

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("in-cluster-token")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(client, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    in_cluster = await client.load_configuration()
    assert in_cluster.host == "https://10.96.0.1:443"
    assert in_cluster.ssl_ca_cert == str(account / "ca.crt")
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(emulator.kubeconfig()))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert (await client.load_configuration()).host == emulator.url
    other = tmp_path / "other.yaml"
    other.write_text(kubeconfig.read_text().replace(emulator.url, "http://127.0.0.1:1"))
    assert (await client.load_configuration(other)).host == "http://127.0.0.1:1"
