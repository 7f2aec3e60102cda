"""The mesh as one site sees it: its own resources plus what peers gossiped.

An operator renders from two sources. Its store holds the GridNetwork, the
GridSites, its own InferenceProviders and Secrets. Its CRDT replica holds every
origin's provider records, its own included. This module turns both into the
inputs of `grid.core.routing.render`, so the operator and ``grid render`` share one
rendering path:

* each remote record becomes an InferenceProvider labelled with its origin site,
  carrying its phase, so §4a's rules apply unchanged;
* every live record becomes an entry of a ``scope=grid`` signals document;
* remote records whose newest sample is older than ``staleCandidateTtlSeconds``
  are evicted (the GridNetwork field; absent means keep them).

Own providers keep their full resource (auth, access policy, cost), so only
they can carry a credential reference: a peer's Secret lives in its cluster. A
remote provider keeps its ``providerKind``, its ``capacityWeight`` and its
access policy's ``siteSelector.matchLabels`` (all carried in the record), so the consuming site
enforces the policy exactly as for its own providers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from operator import attrgetter

from grid.core.crdt.offer import OfferReplica, origin_offers
from grid.core.crdt.record import ModelInfo, ProviderRecord, RecordSignals
from grid.core.resources import (
    API_VERSION,
    SITE_LABEL,
    AgentProvider,
    GridNetwork,
    GridSite,
    InferenceProvider,
)
from grid.core.resources.secret import Secret
from grid.core.routing.agent_candidates import AgentRoute, offer_routes
from grid.core.routing.candidate import SignalValues
from grid.core.routing.record_cache import EntryCache, RemoteCache
from grid.core.routing.render import RenderInputs
from grid.core.routing.signals import SCHEMA_VERSION as SIGNALS_SCHEMA_VERSION
from grid.core.routing.signals import ProviderSignals, SignalsDocument
from grid.core.vocabulary import PROVIDER_KINDS
from grid.errors import ValidationError


@dataclass(frozen=True)
class OriginRecord:
    """A provider record with the origin site that published it."""

    origin: str
    provider_id: str
    record: ProviderRecord


def provider_site(provider: InferenceProvider | AgentProvider, own_site: str) -> str:
    """The site a provider belongs to: its site label, else the operator's site."""
    return provider.site_label or own_site


def record_for(
    provider: InferenceProvider,
    site: str,
    *,
    signals: RecordSignals,
    healthy: bool | None,
    observed_at_s: float,
) -> ProviderRecord:
    """The record an operator publishes for one of its own providers."""
    policy = provider.spec.access_policy
    match_labels = policy.site_selector.match_labels if policy is not None else {}
    cost = provider.spec.cost.per_million_input_tokens if provider.spec.cost else None
    if signals.cost_per_million_input_tokens is None and cost is not None:
        signals = replace(signals, cost_per_million_input_tokens=cost)
    return ProviderRecord(
        name=provider.name,
        cluster=provider.cluster,
        site=site,
        backend_kind=provider.spec.backend_kind,
        models=tuple(m.name for m in provider.spec.models),
        healthy=healthy,
        observed_at=observed_at_s,
        signals=signals,
        phase=provider.phase.value,
        # The state lane's enum holds the five seed kinds; another (free-form)
        # kind travels as self_hosted, which no routing rule reads.
        provider_kind=(
            provider.spec.provider_kind
            if provider.spec.provider_kind in PROVIDER_KINDS
            else "self_hosted"
        ),
        access_match_labels=tuple(sorted(match_labels.items())),
        model_info=tuple(
            {
                m.name: ModelInfo(m.name, tuple(m.capabilities), m.context_window)
                for m in reversed(provider.spec.models)
                if m.capabilities or m.context_window is not None
            }.values()
        ),
        cost_per_million_output_tokens=(
            provider.spec.cost.per_million_output_tokens if provider.spec.cost else None
        ),
        cost_per_million_input_tokens=cost,
        capacity_weight=provider.spec.capacity_weight,
    )


REMOTE_PROVIDER_CACHE_MAX = 8192
"""Validated remote providers kept between renders; a few times the grid's providers."""


def remote_provider(record: ProviderRecord, network: str) -> InferenceProvider:
    """An InferenceProvider standing for a peer's record, labelled with its site.

    It carries the record's access policy, so rendering refuses it to a consuming
    site whose GridSite lacks the labels, as it would the origin's own resource.
    """
    spec: dict[str, object] = {
        "gridNetworkRef": network,
        "backendKind": record.backend_kind,
        "providerKind": record.provider_kind,
        "models": [_model_spec(record.info(m)) for m in record.models],
        "routingClusterRef": record.cluster,
        "capacityWeight": record.capacity_weight,
    }
    if record.access_match_labels:
        spec["accessPolicy"] = {"siteSelector": {"matchLabels": dict(record.access_match_labels)}}
    return InferenceProvider.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": {"name": record.name, "labels": {SITE_LABEL: record.site}},
            "spec": spec,
            "status": {"phase": record.phase},
        }
    )


def _model_spec(info: ModelInfo) -> dict[str, object]:
    spec: dict[str, object] = {"name": info.name}
    if info.capabilities:
        spec["capabilities"] = list(info.capabilities)
    if info.context_window is not None:
        spec["contextWindow"] = info.context_window
    return spec


@functools.lru_cache(maxsize=REMOTE_PROVIDER_CACHE_MAX)
def _remote_or_none(record: ProviderRecord, network: str) -> InferenceProvider | None:
    """`remote_provider`, or None when the record breaks a resource rule.

    Records are immutable, so the validated resource is cached per record: a
    render re-uses it until the peer publishes a new sample. Callers must not
    mutate the returned model.
    """
    try:
        return remote_provider(record, network)
    except (ValueError, ValidationError):
        # pydantic's ValidationError is a ValueError; grid's is a GridError.
        return None


class RecordViews:
    """What a render reads of each provider record, kept while the record is the same object.

    Records are immutable and a replica hands out the same object until its
    origin publishes a new one, so an operator that renders every round keeps
    each record's signals entry (`signals_entry`) and its InferenceProvider
    (`remote_provider`) here, per record object, instead of making or hashing
    them again. `next_round` keeps only what the last round read.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[ProviderRecord, ProviderSignals]] = {}
        self._providers: dict[int, tuple[ProviderRecord, str, RemoteProvider]] = {}
        self._seen_entries: dict[int, tuple[ProviderRecord, ProviderSignals]] = {}
        self._seen_providers: dict[int, tuple[ProviderRecord, str, RemoteProvider]] = {}
        self.remote = RemoteCache()
        """The last round's remote providers (`mesh_inputs` patches them)."""
        self.entries = EntryCache()
        """The last round's signals entries in document order (`signals_document`)."""

    def entry(self, record: ProviderRecord) -> ProviderSignals:
        """`signals_entry` of ``record``."""
        kept = self._entries.get(id(record))
        if kept is None or kept[0] is not record:
            kept = (record, signals_entry(record))
        self._seen_entries[id(record)] = kept
        return kept[1]

    def provider(self, record: ProviderRecord, network: str) -> RemoteProvider:
        """`remote_routes` of ``record``."""
        kept = self._providers.get(id(record))
        if kept is None or kept[0] is not record or kept[1] != network:
            kept = (record, network, remote_routes(record, network))
        self._seen_providers[id(record)] = kept
        return kept[2]

    def next_round(self) -> None:
        """Forget the records the round just ended did not read."""
        self._entries, self._seen_entries = self._seen_entries, {}
        self._providers, self._seen_providers = self._seen_providers, {}


RemoteProvider = tuple[InferenceProvider, frozenset[tuple[str, str, str]]] | None
"""A record's provider and the (site, cluster, model) routes it takes, or None."""


def remote_routes(record: ProviderRecord, network: str) -> RemoteProvider:
    """The provider standing for ``record`` and its routes; None if it breaks a rule."""
    provider = _remote_or_none(record, network)
    if provider is None:
        return None
    return provider, frozenset(
        (record.site, provider.cluster, m.name) for m in provider.spec.models
    )


def live_records(
    records: Iterable[OriginRecord],
    own_site: str,
    now_s: float,
    stale_ttl_s: float | None,
    trusted: Container[str] | None = None,
) -> list[OriginRecord]:
    """Records still worth routing to: own ones always, remote ones within the TTL.

    A record is attributed to its origin, never to the site it names, so a peer
    cannot publish a record for another site. With ``trusted``, a remote origin
    must also be in it: a site whose certificate was never verified (its
    GridSite not yet Active) gets no traffic however it gossips. Output is
    sorted for determinism.
    """
    kept = []
    for item in records:
        if item.record.site != item.origin:
            continue
        remote = item.origin != own_site
        if remote and trusted is not None and item.origin not in trusted:
            continue
        if remote and stale_ttl_s is not None and now_s - item.record.observed_at > stale_ttl_s:
            continue
        kept.append(item)
    return sorted(kept, key=attrgetter("origin", "record.name", "provider_id"))


GRID_ID_LABEL = "grid.praxis-proxy.io/grid-id"
"""Metadata-lane label carrying the gridId a site holds, so the grid agrees on one."""


def converged_grid_id(own: str, gossiped: Iterable[str]) -> str:
    """The gridId every site settles on: the smallest of all ids seen.

    Ids are time-ordered (UUIDv7), so the smallest is the oldest: a site joining
    an existing grid adopts its id, and sites that started together agree on
    the earliest. Empty values are ignored.
    """
    return min((i for i in (own, *gossiped) if i), default=own)


def signals_entry(record: ProviderRecord) -> ProviderSignals:
    """A provider record as a signals-document entry (missing signals stay absent)."""
    s = record.signals
    return ProviderSignals(
        name=record.name,
        cluster=record.cluster,
        site=record.site,
        backend_kind=record.backend_kind,
        models=record.models,
        healthy=record.healthy,
        observed_at=datetime.fromtimestamp(record.observed_at, UTC),
        signals=SignalValues(
            queue_depth=s.queue_depth,
            kv_cache_utilization=s.kv_cache_utilization,
            prefix_cache_hit_ratio=s.prefix_cache_hit_ratio,
            p99_latency_ms=s.p99_latency_ms,
            cost_per_million_input_tokens=s.cost_per_million_input_tokens,
        ),
        requests=s.requests,
    )


def signals_document(
    network: str,
    site: str,
    records: Iterable[OriginRecord],
    *,
    now: datetime,
    epoch: int,
    sequence: int,
    views: RecordViews | None = None,
) -> SignalsDocument:
    """A ``scope=grid`` signals document (§6) of every live record (``views`` keeps entries)."""
    if views is not None:
        entries = views.entries.entries(records, views.entry)
    else:
        # attrgetter builds the same (site, name) keys as a lambda would, in C.
        entries = sorted((signals_entry(r.record) for r in records), key=attrgetter("site", "name"))
    return SignalsDocument(
        schema_version=SIGNALS_SCHEMA_VERSION,
        network=network,
        site=site,
        epoch=epoch,
        sequence=sequence,
        generated_at=now,
        providers=tuple(entries),
    )


def mesh_inputs(
    network: GridNetwork,
    sites: Sequence[GridSite],
    own_providers: Sequence[InferenceProvider],
    secrets: Sequence[Secret],
    records: Sequence[OriginRecord],
    own_site: str,
    agents: Sequence[AgentProvider] = (),
    offers: Sequence[AgentRoute] = (),
    views: RecordViews | None = None,
) -> RenderInputs:
    """Render inputs from the store's resources and the replica's live records.

    Own providers come from the store; a remote record adds a provider only when
    no own provider has the same name at the same site. A peer's record is
    untrusted input, so one that would not form a valid InferenceProvider, or
    that would collide with a provider already taken (the same name, or the same
    model routed through the same cluster at the same site), is dropped rather
    than allowed to fail the whole render.

    ``agents`` are this site's own tool providers and agents; ``offers`` (`mesh_offers`)
    add the other sites' unless one of ``agents`` has the same name at the same site.
    ``views`` keeps each record's provider between rounds (`RecordViews`).
    """
    remote_of = remote_routes if views is None else views.provider
    remote = (
        None
        if views is None
        else views.remote.patched(records, own_site, own_providers, network.name, remote_of)
    )
    if remote is None:
        remote = _remote_providers(records, own_site, own_providers, network.name, remote_of, views)
    own_agents = {(provider_site(a, own_site), a.name) for a in agents}
    return RenderInputs(
        networks=(network,),
        sites=tuple(sites),
        providers=(*own_providers, *remote),
        secrets=tuple(secrets),
        agents=tuple(agents),
        offers=tuple(
            o for o in offers if o.site != own_site and (o.site, o.provider) not in own_agents
        ),
    )


def _remote_providers(
    records: Sequence[OriginRecord],
    own_site: str,
    own_providers: Sequence[InferenceProvider],
    name: str,
    remote_of: Callable[[ProviderRecord, str], RemoteProvider],
    views: RecordViews | None,
) -> list[InferenceProvider]:
    """The providers of the remote records `mesh_inputs` takes, in record order."""
    taken = {(provider_site(p, own_site), p.name) for p in own_providers}
    routes = {
        (provider_site(p, own_site), p.cluster, m.name)
        for p in own_providers
        for m in p.spec.models
    }
    remote: list[InferenceProvider] = []
    places: list[tuple[RemoteProvider, int]] = []
    for r in records:
        made: RemoteProvider = None
        places.append((None, -1))
        if r.origin == own_site:
            continue
        record = r.record
        where = (record.site, record.name)
        if where in taken:
            continue
        made = remote_of(record, name)
        places[-1] = (made, -1)
        if made is None:
            continue
        provider, wanted = made
        if not wanted.isdisjoint(routes):
            continue
        taken.add(where)
        routes |= wanted
        places[-1] = (made, len(remote))
        remote.append(provider)
    if views is not None:
        views.remote.keep(records, own_site, own_providers, name, places, remote)
    return remote


def mesh_offers(replica: OfferReplica, trusted: Container[str], own_site: str) -> list[AgentRoute]:
    """The tools and agents the other sites offer, from those whose phase is in ``trusted``
    (a remote candidate is rendered only while its site is Active, §14)."""
    found = [
        (origin, offer)
        for kind in ("tools", "agents")
        for origin, offer in origin_offers(replica, kind)
        if origin != own_site and origin in trusted
    ]
    return offer_routes(found)
