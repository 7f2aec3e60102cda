"""The poll signal transport: serve own signals over mTLS, pull every alive peer's.

Under ``signalTransport.mode: poll`` (seed 000) the operator binds the signals
listener and keeps two published series: ``scope=site`` (its own providers'
scraped signals) and ``scope=grid`` (own plus pulled, each entry with its
origin ``site``, for the gateway to rank from). A poll loop pulls every alive
SWIM member at its SWIM-advertised host and its signals port, over keep-alive
connections, and marks the view dirty when something new arrived. A peer that
stops answering keeps its last entries until they age past
``staleCandidateTtlSeconds`` (`grid.core.routing.signals.merge_pulled`).

The declared trust is read once, at start, and both the listener and the
poller hold it; a later change restarts the process (`grid.core.signals.mode`).

A site's signals port is the grid's (7947) unless it binds another: then it
advertises the bound port in its metadata lane (`SIGNALS_PORT_LABEL`), which is
how several sites share one loopback host in ``grid demo``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client import CollectorRegistry

from grid.adapters.signals_poller import PollOutcome, SignalsPoller
from grid.adapters.signals_server import DEFAULT_SIGNALS_PORT, SignalsServer
from grid.adapters.tls_probe import client_context, server_context
from grid.core.address import parse_address
from grid.core.resources import GridNetwork, GridSite
from grid.core.routing.signals import (
    ProviderSignals,
    Published,
    SignalsDocument,
    SignalsFeed,
    SignalsScope,
    merge_pulled,
)
from grid.core.signals.connections import ListenerLimits
from grid.core.swim.members import Member, MemberState
from grid.core.trust import TrustPolicy, declared_trust

log = logging.getLogger(__name__)

SIGNALS_PORT_LABEL = "grid.praxis-proxy.io/signals-port"
"""Metadata-lane label naming a site's signals port when it is not the default."""


def leaf_der(cert_pem: Path) -> bytes:
    """The DER of the first certificate in a PEM file (the site's own leaf)."""
    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    return cert.public_bytes(Encoding.DER)


def trust_of(
    network: GridNetwork, sites: Iterable[GridSite], own_site: str, own_der: bytes
) -> TrustPolicy:
    """The trust a GridNetwork and its GridSites declare, for this site's certificate."""
    tls = network.spec.tls
    mode = tls.trust.mode if tls is not None else "pin"
    domain = tls.trust.trust_domain if tls is not None else None
    fingerprints = {
        s.name: (s.spec.trust.fingerprint_hex if s.spec.trust is not None else None)
        for s in sites
        if s.spec.grid_network_ref == network.name
    }
    return declared_trust(mode, domain, own_der, own_site, fingerprints)


def poll_targets(
    members: Iterable[Member], own_site: str, ports: Mapping[str, int]
) -> dict[str, str]:
    """``host:port`` to poll for every alive member: its SWIM host and its signals port."""
    targets = {}
    for member in members:
        if member.state is not MemberState.ALIVE or member.id == own_site:
            continue
        try:
            host, _swim_port = parse_address(member.address)
        except ValueError:
            continue
        port = ports.get(member.id, DEFAULT_SIGNALS_PORT)
        targets[member.id] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return targets


class PollTransport:
    """The signals listener, the peer poller and the two published scopes of one site."""

    def __init__(
        self,
        network: str,
        site: str,
        *,
        epoch: int,
        now: datetime,
        trust: TrustPolicy,
        tls_files: tuple[Path, Path, Path],
        registry: CollectorRegistry,
        poll_interval_s: float,
        limits: ListenerLimits | None = None,
    ) -> None:
        ca, cert, key = tls_files
        self.trust = trust
        self.site_feed = SignalsFeed(network, site, epoch, now)
        self.grid_feed = SignalsFeed(network, site, epoch, now)
        self.server = SignalsServer(
            self, server_context(ca, cert, key), lambda: self.trust, registry, limits
        )
        self.poller = SignalsPoller(client_context(ca, cert, key), lambda: self.trust, registry)
        self.poll_interval_s = poll_interval_s
        self.address: str | None = None

    def published(self, scope: SignalsScope) -> Published:
        """The document served for ``scope`` (`grid.adapters.signals_server.SignalsSource`)."""
        return self.site_feed.current if scope is SignalsScope.SITE else self.grid_feed.current

    async def start(self, bind: str) -> str:
        """Bind the signals listener; returns the bound ``host:port``."""
        host, port = parse_address(bind)
        bound_host, bound_port = await self.server.start(host, port)
        self.address = f"{bound_host}:{bound_port}"
        return self.address

    def refresh(
        self, own: Iterable[ProviderSignals], now: datetime, stale_ttl_s: float | None
    ) -> SignalsDocument:
        """Publish own entries and the merged view; returns the view to render from.

        The returned document is stamped ``now``, so freshness is judged at render
        time even while the published bytes (and their ETag) stay unchanged.
        """
        entries = list(own)
        self.site_feed.update(entries, now)
        merged = merge_pulled(entries, self.poller.documents(), now, stale_ttl_s)
        self.grid_feed.update(merged, now)
        return dataclasses.replace(self.grid_feed.current.document, generated_at=now)

    async def poll_round(self, targets: Mapping[str, str]) -> bool:
        """Poll every target once, concurrently; True when any brought a new document."""
        outcomes = await asyncio.gather(
            *(self.poller.poll(peer, address) for peer, address in sorted(targets.items()))
        )
        return any(o is PollOutcome.OK for o in outcomes)

    async def run(
        self, targets: Callable[[], Mapping[str, str]], changed: Callable[[], None]
    ) -> None:
        """Poll forever, every ``poll_interval_s``; call ``changed`` after new documents."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            if await self.poll_round(targets()):
                changed()
            await asyncio.sleep(max(0.0, self.poll_interval_s - (loop.time() - started)))

    async def stop(self) -> None:
        """Close the listener and the poller's connections."""
        await self.server.stop()
        await self.poller.close()
