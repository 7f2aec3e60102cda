"""The GridSite controller against a real mTLS egress listener on loopback.

East's operator watches the GridSite of west. West's egress is a real
`EgressListener` presenting west's dev certificate; the probe is a real mTLS
handshake with east's certificate. Each round lists the sites from the store,
as the operator does, so phases come back through the status written.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from grid.adapters.egress_listener import EgressListener
from grid.adapters.tls_probe import client_context, server_context
from grid.core.resources import API_VERSION, AUTO_DISCOVER_LABEL, GridSite
from grid.core.resources.phases import SitePhase
from grid.core.swim.members import MemberState
from grid.core.trust import fingerprint_der
from grid.operator.sites import SiteController

ALIVE = {"west": MemberState.ALIVE}


@pytest.fixture
async def egress(pki: Any) -> AsyncIterator[tuple[EgressListener, str]]:
    """West's egress stand-in on a free loopback port, and its address."""
    west = pki.sites["west"]
    listener = EgressListener(server_context(pki.ca, west.cert, west.key))
    host, port = await listener.start("127.0.0.1", 0)
    yield listener, f"{host}:{port}"
    await listener.stop()


@pytest.fixture
def controller(store: Any, pki: Any) -> SiteController:
    """East's site controller, probing with east's certificate."""
    east = pki.sites["east"]
    return SiteController(store, "east", client_context(pki.ca, east.cert, east.key))


async def add_site(
    store: Any,
    address: str | None,
    fingerprint: str,
    *,
    auto_discover: bool = True,
) -> None:
    labels = {AUTO_DISCOVER_LABEL: "true"} if auto_discover else {}
    spec: dict[str, Any] = {"gridNetworkRef": "prod", "trust": {"certFingerprint": fingerprint}}
    if address is not None:
        spec["egress"] = {"address": address, "tls": {"mode": "Mutual", "serverName": "localhost"}}
    await store.create(
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": "west", "labels": labels},
            "spec": spec,
        }
    )


async def west(store: Any) -> GridSite:
    return GridSite.model_validate(await store.get("GridSite", "west"))


async def round_(
    controller: SiteController, store: Any, members: dict[str, MemberState] = ALIVE
) -> GridSite:
    """One reconcile round over the sites as listed now; returns west as stored after it."""
    sites = [GridSite.model_validate(o) for o in await store.list("GridSite")]
    await controller.reconcile(sites, members)
    return await west(store)


async def walk_to_active(controller: SiteController, store: Any) -> list[SitePhase]:
    return [(await round_(controller, store)).phase for _ in range(3)]


async def test_the_pinned_fingerprint_walks_pending_discovered_connecting_active(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    assert (await west(store)).phase is SitePhase.PENDING
    phases = await walk_to_active(controller, store)
    assert phases == [SitePhase.DISCOVERED, SitePhase.CONNECTING, SitePhase.ACTIVE]
    site = await west(store)
    assert site.status is not None
    assert site.status.reason == "FingerprintVerified"
    assert site.status.observed_generation == site.metadata.generation
    assert controller.phases == {"west": SitePhase.ACTIVE}


async def test_a_colon_separated_pin_matches_too(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    hexed = pki.sites["west"].fingerprint
    pin = ":".join(hexed[i : i + 2] for i in range(0, len(hexed), 2))
    await add_site(store, egress[1], pin)
    assert (await walk_to_active(controller, store))[-1] is SitePhase.ACTIVE


async def test_a_wrong_fingerprint_stays_connecting_forever(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    # Central's certificate is from the same CA, so the chain verifies; only the pin differs.
    await add_site(store, egress[1], pki.sites["central"].fingerprint)
    phases = [(await round_(controller, store)).phase for _ in range(8)]
    assert phases[:2] == [SitePhase.DISCOVERED, SitePhase.CONNECTING]
    assert set(phases[2:]) == {SitePhase.CONNECTING}
    site = await west(store)
    assert site.status is not None and site.status.reason == "FingerprintMismatch"
    # Discovered, Connecting (EgressKnown), then the mismatch reason once.
    assert store.calls["patch_status", "GridSite"] == 3


async def test_without_the_auto_discover_label_a_live_member_stays_pending(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint, auto_discover=False)
    phases = [(await round_(controller, store)).phase for _ in range(4)]
    assert set(phases) == {SitePhase.PENDING}


async def test_a_member_swim_has_not_seen_stays_pending(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    for members in ({}, {"west": MemberState.DEAD}):
        assert (await round_(controller, store, members)).phase is SitePhase.PENDING


async def test_without_an_egress_address_a_discovered_site_goes_no_further(
    controller: SiteController, store: Any, pki: Any
) -> None:
    await add_site(store, None, pki.sites["west"].fingerprint)
    phases = [(await round_(controller, store)).phase for _ in range(4)]
    assert phases == [SitePhase.DISCOVERED] * 4


async def test_stopping_the_egress_moves_active_to_unreachable_and_back(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    listener, address = egress
    await add_site(store, address, pki.sites["west"].fingerprint)
    await walk_to_active(controller, store)
    await listener.stop()
    site = await round_(controller, store)
    assert site.phase is SitePhase.UNREACHABLE
    assert site.status is not None and site.status.reason == "ProbeFailed"
    assert (await round_(controller, store)).phase is SitePhase.UNREACHABLE
    # The same certificate comes back at the same address: Active again.
    host, _, port = address.rpartition(":")
    await listener.start(host, int(port))
    assert (await round_(controller, store)).phase is SitePhase.ACTIVE


async def test_a_swim_leave_moves_an_active_site_to_left(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    await walk_to_active(controller, store)
    site = await round_(controller, store, {"west": MemberState.LEFT})
    assert site.phase is SitePhase.LEFT
    assert site.status is not None and site.status.reason == "LeftMesh"
    assert (await round_(controller, store, {"west": MemberState.LEFT})).phase is SitePhase.LEFT


async def test_status_is_written_only_when_something_changed(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    await walk_to_active(controller, store)
    writes = store.calls["patch_status", "GridSite"]
    version = (await store.get("GridSite", "west"))["metadata"]["resourceVersion"]
    sites = [GridSite.model_validate(o) for o in await store.list("GridSite")]
    for _ in range(5):
        assert await controller.reconcile(sites, ALIVE) is False
    assert store.calls["patch_status", "GridSite"] == writes == 3
    assert (await store.get("GridSite", "west"))["metadata"]["resourceVersion"] == version


async def test_reconcile_reports_a_change_only_when_a_phase_moved(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    changed = []
    for _ in range(5):
        sites = [GridSite.model_validate(o) for o in await store.list("GridSite")]
        changed.append(await controller.reconcile(sites, ALIVE))
    assert changed == [True, True, True, False, False]


async def test_a_site_removed_from_the_store_is_forgotten(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    await round_(controller, store)
    assert set(controller.phases) == {"west"}
    await controller.reconcile([], ALIVE)
    assert controller.phases == {}


async def test_a_different_certificate_at_an_active_sites_egress_makes_it_unreachable(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    listener, address = egress
    await add_site(store, address, pki.sites["west"].fingerprint)
    await walk_to_active(controller, store)
    await listener.stop()
    central = pki.sites["central"]
    impostor = EgressListener(server_context(pki.ca, central.cert, central.key))
    host, _, port = address.rpartition(":")
    await impostor.start(host, int(port))
    try:
        site = await round_(controller, store)
    finally:
        await impostor.stop()
    assert site.phase is SitePhase.UNREACHABLE
    assert site.status is not None and site.status.reason == "FingerprintMismatch"


async def test_black_holed_peers_are_probed_concurrently_within_one_timeout(
    store: Any, pki: Any
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept, never answer the TLS handshake, wait for the close
        writer.close()

    hole = await asyncio.start_server(silent, "127.0.0.1", 0)
    address = f"127.0.0.1:{hole.sockets[0].getsockname()[1]}"
    names = [f"peer-{i}" for i in range(4)]
    for name in names:
        await store.create(
            {
                "apiVersion": API_VERSION,
                "kind": "GridSite",
                "metadata": {"name": name},
                "spec": {
                    "gridNetworkRef": "prod",
                    "egress": {"address": address},
                    "trust": {"certFingerprint": pki.sites["west"].fingerprint},
                },
            }
        )
        await store.patch_status("GridSite", name, {"phase": "Connecting"})
    east = pki.sites["east"]
    tls = client_context(pki.ca, east.cert, east.key)
    controller = SiteController(store, "east", tls, probe_timeout_s=0.4)
    sites = [GridSite.model_validate(o) for o in await store.list("GridSite")]
    started = time.monotonic()
    try:
        await controller.reconcile(sites, {n: MemberState.ALIVE for n in names})
    finally:
        hole.close()
        await hole.wait_closed()
    elapsed = time.monotonic() - started
    assert controller.phases == {n: SitePhase.CONNECTING for n in names}
    assert elapsed < 1.2, f"four 0.4 s probes took {elapsed:.2f} s: not concurrent"


async def add_upstream_site(store: Any, address: str, pins: list[str]) -> None:
    """West pinned the upstream way: canonicalFingerprints only."""
    await store.create(
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": "west", "labels": {AUTO_DISCOVER_LABEL: "true"}},
            "spec": {
                "gridNetworkRef": "prod",
                "trust": {"canonicalFingerprints": pins},
                "egress": {
                    "address": address,
                    "tls": {"mode": "Mutual", "serverName": "localhost"},
                },
            },
        }
    )


async def test_a_second_canonical_pin_activates_the_site(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    # Rotation: the old pin (central's certificate) first, west's new one second.
    pins = [pki.sites["central"].fingerprint, pki.sites["west"].fingerprint]
    await add_upstream_site(store, egress[1], pins)
    assert (await walk_to_active(controller, store))[-1] is SitePhase.ACTIVE
    site = await west(store)
    assert site.status is not None and site.status.reason == "FingerprintVerified"


async def test_a_certfingerprint_mismatch_is_rescued_by_a_canonical_pin(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_site(store, egress[1], pki.sites["central"].fingerprint)
    assert (await walk_to_active(controller, store))[-1] is SitePhase.CONNECTING
    obj = await store.get("GridSite", "west")
    obj["spec"]["trust"]["canonicalFingerprints"] = [pki.sites["west"].fingerprint]
    await store.replace(obj)
    assert (await round_(controller, store)).phase is SitePhase.ACTIVE


async def test_only_unlisted_pins_keep_the_site_connecting(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    pins = [pki.sites["central"].fingerprint, pki.sites["east"].fingerprint]
    await add_upstream_site(store, egress[1], pins)
    phases = [(await round_(controller, store)).phase for _ in range(4)]
    assert phases[-1] is SitePhase.CONNECTING


async def test_the_probe_fills_public_cert_pem_and_last_probe_time(
    controller: SiteController, store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    await add_upstream_site(store, egress[1], [pki.sites["west"].fingerprint])
    await walk_to_active(controller, store)
    site = await west(store)
    assert site.status is not None and site.status.last_probe_time is not None
    pem = site.status.public_cert_pem
    assert pem is not None and "PRIVATE KEY" not in pem
    assert fingerprint_der(ssl.PEM_cert_to_DER_cert(pem)) == pki.sites["west"].fingerprint
    # A steady Active site does not rewrite its status on every probe.
    writes = store.calls["patch_status", "GridSite"]
    for _ in range(3):
        await round_(controller, store)
    assert store.calls["patch_status", "GridSite"] == writes


async def test_an_active_sites_probes_resume_one_session_until_the_site_is_gone(
    store: Any, pki: Any, egress: tuple[EgressListener, str]
) -> None:
    """Each round still probes, but only the first probe makes a full handshake; a
    deleted GridSite's session is dropped."""
    from prometheus_client import CollectorRegistry

    from grid.operator.sites import SiteMetrics

    registry = CollectorRegistry()
    east = pki.sites["east"]
    controller = SiteController(
        store, "east", client_context(pki.ca, east.cert, east.key), metrics=SiteMetrics(registry)
    )
    await add_site(store, egress[1], pki.sites["west"].fingerprint)
    assert (await walk_to_active(controller, store))[-1] is SitePhase.ACTIVE
    for _ in range(8):
        assert (await round_(controller, store)).phase is SitePhase.ACTIVE

    def handshakes(kind: str) -> float | None:
        return registry.get_sample_value("grid_site_probe_handshakes_total", {"handshake": kind})

    # Nine probes (the round out of Connecting, then eight while Active): one full.
    assert (handshakes("full"), handshakes("resumed")) == (1.0, 8.0)
    assert len(controller.sessions) == 1
    await store.delete("GridSite", "west")
    await controller.reconcile([], ALIVE)
    assert len(controller.sessions) == 0
