"""Provider scraping and health checks over HTTP.

`ProviderScraper` fetches ``metricsConfig.endpoint`` (else ``spec.endpoint``)
followed by ``metricsConfig.path``, bounded by ``metricsConfig.timeout`` and
`METRICS_BODY_MAX_BYTES`, parses the Prometheus text format
(`grid.adapters.exposition`, ``prometheus_client``'s reading), and hands the families to the pure
`grid.core.routing.metrics_mapping`. HTTPS requests use the provider's TLS context
(``metricsConfig.tls``, ``healthCheck.tls``; `grid.adapters.provider_tls`) when
one is given. It remembers the previous scrape's latency buckets so
each p99 covers the interval since the last scrape. `check_health` GETs
``healthCheck.path`` on ``spec.endpoint`` within ``healthCheck.timeout``.

URLs are the base plus the path, as written: a base of ``http://vllm:8000`` and
the path ``/metrics`` give ``http://vllm:8000/metrics``. Failures raise
`ScrapeError`, whose ``reason`` is one of `SCRAPE_FAILURE_REASONS`, so it can be a
metric label; its message never includes the response body.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
from dataclasses import dataclass

import aiohttp

from grid.adapters.exposition import read_families
from grid.core.resources.duration import parse_duration
from grid.core.resources.provider_spec import HealthCheck, MetricsConfig
from grid.core.routing.metrics_mapping import (
    Buckets,
    MetricFamily,
    ScrapedSignals,
    map_signals,
    select_pool,
    source_families,
)
from grid.errors import GridError

METRICS_BODY_MAX_BYTES = 4 * 1024 * 1024
"""Largest metrics response read. vLLM's exposition is tens of KiB; the bound keeps a
misbehaving endpoint from exhausting the operator's memory."""
READ_CHUNK_BYTES = 64 * 1024


class ScrapeFailure(enum.StrEnum):
    """Why a scrape or health check failed: a closed set, usable as a metric label."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    TOO_LARGE = "too_large"
    PARSE = "parse"


SCRAPE_FAILURE_REASONS = tuple(r.value for r in ScrapeFailure)


class ScrapeError(GridError):
    """A scrape failed; ``reason`` is a `ScrapeFailure`."""

    code = "scrape_failed"

    def __init__(self, reason: ScrapeFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def join_url(base: str, path: str) -> str:
    """``base`` without trailing slashes, then ``path`` with exactly one leading slash."""
    return base.rstrip("/") + "/" + path.lstrip("/")


def only_families(text: str, names: tuple[str, ...]) -> str:
    """The lines of ``text`` whose metric name starts with one of ``names``: samples
    (any suffix: ``_total``, ``_bucket``...) and their ``# HELP`` and ``# TYPE`` lines.

    Parsing is most of a scrape's cost, and a provider's exposition is mostly
    families Grid never reads (Python's own, a server's request counters)."""
    kept = []
    for line in text.splitlines():
        name = line.split(None, 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if name.startswith(names):
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def parse_exposition(text: str, names: tuple[str, ...] | None = None) -> list[MetricFamily]:
    """Parse the Prometheus text format into core metric families, or `ScrapeError`.

    With ``names`` only the families they start (`only_families`) are parsed; when
    none is there the whole text is, so that what is not an exposition still fails."""
    if names is not None:
        text = only_families(text, names) or text
    try:
        return read_families(text)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as exc:
        raise ScrapeError(
            ScrapeFailure.PARSE, "the metrics are not in Prometheus text format"
        ) from exc


async def fetch_text(
    session: aiohttp.ClientSession,
    url: str,
    timeout_s: float,
    max_bytes: int = METRICS_BODY_MAX_BYTES,
    tls: ssl.SSLContext | None = None,
) -> str:
    """GET a URL and return its body as text, within a deadline and a size bound.

    ``tls`` is the provider's TLS context (``metricsConfig.tls``); None keeps the
    session's default verification.
    """
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(
                url, headers={"Accept": "text/plain"}, ssl=tls if tls is not None else True
            ) as resp:
                if resp.status != 200:
                    raise ScrapeError(
                        ScrapeFailure.HTTP_STATUS, f"GET {url} answered {resp.status}"
                    )
                body = bytearray()
                async for chunk in resp.content.iter_chunked(READ_CHUNK_BYTES):
                    body.extend(chunk)
                    if len(body) > max_bytes:
                        raise ScrapeError(
                            ScrapeFailure.TOO_LARGE,
                            f"GET {url} returned more than {max_bytes} bytes",
                        )
    except TimeoutError as exc:
        raise ScrapeError(
            ScrapeFailure.TIMEOUT, f"GET {url} took longer than {timeout_s:g}s"
        ) from exc
    except (aiohttp.ClientError, ssl.SSLError) as exc:
        raise ScrapeError(ScrapeFailure.CONNECT, f"GET {url} failed: {type(exc).__name__}") from exc
    try:
        return bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(ScrapeFailure.PARSE, f"GET {url} returned non-UTF-8 metrics") from exc


class ProviderScraper:
    """Scrapes one provider's metrics, keeping the state the p99 window needs."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        config: MetricsConfig | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config or MetricsConfig()
        self.url = join_url(self.config.base_url or base_url, self.config.path)
        self.timeout_s = parse_duration(self.config.timeout)
        self.tls = tls
        self._session = session
        self._previous_buckets: Buckets | None = None
        self._families = source_families(self.config.signal_names)

    async def scrape(self) -> ScrapedSignals:
        """Fetch, parse and map once; raises `ScrapeError` on failure.

        With ``poolName`` only that pool's series count (`select_pool`).
        """
        text = await fetch_text(self._session, self.url, self.timeout_s, tls=self.tls)
        families = parse_exposition(text, self._families)
        if self.config.pool_name is not None:
            families = select_pool(families, self.config.pool_name)
        scraped = map_signals(
            families,
            self.config.signal_names,
            queue_capacity=self.config.queue_capacity,
            previous_latency_buckets=self._previous_buckets,
        )
        self._previous_buckets = scraped.latency_buckets
        return scraped


@dataclass(frozen=True)
class HealthResult:
    """The outcome of one health check: ``failure`` is None exactly when healthy."""

    healthy: bool
    status: int | None = None
    failure: ScrapeFailure | None = None


async def check_health(
    session: aiohttp.ClientSession,
    base_url: str,
    health: HealthCheck | None = None,
    tls: ssl.SSLContext | None = None,
) -> HealthResult:
    """GET the health path on ``healthCheck.endpoint`` (else ``base_url``); any 2xx
    within the timeout is healthy. ``tls`` is the context of ``healthCheck.tls``."""
    health = health or HealthCheck()
    url = join_url(health.endpoint or base_url, health.path)
    try:
        async with asyncio.timeout(parse_duration(health.timeout)):
            async with session.get(url, ssl=tls if tls is not None else True) as resp:
                await resp.read()
                status = resp.status
    except TimeoutError:
        return HealthResult(False, failure=ScrapeFailure.TIMEOUT)
    except (aiohttp.ClientError, ssl.SSLError):
        return HealthResult(False, failure=ScrapeFailure.CONNECT)
    if 200 <= status < 300:
        return HealthResult(True, status)
    return HealthResult(False, status, ScrapeFailure.HTTP_STATUS)
