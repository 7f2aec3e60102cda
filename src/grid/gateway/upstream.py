"""Connections to clusters: one pooled HTTP client per cluster, mTLS where declared.

A ``mutual_tls`` cluster is reached over HTTPS: the gateway presents the
certificate at ``client_cert`` and verifies the cluster's against ``ca`` with
``sni`` as the expected server name. A ``plaintext`` cluster is plain HTTP.
Endpoints of one cluster are used in turn.
"""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Iterator, Mapping

import aiohttp

from grid.gateway.config import Cluster
from grid.gateway.settings import GatewaySettings


def client_tls(cluster: Cluster) -> ssl.SSLContext:
    """The client context of a mutual_tls cluster (verify unless told otherwise)."""
    assert cluster.tls is not None
    tls = cluster.tls
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_path)
    context.load_cert_chain(tls.cert_path, tls.key_path)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Upstream:
    """One cluster's client: base URLs in turn, TLS settings and the pool."""

    def __init__(self, cluster: Cluster, settings: GatewaySettings) -> None:
        self.cluster = cluster
        self.tls = client_tls(cluster) if cluster.tls is not None else None
        self.server_hostname = cluster.tls.sni if cluster.tls is not None else None
        scheme = "https" if self.tls is not None else "http"
        self._bases: Iterator[str] = itertools.cycle([f"{scheme}://{e}" for e in cluster.endpoints])
        self._settings = settings
        self.session: aiohttp.ClientSession | None = None

    def open(self) -> aiohttp.ClientSession:
        """The pooled session (created on first use, inside the running loop)."""
        if self.session is None:
            s = self._settings
            connector = aiohttp.TCPConnector(
                limit=s.upstream_connections_max,
                ssl=self.tls if self.tls is not None else False,
                enable_cleanup_closed=False,
            )
            self.session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=s.upstream_request_max_s,
                    # Waiting for a pooled connection and connecting, together.
                    connect=s.pool_acquire_timeout_s,
                    sock_connect=s.connect_timeout_s,
                    sock_read=s.read_timeout_s,
                ),
                # Bodies are relayed as the cluster encoded them; `Proxy` asks for
                # identity when the client named no encoding. (`skip_auto_headers`
                # would put aiohttp on a slower header path on every request.)
                auto_decompress=False,
                # A proxy keeps no cookies: a cluster's Set-Cookie goes to the client
                # that caused it, never into another client's request.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self.session

    def next_base(self) -> str:
        """The next endpoint's base URL."""
        return next(self._bases)

    async def close(self) -> None:
        """Close the pool."""
        if self.session is not None:
            await self.session.close()
            self.session = None


def upstreams(clusters: Mapping[str, Cluster], settings: GatewaySettings) -> dict[str, Upstream]:
    """One `Upstream` per configured cluster."""
    return {name: Upstream(cluster, settings) for name, cluster in clusters.items()}
