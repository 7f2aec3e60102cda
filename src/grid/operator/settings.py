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
DEFAULT_SIGNALS_BIND = "0.0.0.0:7947"


@dataclass(frozen=True)
class OperatorSettings:
    """What one ``grid operator`` process needs to know."""

    site: str
    """This operator's site: the GridSite it speaks for and the SWIM member name."""
    store: str = DEFAULT_STORE
    """Resource store URL: ``sqlite:PATH`` (embedded) or ``kubernetes``."""
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
    signals_bind: str = DEFAULT_SIGNALS_BIND
    """``host:port`` of the mTLS signals listener, bound only under
    ``signalTransport.mode: poll``. Peers poll a site at its SWIM-advertised host and
    this port (port 0 picks a free one; the bound port is advertised to peers)."""
    cert_check_interval_s: float = 5.0
    """Seconds between checks of the site certificate files for rotation (spiffe
    trust only). Shorter picks up a renewed SVID sooner at the cost of a file read."""
    signals_poll_interval_s: float = 2.0
    """Seconds between polls of each peer's signals under poll. Shorter spreads load
    changes faster at the cost of one request per peer per interval."""
    ingest_feedback: bool = True
    """Serve ``POST /v1/site/signals/ingest`` under poll. Off (``--no-ingest-feedback``)
    the POST is refused 405 and nothing is acknowledged, as by an operator without
    feedback; GET polling keeps working either way."""
    feedback_reporter_capacity: int = 64
    """Gateway reporters persisted per GridNetwork; a new identity past it gets 429
    ``reporter_capacity``. More admits more gateway processes but grows the status."""
    feedback_write_attempts: int = 3
    """Attempts in all of the feedback status write when the store answers 409. More
    rides out busier writers but spends more of the 5 s request budget."""
