"""Limits of ``grid gateway``, each a named setting with its unit and trade-off.

The listener limits (header deadline, idle keep-alive, connection cap) are a
`ListenerPolicy` of the one listener every Grid HTTP server uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from grid.adapters.http_listener import ListenerPolicy
from grid.core.metering.bounds import PROMPT_ALLOWANCE, TOKENS_CEILING
from grid.gateway.feedback import ReporterSettings

LISTENER_POLICY = ListenerPolicy(
    header_read_timeout_s=10.0,
    idle_timeout_s=60.0,
    connections_max=1024,
    evict_unsettled=True,
    refused_linger_bytes_max=8 * 1024 * 1024,
    refused_linger_s=2.0,
)
"""The public and admin listeners' policy (`grid.adapters.http_listener`): a request
head within 10 s, idle keep-alive connections closed after 60 s, at most 1,024
connections (fewer when the descriptor limit is lower, `grid.gateway.descriptors`), and
when full the oldest connection that has not sent a complete head is evicted for a new
one. A refused body is answered first, then up to 8 MiB or 2 s more of it is read and
dropped behind a FIN, so an OpenAI client still uploading reads its 413. A proxy holds
many client connections at once, hence the larger cap; clients of long generations keep
connections alive between requests, hence the longer idle time."""


_PLAIN_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")
_RESERVED = ("/v1/", "/v1", "/a2a")


@dataclass(frozen=True)
class GatewaySettings:
    """Every limit of the routing gateway; defaults are the spec's values."""

    body_max_bytes: int = 4 * 1024 * 1024
    """Largest accepted request body (413 beyond). Chat requests with long contexts
    need megabytes; each in-flight request may hold this much memory."""
    model_max_chars: int = 256
    """Longest accepted model name (400 beyond), the overlay's name limit."""
    connect_timeout_s: float = 5.0
    """Seconds to connect (and handshake) to a cluster before failing over."""
    read_timeout_s: float = 300.0
    """Most seconds between two reads from a cluster (first byte included). Long
    generations stream slowly; a dead cluster is detected only after this."""
    upstream_connections_max: int = 256
    """Pooled connections per cluster at most; more requests wait for one."""
    error_body_max_bytes: int = 64 * 1024
    """Longest error body (status 400 and up) relayed from a cluster; it is read whole
    to mask the credential, so a longer one is cut here (an error needs no more)."""
    buffer_max_bytes: int = 1024 * 1024
    """Responses with a declared length up to this are relayed in one write;
    longer or unsized ones stream chunk by chunk."""
    affinity_ttl_s: float = 3600.0
    """Seconds a session binding (``x-grid-session``) lives after its last use."""
    affinity_max: int = 10_000
    """Session bindings at most; the least recently used is dropped beyond it."""
    session_max_chars: int = 256
    """Longest ``x-grid-session`` value that is bound; longer ones are not bound."""
    failover_max: int = 2
    """Further candidates tried after the first fails before any byte was sent."""
    config_max_bytes: int = 1024 * 1024
    """Largest accepted praxis.yaml."""
    overlay_max_bytes: int = 16 * 1024 * 1024
    """Largest accepted overlay file (1,024 candidates fit with room to spare)."""
    overlay_poll_interval_s: float = 1.0
    """Seconds between checks of the overlay file for a change."""
    signals_poll_interval_s: float = 1.0
    """Seconds between polls of the operator's signals (poll mode). Shorter follows
    load sooner; each poll costs a request (a 304 when nothing changed)."""
    signals_timeout_s: float = 2.0
    """Seconds one signals poll may take, connect and handshake included."""
    signals_backoff_max_s: float = 30.0
    """Longest wait between polls while the operator keeps failing (doubling from the
    interval, jittered). Longer spares a struggling operator; shorter recovers sooner."""
    signals_body_max_bytes: int = 4 * 1024 * 1024
    """Largest signals document accepted; a poll may buffer this much."""
    signals_keepalive_s: float = 30.0
    """Seconds the idle connection to the operator is kept for the next poll; must stay
    under the operator's idle timeout."""
    feedback: ReporterSettings = field(default_factory=ReporterSettings)
    """The ingest-feedback reporter's retry limits (poll mode; `grid.gateway.feedback`)."""
    feedback_replica: str = "gateway"
    """The replica label of feedback reports (diagnostic only, a DNS label)."""
    feedback_enabled: bool = True
    """Whether this process reports its ingests (poll mode). Under ``--workers`` only the
    first worker does: every worker ingests the same files and documents, and one
    reporter per gateway keeps §7's evidence from being sent twice under two epochs."""
    reuse_port: bool = False
    """Bind the public listener with ``SO_REUSEPORT``: set in each ``--workers`` worker,
    so they share the port and the kernel spreads new connections among them."""
    tenant_header: str = "x-grid-tenant"
    """The request header naming the tenant whose budget a request spends (§12)."""
    mcp_path: str = "/mcp"
    """Where the public listener serves MCP (§16), an absolute path of plain segments.
    Tool providers are still reached at ``/mcp`` of their cluster (the SDK's default)."""
    budgets_file: str | None = None
    """The budget view (grid-budgets.json) to enforce; None means the file of that name
    beside the overlay file, and no budgets at all in inline mode."""
    state_dir: str | None = None
    """Where a graceful stop saves the tenant token counters for the next start; None
    keeps them in memory only (a restart then reads as a counter reset)."""
    body_grace_s: float = 10.0
    """Seconds a request body may take before `body_min_rate_bytes_s` applies
    (`grid.gateway.body`): time for a slow start."""
    body_min_rate_bytes_s: float = 64 * 1024
    """Bytes per second a body must average after the grace (408 ``body_timeout`` when
    it falls behind). Lower admits slower links; every slow body holds a connection and
    the bytes it sent."""
    body_timeout_s: float = 60.0
    """Seconds the whole body may take at most, whatever its rate."""
    write_timeout_s: float = 30.0
    """Seconds one write to a client may wait for it to read; a client that stops
    reading a stream is cut after this, freeing the cluster's pooled connection."""
    pool_acquire_timeout_s: float = 10.0
    """Seconds a request may wait for a pooled connection to a cluster (and connect)
    before failing over; bounds the wait when a cluster's pool is full."""
    upstream_request_max_s: float = 3600.0
    """Seconds one request may hold a pooled connection to a cluster, streaming
    included; no pooled connection is held without bound."""
    usage_tokens_max: int = TOKENS_CEILING
    """Most tokens one answer is billed (`grid.core.metering.bounds`); a request's own
    ``max_tokens`` plus a prompt estimate bounds it lower. Reported usage above the bound
    is counted as implausible and billed at the bound."""
    usage_prompt_allowance_tokens: int = PROMPT_ALLOWANCE
    """Prompt tokens believed beyond the request body's bytes (template, images by URL)."""
    listener: ListenerPolicy = LISTENER_POLICY

    def __post_init__(self) -> None:
        path = self.mcp_path
        dots = {".", ".."} & set(path.split("/"))
        if not _PLAIN_PATH.match(path) or dots or path.startswith(_RESERVED):
            raise ValueError(
                "mcp_path must be an absolute path of plain segments outside /v1/ and /a2a/"
            )

    @property
    def body_pace(self) -> tuple[float, float, float]:
        """(grace, minimum rate, timeout) for `grid.gateway.body.read_body`."""
        return self.body_grace_s, self.body_min_rate_bytes_s, self.body_timeout_s

    @property
    def usage_limits(self) -> tuple[int, int]:
        """(``usage_tokens_max``, ``usage_prompt_allowance_tokens``) for `usage_bound`."""
        return self.usage_tokens_max, self.usage_prompt_allowance_tokens
