"""The overlay loop: render each gateway this site serves, write the overlays that changed.

A round runs whenever something marked the view dirty, and at least every
``render_interval_s`` so that time-driven rules (freshness, stale-candidate
eviction) take effect within that bound. One round reads the replica's live
records of verified sites, builds the mesh view once, renders every served
gateway from it and writes an overlay only when its revision changed, and the
``praxis.yaml`` of each gateway whose ``consumerConfig`` is enabled when its
text changed. The round's `overlay_entry` items and `consumer_status` feed the
GridNetwork status, with ``budget_status``; the budget view
``grid-budgets.json`` is written beside each overlay when a ratio moved (§12).

Signals come from the records themselves under gossip; under poll the caller
passes a ``signals_view`` (own scrapes plus what was pulled from peers,
`grid.operator.lifecycle`), and rendering has local scoring off.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span
from prometheus_client import CollectorRegistry

from grid.adapters.health_server import ClosedCounter
from grid.adapters.tracing import OUTCOME
from grid.core.crdt.replica import GridState
from grid.core.resources import AgentProvider, GridNetwork, GridSite, InferenceProvider
from grid.core.resources.network_spec import GatewayRef
from grid.core.resources.network_status import overlay_entry, served_gateways
from grid.core.resources.overlay_status import (
    APPLY_FAILED,
    RENDER_FAILED,
    Distribution,
    revision_entry,
)
from grid.core.resources.phases import SitePhase
from grid.core.resources.secret import Secret
from grid.core.routing.admission_policy import pressure_ratio, pressure_signals, stabilized
from grid.core.routing.hysteresis import Hysteresis, PressureRules
from grid.core.routing.live_cache import LiveRecordCache
from grid.core.routing.mesh_view import (
    OriginRecord,
    RecordViews,
    mesh_inputs,
    mesh_offers,
    signals_document,
)
from grid.core.routing.render import DEFAULT_NAMESPACE, RenderInputs, render
from grid.core.routing.render_cache import RenderCache
from grid.core.routing.signals import SignalsDocument
from grid.errors import GridError
from grid.operator.budgets import BudgetView
from grid.operator.output import ConsumerConfigWriter, OverlayWriter, configmap_name
from grid.operator.resilience import (
    RoundFailures,
    WriteFailed,
    guarded_rounds,
)

log = logging.getLogger(__name__)

SignalsView = Callable[[list[OriginRecord], dt.datetime, float | None], SignalsDocument]
"""Under poll: (live records, now, stale TTL) -> the signals document to render from."""

BUDGETS_APPLY_FAILED = "BudgetsApplyFailed"
"""The reason a gateway's budget view (``grid-budgets.json``) could not be written."""

ROUTABLE = (SitePhase.ACTIVE,)
"""Site phases whose candidates are rendered (§14 eligibility): only ``Active``, a site
whose egress probe passes now. An ``Unreachable`` site's candidates leave the overlay
at the next render and return when its probe passes again."""


@dataclass
class RoundSummary:
    """What one round rendered, for its span and metrics: names, counts and revisions only.

    The models named and each cluster's freshness are read off the rendered
    candidates when first asked for (a recorded span, a metrics scrape), not in
    every round: most rounds are asked neither."""

    gateways: list[str] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)
    candidates: int = 0
    written: int = 0
    listed: list[list[dict[str, Any]]] = field(default_factory=list)
    """Each gateway's rendered candidates, in the order added."""

    def add(
        self, gateway: str, revision: str, candidates: list[dict[str, Any]], written: bool
    ) -> None:
        """Count one gateway's rendered overlay."""
        self.gateways.append(gateway)
        self.revisions.append(revision)
        self.listed.append(candidates)
        self.candidates += len(candidates)
        self.written += int(written)

    @functools.cached_property
    def models(self) -> set[str]:
        """Every model a rendered candidate names."""
        return {str(c["name"]) for candidates in self.listed for c in candidates}

    @functools.cached_property
    def freshness(self) -> dict[tuple[str, str], bool]:
        """(site, cluster) -> whether every one of its rendered candidates is fresh."""
        freshness: dict[tuple[str, str], bool] = {}
        for candidates in self.listed:
            for c in candidates:
                where = (str(c["site"]), str(c["cluster"]))
                freshness[where] = freshness.get(where, True) and bool(c["fresh"])
        return freshness

    def describe(self, span: Span) -> None:
        """Set the round's attributes: models, candidates, revision, gateways."""
        span.set_attributes(
            {
                "grid.render.gateways": len(self.gateways),
                "grid.render.models": sorted(self.models),
                "grid.render.candidates": self.candidates,
                "grid.render.written": self.written,
            }
        )
        if len(self.revisions) == 1:
            span.set_attribute("grid.overlay.revision", self.revisions[0])
        elif self.revisions:
            span.set_attribute("grid.overlay.revisions", self.revisions)


async def render_rounds(
    dirty: asyncio.Event,
    interval_s: float,
    round_: Callable[[], Awaitable[None]],
    failures: RoundFailures | None = None,
    gap_s: float = 0.0,
) -> None:
    """Run ``round_`` whenever ``dirty`` is set, and at least every ``interval_s``.

    A round starts no sooner than ``gap_s`` (at most ``interval_s``) after the start
    of the one before: what marks the view dirty meanwhile goes into that one round.
    A change after a quiet spell still starts its round at once.

    A round that fails is counted and tried again after a back-off (`guarded_rounds`);
    the loop never ends on a failure."""
    failures = failures or RoundFailures()
    loop = asyncio.get_running_loop()
    gap_s = min(gap_s, interval_s)
    last = -math.inf
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await dirty.wait()
        wait = last + gap_s - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        dirty.clear()
        last = loop.time()
        await guarded_rounds("render", failures, round_)


class OverlayLoop:
    """Renders this site's gateways and writes their overlays; counts each outcome."""

    def __init__(self, site: str, writer: OverlayWriter, registry: CollectorRegistry) -> None:
        self.site = site
        self.writer = writer
        self.renders = ClosedCounter(
            "grid_overlay_renders_total",
            "Overlay renders by outcome.",
            "result",
            ("written", "unchanged", "failed"),
            registry,
        )
        self.consumers = ConsumerConfigWriter(writer.store, writer, writer.guard)
        self.consumer_status: list[dict[str, Any]] = []
        """The last round's ``consumerConfigStatus`` items."""
        self.budgets = BudgetView()
        self.budget_status: list[dict[str, Any]] = []
        self.overlay_status: list[dict[str, Any]] = []
        """The last round's ``overlayStatus`` items (upstream's revision evidence)."""
        """The last round's ``budgetStatus`` items: this site's view of each tenant's spend."""
        self._sequence = 0
        self._epoch = int(time.time())
        self.render_failed: list[str] = []
        """Gateways whose overlay failed to render in the last round."""
        self.write_failed: list[str] = []
        """Gateways whose overlay failed to be written in the last round."""
        self.apply_failed: list[tuple[str, str]] = []
        """(gateway, reason) of the last round's other writes that failed (the budget view)."""
        self.served = 0
        """Gateways served in the last round."""
        self.last_inputs: RenderInputs | None = None
        """The inputs of the last round (the live view explains from them)."""
        self.last_signals: SignalsDocument | None = None
        self.last_held: frozenset[tuple[str, str]] | None = None
        """The stabilized-admission hold set of the last round (None without the policy)."""
        self._hysteresis: Hysteresis | None = None
        self.last_round = RoundSummary()
        """What the last round rendered (its span and ``grid_overlay_candidate_fresh``)."""
        self.failed_rounds = 0
        """Rounds in a row in which a served gateway's overlay failed to render or be written."""
        self.deadline = 0.0
        """When time alone changes the last round's view (a record turns stale or leaves it)."""
        self.record_views = RecordViews()
        """Each replica record's provider and signals entry, kept while the record is."""
        self.live_records = LiveRecordCache()
        """Each origin's live records, kept while its state is the same object."""
        self.caches: dict[tuple[str, str | None], RenderCache] = {}
        """Per served gateway (name, namespace): what its next render may keep."""

    @property
    def settled(self) -> bool:
        """Whether the last round wrote everything it rendered (else the next one retries)."""
        return self.failed_rounds == 0 and not any(
            c.get("phase") == "Error" for c in self.consumer_status
        )

    def stabilized_holds(
        self, network: GridNetwork, signals: SignalsDocument, now_s: float
    ) -> frozenset[tuple[str, str]] | None:
        """Feed this round's pressure ratios to the stabilized-admission machine (§2a).

        None unless the network's admissionPolicy asks for ``mode: stabilized``. The
        machine lives across rounds and starts afresh when its rules change.
        """
        policy = stabilized(network.spec)
        if policy is None:
            self._hysteresis = None
            return None
        rules = PressureRules.from_spec(policy.pressure)
        if self._hysteresis is None or self._hysteresis.rules != rules:
            self._hysteresis = Hysteresis(rules)
        watched = pressure_signals(network.spec)
        ratios = {(e.site, e.name): pressure_ratio(e.signals, watched) for e in signals.providers}
        return self._hysteresis.observe(ratios, now_s)

    async def render(
        self,
        network: GridNetwork,
        sites: list[GridSite],
        own: list[InferenceProvider],
        secrets: list[Secret],
        replica: GridState,
        site_phases: Mapping[str, SitePhase],
        signals_view: SignalsView | None = None,
        agents: Sequence[AgentProvider] = (),
    ) -> list[dict[str, Any]]:
        """Render every served gateway, write changed overlays; the status entries.

        ``agents``: this site's tool providers and agents; the other sites' come
        from the replica's ``tools`` and ``agents`` OR-Sets."""
        now = dt.datetime.now(dt.UTC)
        ttl = network.spec.stale_candidate_ttl_seconds
        trusted = {name for name, phase in site_phases.items() if phase in ROUTABLE}
        views = self.record_views
        records = self.live_records.live(
            replica.provider_states(),
            self.site,
            now.timestamp(),
            float(ttl) if ttl is not None else None,
            trusted,
        )
        self.deadline = self.live_records.deadline()
        offers = mesh_offers(replica, trusted, self.site)
        inputs = mesh_inputs(
            network, sites, own, secrets, records, self.site, agents, offers, views
        )
        if signals_view is not None:
            signals = signals_view(records, now, float(ttl) if ttl is not None else None)
        else:
            self._sequence += 1
            signals = signals_document(
                network.name,
                self.site,
                records,
                now=now,
                epoch=self._epoch,
                sequence=self._sequence,
                views=views,
            )
        views.next_round()
        self.last_inputs, self.last_signals = inputs, signals
        held = self.stabilized_holds(network, signals, now.timestamp())
        self.last_held = held
        overlays = []
        consumers: list[dict[str, Any]] = []
        revisions: list[dict[str, Any]] = []
        served = served_gateways(network, self.site)
        self.served = len(served)
        self.render_failed, self.write_failed, self.apply_failed = [], [], []
        self.writer.per_gateway = len(served) > 1
        span = trace.get_current_span()
        summary = RoundSummary()
        caches = {(r.name, r.namespace): self.caches.get((r.name, r.namespace)) for r in served}
        self.caches = {key: cache or RenderCache() for key, cache in caches.items()}
        for ref in served:
            try:
                rendered = render(
                    inputs,
                    site=self.site,
                    gateway=ref.name,
                    namespace=ref.namespace,
                    signals=signals,
                    now=now,
                    held=held,
                    cache=self.caches[ref.name, ref.namespace],
                )
            except GridError as exc:
                self.renders.inc("failed")
                self.render_failed.append(ref.name)
                log.warning("render failed", extra={"gateway": ref.name, "code": exc.code})
                span.add_event("render failed", {"grid.gateway": ref.name, OUTCOME: exc.code})
                revisions.append(self._revision_entry(network, ref, None, RENDER_FAILED))
                continue
            fmt = ref.overlay_format
            revision = rendered.envelope["revision"]["value"]
            try:
                written = await self.writer.write(rendered, fmt)
            except (GridError, OSError) as exc:
                # The store or the disk refused; the next round retries this revision.
                self.renders.inc("failed")
                self.write_failed.append(ref.name)
                log.warning(
                    "overlay write failed", extra={"gateway": ref.name, "error": type(exc).__name__}
                )
                span.add_event("write failed", {"grid.gateway": ref.name})
                revisions.append(self._revision_entry(network, ref, revision, APPLY_FAILED))
                continue
            revisions.append(self._revision_entry(network, ref, revision))
            self.renders.inc("written" if written else "unchanged")
            candidates = len(rendered.overlay["candidates"])
            summary.add(ref.name, revision, rendered.overlay["candidates"], written)
            if written:
                log.info(
                    "overlay written",
                    extra={
                        "gateway": ref.name,
                        "revision": revision[:12],
                        "candidates": candidates,
                    },
                )
            overlays.append(
                overlay_entry(
                    gateway=ref.name,
                    namespace=rendered.scope.namespace,
                    config_map=configmap_name(network.name, ref.name, fmt),
                    revision=revision,
                    candidates=candidates,
                )
            )
            consumers.append(await self.consumers.write(rendered, ref.consumer_config, fmt))
            await self._write_budgets(network, replica, ref, rendered.scope.namespace)
        self.consumer_status = consumers
        self.overlay_status = revisions
        self.budget_status = self.budgets.status(network, replica)
        if span.is_recording():
            summary.describe(span)
        self.last_round = summary
        failed = self.render_failed or self.write_failed or self.apply_failed
        self.failed_rounds = self.failed_rounds + 1 if failed else 0
        return overlays

    async def _write_budgets(
        self, network: GridNetwork, replica: GridState, ref: GatewayRef, namespace: str
    ) -> None:
        """Write the gateway's budget view when a ratio moved by 0.01 or reached 1.

        A write that fails is named in ``apply_failed`` (``BudgetsApplyFailed``) and
        tried again next round, as the view is only taken as written once it was."""
        view = self.budgets.document(network, replica, ref.name)
        if view is not None:
            text = json.dumps(view, separators=(",", ":"))
            try:
                await self.writer.write_budgets(
                    network.name, ref.name, namespace, text, ref.overlay_format
                )
            except (GridError, OSError) as exc:
                reason = exc.failure.reason.value if isinstance(exc, WriteFailed) else "other"
                log.warning(
                    "budget view not written", extra={"gateway": ref.name, "reason": reason}
                )
                self.apply_failed.append((ref.name, BUDGETS_APPLY_FAILED))
                return
            self.budgets.written(ref.name, view)

    def _revision_entry(
        self,
        network: GridNetwork,
        ref: GatewayRef,
        rendered: str | None,
        failure: str | None = None,
    ) -> dict[str, Any]:
        """The gateway's ``overlayStatus`` item after this round's render and write."""
        distributed = self.writer.distributed(network.name, ref.name)
        if distributed is None:
            # Nothing written or read by this process yet: the status's last evidence.
            prior = network.status.overlay_status if network.status else []
            item = next((o for o in prior if o.gateway_name == ref.name), None)
            if item is not None:
                distributed = Distribution.of_status(item.model_dump(by_alias=True))
        return revision_entry(
            gateway=ref.name,
            namespace=ref.namespace or DEFAULT_NAMESPACE,
            config_map=configmap_name(network.name, ref.name, ref.overlay_format),
            generation=network.metadata.generation,
            rendered=rendered,
            distributed=distributed,
            failure=failure,
        )
