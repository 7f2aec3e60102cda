"""The InferenceProvider controller: health checks, metric scrapes and phases.

For every InferenceProvider this site holds, one task runs that provider's
jobs (`grid.operator.schedule`), each on its own interval and timeout with
jitter: the health check per ``healthCheck``, the scrape per ``metricsConfig``,
and the re-publication of its record once ``record_refresh_s`` passed since the
last one was handed on. A slow endpoint only ever holds up its own job: other
jobs and other providers keep their pace. After each job, once every declared
check has run once, it:

* moves the provider's phase with `grid.core.resources.lifecycle.next_provider_phase`
  and writes status only when the phase or reason changed;
* turns what it saw into a `ProviderRecord` for the CRDT replica. A signal the
  scrape did not find stays missing; credentials are checked by reference
  elsewhere and never read here. The record's ``healthy`` follows the phase
  (`record_health`): one failed check degrades a provider without dropping it
  from routing; Unavailable, or failing before ever passing, drops it.

The provider's endpoint is only contacted when it declares a health check or a
metrics config, so third-party APIs without them are never probed. Each
provider's checks share one pooled session (`grid.adapters.probe_sessions`),
and its health check and scrape one TLS context when they declare the same
``tls``, so they reuse one kept-alive connection instead of a connect and a TLS
handshake per check; the session closes when the provider's loop ends (the
provider is deleted or its spec changed) and at `ProviderController.stop`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import aiohttp
from opentelemetry import trace
from opentelemetry.trace import Span

from grid.adapters.probe_sessions import probe_session
from grid.adapters.provider_tls import provider_ssl_context
from grid.adapters.scrape import ProviderScraper, ScrapeError, check_health
from grid.adapters.store.port import ResourceStore
from grid.adapters.tracing import OUTCOME, outcome_span
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.resources import InferenceProvider
from grid.core.resources.lifecycle import ProviderObservation, next_provider_phase
from grid.core.resources.phases import ProviderPhase
from grid.core.resources.provider_spec import ProviderTls
from grid.core.resources.status import InferenceProviderStatus
from grid.core.routing.mesh_view import record_for
from grid.core.routing.metrics_mapping import ScrapedSignals, carried_sample
from grid.errors import GridError, NotFound
from grid.operator.resilience import WriteGuard, WriteSite
from grid.operator.schedule import Job, jittered, provider_jobs, run_every

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

CREDENTIAL_CONDITION = "CredentialsResolved"
"""Condition type reporting whether the provider's auth Secret and key exist."""


@dataclass
class ProviderState:
    """What the controller remembers about one provider between jobs."""

    provider: InferenceProvider
    failures: int = 0
    record: ProviderRecord | None = None
    scraper: ProviderScraper | None = None
    credentials: tuple[bool, str] | None = None
    """Whether the referenced Secret and key exist, and the condition reason."""
    health_ok: bool | None = None
    health_ran: bool = False
    metrics_ok: bool | None = None
    metric_healthy: bool | None = None
    signals: RecordSignals = field(default_factory=RecordSignals)
    scrape_ran: bool = False
    observed_at: float | None = None
    """The time of a carried sample (staleMetricsSeconds) standing in; None: now."""
    last_good: tuple[float, RecordSignals] | None = None
    """The last successful scrape's time and signals (for staleMetricsSeconds)."""
    tls: dict[str, ssl.SSLContext] = field(default_factory=dict)
    """TLS contexts of ``healthCheck.tls`` and ``metricsConfig.tls``, built once, keyed
    by the declaration: the same ``tls`` twice is one context, so one connection pool."""
    session: aiohttp.ClientSession | None = field(default=None, repr=False)
    """The pooled session of this provider's HTTP checks, opened by the first one."""
    handed_on_at: float = -math.inf
    """The event loop's time when the last record was handed on."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    task: asyncio.Task[None] | None = field(default=None, repr=False)


HealthProbe = Callable[[ProviderState], Awaitable[bool]]
"""Checks one provider's health (raises nothing; a timeout is the caller's)."""
ScrapeProbe = Callable[[ProviderState], Awaitable[ScrapedSignals]]
"""Scrapes one provider; raises `ScrapeError`."""


class ProviderController:
    """Runs one check loop per own provider and reports records and phases."""

    def __init__(
        self,
        store: ResourceStore,
        site: str,
        on_record: Callable[[str, ProviderRecord | None], None],
        refresh_s: float,
        *,
        health: HealthProbe | None = None,
        scrape: ScrapeProbe | None = None,
        rng: random.Random | None = None,
        guard: WriteGuard | None = None,
    ) -> None:
        self._store = store
        self._guard = guard or WriteGuard()
        self._site = site
        self._on_record = on_record
        self._refresh_s = refresh_s
        self._states: dict[str, ProviderState] = {}
        self._health = health or self._http_health
        self._scrape = scrape or self._http_scrape
        self._rng = rng or random.Random()
        self.metrics_default_s: float | None = None
        """The served GridNetwork's metricsRefreshInterval in seconds, if set."""

    @property
    def names(self) -> set[str]:
        """Names of the providers being checked."""
        return set(self._states)

    def current(self, name: str) -> InferenceProvider | None:
        """A provider as last checked, with the phase this controller computed."""
        state = self._states.get(name)
        return state.provider if state is not None else None

    async def start(self) -> None:
        """Nothing to open up front: each provider's checks open their own session."""

    def sync(self, providers: list[InferenceProvider]) -> None:
        """Start, restart or stop loops so there is one per provider, on its latest spec."""
        wanted = {p.name: p for p in providers}
        for name in list(self._states):
            if name not in wanted:
                self._stop(name)
                self._on_record(name, None)
        for name, provider in wanted.items():
            state = self._states.get(name)
            if state is not None and state.provider.spec == provider.spec:
                state.provider = provider
                continue
            if state is not None:
                self._stop(name)
            self._states[name] = ProviderState(provider)
            self._states[name].task = asyncio.create_task(self._loop(name), name=f"provider-{name}")

    def _stop(self, name: str) -> None:
        state = self._states.pop(name)
        if state.task is not None:
            state.task.cancel()

    async def stop(self) -> None:
        """Stop every loop and wait for them to end (each closes its session)."""
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for name in list(self._states):
            self._stop(name)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, name: str) -> None:
        """Run the provider's jobs side by side until cancelled, then close its session."""
        state = self._states.get(name)
        if state is None:
            return
        jobs = provider_jobs(state.provider, self._refresh_s, self.metrics_default_s)
        try:
            async with asyncio.TaskGroup() as group:
                for job in jobs:
                    run = self._job(name, job)
                    if job.name == "publish":
                        group.create_task(self._refresh(state, job, run))
                    else:
                        group.create_task(run_every(job, run, self._rng))
        finally:
            if state.session is not None:
                await state.session.close()
                state.session = None

    async def _refresh(
        self, state: ProviderState, job: Job, run: Callable[[], Awaitable[None]]
    ) -> None:
        """Run ``run`` now, then whenever a jittered ``job.interval_s`` passed with no
        record handed on: a record the checks keep fresh is not sent again."""
        loop = asyncio.get_running_loop()
        await run()
        since = loop.time()
        while True:
            await asyncio.sleep(max(0.0, since + jittered(job.interval_s, self._rng) - loop.time()))
            if state.handed_on_at > since:
                since = state.handed_on_at
                continue
            await run()
            since = loop.time()

    def _session_of(self, state: ProviderState) -> aiohttp.ClientSession:
        if state.session is None:
            state.session = probe_session()
        return state.session

    def _job(self, name: str, job: Job) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            state = self._states.get(name)
            if state is None:
                return
            try:
                if job.name == "health":
                    await self._run_health(state, job.timeout_s)
                elif job.name == "scrape":
                    await self._run_scrape(state, job.timeout_s)
                await self._publish(state, job.name)
            except (GridError, OSError) as exc:
                # A failed check or status write: counted, and the job's next run tries again.
                code = exc.code if isinstance(exc, GridError) else type(exc).__name__
                log.warning("provider check failed", extra={"provider": name, "code": code})

        return run

    async def _http_health(self, state: ProviderState) -> bool:
        spec = state.provider.spec
        health = spec.health_check
        tls = await self._tls(state, health.tls if health else None)
        result = await check_health(self._session_of(state), spec.endpoint or "", health, tls)
        return result.healthy

    async def _http_scrape(self, state: ProviderState) -> ScrapedSignals:
        spec = state.provider.spec
        if state.scraper is None:
            metrics = spec.metrics_config
            assert metrics is not None
            tls = await self._tls(state, metrics.tls)
            session = self._session_of(state)
            state.scraper = ProviderScraper(session, spec.endpoint or "", metrics, tls)
        return await state.scraper.scrape()

    async def _tls(self, state: ProviderState, tls: ProviderTls | None) -> ssl.SSLContext | None:
        """The TLS context of a ``tls`` declaration, built from the store once.

        aiohttp pools connections per context, so health and metrics declaring the
        same ``tls`` share one context and their checks one connection.
        """
        if tls is None:
            return None
        key = tls.model_dump_json()
        if key not in state.tls:
            state.tls[key] = await provider_ssl_context(self._store, tls)
        return state.tls[key]

    async def _run_health(self, state: ProviderState, timeout_s: float) -> None:
        attributes = {"grid.provider": state.provider.name}
        with outcome_span(_tracer, "grid.provider.health_check", attributes) as span:
            outcome = "healthy"
            try:
                async with asyncio.timeout(timeout_s):
                    ok = await self._health(state)
            except TimeoutError:
                ok, outcome = False, "timeout"
            span.set_attribute(OUTCOME, outcome if ok or outcome == "timeout" else "unhealthy")
        state.health_ok, state.health_ran = ok, True
        state.failures = state.failures + 1 if not ok else 0

    async def _run_scrape(self, state: ProviderState, timeout_s: float) -> None:
        attributes = {"grid.provider": state.provider.name}
        with outcome_span(_tracer, "grid.provider.scrape", attributes) as span:
            await self._scrape_once(state, timeout_s, span)

    async def _scrape_once(self, state: ProviderState, timeout_s: float, span: Span) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                scraped = await self._scrape(state)
        except (ScrapeError, TimeoutError) as exc:
            state.metrics_ok = False
            reason = exc.reason if isinstance(exc, ScrapeError) else "timeout"
            span.set_attribute(OUTCOME, reason)
            log.info("scrape failed", extra={"provider": state.provider.name, "reason": reason})
            metrics = state.provider.spec.metrics_config
            last, now = state.last_good, time.time()
            stale_s = metrics.stale_metrics_seconds if metrics is not None else None
            if last is not None and carried_sample(last[0], now, stale_s):
                # staleMetricsSeconds: the last good sample stands in, with its own time.
                state.observed_at, state.signals = last
            else:
                state.observed_at, state.signals = None, RecordSignals()
        else:
            v = scraped.values
            state.signals = RecordSignals(
                queue_depth=v.queue_depth,
                kv_cache_utilization=v.kv_cache_utilization,
                prefix_cache_hit_ratio=v.prefix_cache_hit_ratio,
                p99_latency_ms=v.p99_latency_ms,
                requests=scraped.requests,
            )
            state.metrics_ok, state.metric_healthy = True, scraped.healthy
            state.observed_at = None
            state.last_good = (time.time(), state.signals)
        state.scrape_ran = True

    def _checked(self, state: ProviderState) -> bool:
        """Whether every declared check has run once (before that, nothing is judged)."""
        jobs = {
            j.name for j in provider_jobs(state.provider, self._refresh_s, self.metrics_default_s)
        }
        return ("health" not in jobs or state.health_ran) and (
            "scrape" not in jobs or state.scrape_ran
        )

    async def _publish(self, state: ProviderState, job: str = "publish") -> None:
        """Judge the phase from the latest results and hand the record on, unless
        ``job`` is a check (health or scrape) that changed nothing in it but its time.

        A scrape that saw the same signals is not news: handing it on would make
        every site render again for a new sample time alone. The record keeps its
        earlier sample time, and the refresh job (`_refresh`) sends it again once
        ``record_refresh_s`` passed with nothing handed on, so it never goes stale."""
        if not self._checked(state):
            return
        async with state.lock:
            provider = state.provider
            await self._check_credentials(state)
            metrics_ok = state.metrics_ok if state.scrape_ran else None
            health_ok = state.health_ok if state.health_ran else None
            seen = ProviderObservation(health_ok, metrics_ok, state.failures)
            phase = await self._update_phase(state, seen)
            healthy = record_health(phase, health_ok, state.metric_healthy)
            if not self.credentials_ok(provider.name):
                healthy = False  # no site may route to it until its Secret resolves
            state.provider = state.provider.model_copy(
                update={
                    "status": (state.provider.status or InferenceProviderStatus()).model_copy(
                        update={"phase": phase, "reason": phase_reason(phase, seen)}
                    )
                }
            )
            record = record_for(
                state.provider,
                self._site,
                signals=state.signals,
                healthy=healthy,
                observed_at_s=state.observed_at or time.time(),
            )
            last = state.record
            if (
                job != "publish"
                and last is not None
                and replace(record, observed_at=last.observed_at) == last
            ):
                return
            state.record = record
            state.handed_on_at = asyncio.get_running_loop().time()
            self._on_record(provider.name, record)

    def credentials_ok(self, name: str) -> bool:
        """False when the provider's auth Secret or key is missing: it is not routed."""
        state = self._states.get(name)
        return state is None or state.credentials is None or state.credentials[0]

    def unresolved_secrets(self) -> list[str]:
        """``namespace/name`` of each referenced auth Secret that does not resolve."""
        names = []
        for state in self._states.values():
            auth = state.provider.spec.auth
            ref = auth.secret_ref if auth is not None else None
            if ref is not None and state.credentials is not None and not state.credentials[0]:
                names.append(f"{ref.namespace}/{ref.name}")
        return sorted(set(names))

    async def _check_credentials(self, state: ProviderState) -> None:
        """Check that the referenced Secret and key exist; never read the value.

        The outcome is the ``CredentialsResolved`` condition, written only when
        it changes. A provider whose credential cannot resolve is left out of the
        overlay rather than routed to with a reference the gateway cannot inject.
        """
        auth = state.provider.spec.auth
        # auth.manual: the user wires the credential at the gateway; nothing to resolve.
        ref = auth.secret_ref if auth is not None and not auth.manual else None
        if ref is None:
            state.credentials = (True, "NoSecretReferenced")
            return
        ok, reason, message = True, "SecretFound", f"Secret {ref.namespace}/{ref.name} found"
        try:
            obj = await self._store.get("Secret", ref.name, namespace=ref.namespace)
        except NotFound:
            ok, reason = False, "SecretNotFound"
            message = f"Secret {ref.namespace}/{ref.name} not found"
        else:
            keys = set(obj.get("data") or {}) | set(obj.get("stringData") or {})
            if ref.key is not None and ref.key not in keys:
                ok, reason = False, "SecretKeyMissing"
                message = f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}"
        if state.credentials == (ok, reason):
            return
        state.credentials = (ok, reason)
        status = (state.provider.status or InferenceProviderStatus()).model_copy(deep=True)
        now = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        if status.set_condition(
            CREDENTIAL_CONDITION,
            "True" if ok else "False",
            reason=reason,
            message=message,
            now=now,
            observed_generation=state.provider.metadata.generation,
        ):
            conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]
            await self._guard.write(
                WriteSite.PROVIDER_STATUS,
                lambda: self._store.patch_status(
                    "InferenceProvider", state.provider.name, {"conditions": conditions}
                ),
            )
            state.provider = state.provider.model_copy(update={"status": status})
            if not ok:
                log.warning(
                    "provider credential unresolved",
                    extra={"provider": state.provider.name, "reason": reason},
                )

    async def _update_phase(self, state: ProviderState, seen: ProviderObservation) -> ProviderPhase:
        current = state.provider.phase
        phase = next_provider_phase(current, seen)
        reason = phase_reason(phase, seen)
        status = state.provider.status
        if phase is not current or status is None or status.reason != reason:
            patch = {
                "phase": phase.value,
                "reason": reason,
                "observedGeneration": state.provider.metadata.generation,
            }
            await self._guard.write(
                WriteSite.PROVIDER_STATUS,
                lambda: self._store.patch_status("InferenceProvider", state.provider.name, patch),
            )
            log.info(
                "provider phase",
                extra={"provider": state.provider.name, "from": current.value, "to": phase.value},
            )
        return phase


def record_health(
    phase: ProviderPhase, health_ok: bool | None, metric_healthy: bool | None
) -> bool | None:
    """The ``healthy`` a record carries; ``False`` removes the provider from routing.

    One failed health check only degrades a provider (it stays routed, marked
    ``fresh: false``), so it carries the metrics' health gauge, if any; it
    leaves routing once Unavailable. A provider that never passed a check is
    not routed while its checks fail.
    """
    if phase is ProviderPhase.UNAVAILABLE:
        return False
    if health_ok is False:
        return metric_healthy if phase is ProviderPhase.DEGRADED else False
    return metric_healthy if metric_healthy is not None else health_ok


def phase_reason(phase: ProviderPhase, seen: ProviderObservation) -> str:
    """The status reason written with a provider phase.

    A failed health check is named whatever the phase (a Pending provider whose
    first checks fail says so); otherwise a Degraded provider's scrape failed.
    """
    if seen.health_ok is False:
        return "HealthCheckFailing"
    return {
        ProviderPhase.PENDING: "Pending",
        ProviderPhase.AVAILABLE: "Healthy",
        ProviderPhase.DEGRADED: "MetricsFailing",
        ProviderPhase.UNAVAILABLE: "HealthCheckFailing",
    }[phase]
