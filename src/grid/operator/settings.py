"""Settings of one site operator, each with its default, unit and trade-off.

Every setting has a ``grid operator`` flag and a ``GRID_*`` environment
fallback (flag > environment > default); docs/operator.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_STORE = "sqlite:.grid/store.db"
DEFAULT_SWIM_BIND = "0.0.0.0:7946"
DEFAULT_METRICS_BIND = "0.0.0.0:9090"


@dataclass(frozen=True)
class OperatorSettings:
    """What one ``grid operator`` process needs to know."""

    site: str
    """This operator's site: the GridSite it speaks for and the SWIM member name."""
    store: str = DEFAULT_STORE
    """Resource store URL: ``sqlite:PATH`` (embedded) or ``kubernetes``."""
    kubeconfig: Path | None = None
    """Kubeconfig for ``--store kubernetes``; absent means ``KUBECONFIG``, then the
    in-cluster service account, then ``~/.kube/config``."""
    network: str | None = None
    """The GridNetwork to serve; absent means the only one in the store."""
    swim_bind: str = DEFAULT_SWIM_BIND
    """UDP and TCP ``host:port`` for SWIM and push-pull (port 0 picks a free one)."""
    swim_advertise: str | None = None
    """The address peers use to reach this node; absent means the bound address."""
    swim_key_file: Path | None = None
    """32-byte SWIM key file, used when the GridNetwork's swimKeyRef Secret is absent."""
    metrics_bind: str = DEFAULT_METRICS_BIND
    """``host:port`` for /metrics, /healthz and /readyz."""
    overlay_dir: Path | None = None
    """Directory for grid-config.json and grid-overlay.json (embedded default)."""
    ca: Path | None = None
    """PEM of the grid CA that signs site certificates."""
    cert: Path | None = None
    """PEM of this site's certificate (presented on probes and at the egress)."""
    key: Path | None = None
    """PEM of this site's private key."""
    egress_bind: str | None = None
    """Serve an mTLS egress stand-in presenting the site certificate here (embedded)."""
    record_refresh_s: float = 5.0
    """How often own provider records are re-published even when unchanged. It must
    stay well below peers' staleCandidateTtlSeconds or they evict our candidates."""
    site_probe_interval_s: float = 2.0
    """Seconds between GridSite reconciles (SWIM view, egress mTLS probes)."""
    render_interval_s: float = 1.0
    """Upper bound on seconds between renders; changes render sooner. Time-driven
    rules (freshness, stale-candidate eviction) take effect within this bound."""
    shutdown_timeout_s: float = 5.0
    """Budget for a graceful stop: leave the mesh, finish writes, close the store."""
    leader_election: bool = False
    """Run as one of several replicas: only the holder of the Lease reconciles,
    gossips and binds the SWIM port (``--store kubernetes`` only)."""
    lease_name: str | None = None
    """The Lease's name; absent means ``grid-operator-{site}``. It lives in
    ``POD_NAMESPACE`` (``default`` without it)."""
    lease_duration_s: float = 15.0
    """Seconds a follower waits after the Lease last changed before taking it over."""
    renew_deadline_s: float = 10.0
    """Seconds a leader keeps leading without a successful renewal (< lease duration)."""
    retry_period_s: float = 2.0
    """Seconds between renewals and between a follower's attempts (< renew deadline)."""
