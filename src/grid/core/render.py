"""Rendering: Grid resources plus a signals document into a ranked overlay (§4a).

This is the pure function behind ``grid render`` and ``grid explain``. It turns
typed resources (GridNetwork, GridSite, InferenceProvider, core v1 Secret) and
an optional signals document into scoring inputs, one per (provider, model),
ranks them with `grid.core.ranking` and builds the overlay and its envelope with
`grid.core.overlay`. Nothing here reads a clock or a file: ``now`` is an input.

Candidates removed before scoring keep their evaluation so that ``explain`` can
show every candidate, including excluded ones, with the reason. Secrets are
only consulted to check that a referenced key exists; no value is ever read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, NamedTuple

from grid import __version__
from grid.core.overlay import (
    CANDIDATES_MAX,
    Provenance,
    Scope,
    build_overlay_and_envelope,
)
from grid.core.phases import ProviderPhase
from grid.core.ranking import Ordering, RankedCandidate, Ranking, order_candidates
from grid.core.resources import SITE_LABEL, GridNetwork, GridSite, InferenceProvider
from grid.core.scoring import (
    AdmissionThresholds,
    BackendKind,
    CandidateInput,
    CredentialRef,
    Evaluation,
    Geography,
    ScoringConfig,
    ScoringContext,
    ScoringWeights,
    SignalValues,
    evaluate,
    provider_candidates,
    with_cost,
)
from grid.core.secret import Secret
from grid.core.signals import ProviderSignals, SignalsDocument, is_fresh
from grid.errors import ValidationError

CREDENTIAL_STRATEGIES: Mapping[str, str] = {"BearerToken": "bearer_token", "ApiKey": "api_key"}
"""Auth strategies projected as a credential reference, with their wire names."""

_BACKEND_KINDS: Mapping[str, BackendKind] = {kind.value: kind for kind in BackendKind}

DEFAULT_NAMESPACE = "default"
"""The gateway namespace when neither ``--namespace`` nor the gatewayRef names one."""


class Exclusion(StrEnum):
    """Why a candidate is not in the overlay (as ``explain`` reports it)."""

    ACCESS_DENIED = "access_denied"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    STALE_EVICTED = "stale_evicted"
    UNHEALTHY = "unhealthy"
    ADMISSION_EXCLUDED = "admission_excluded"
    CANDIDATE_LIMIT = "candidate_limit"


@dataclass(frozen=True)
class RenderInputs:
    """The resources a render reads. Order does not matter; names must be unique."""

    networks: Sequence[GridNetwork] = ()
    sites: Sequence[GridSite] = ()
    providers: Sequence[InferenceProvider] = ()
    secrets: Sequence[Secret] = ()


@dataclass(frozen=True)
class CandidateRow:
    """One candidate with everything ``explain`` shows about it.

    ``rank`` is the overlay rank (``None`` when excluded); ``exclusion`` and
    ``exclusion_detail`` say why a candidate is missing from the overlay.
    """

    evaluation: Evaluation
    provider: InferenceProvider
    rank: int | None = None
    exclusion: Exclusion | None = None
    exclusion_detail: str = ""
    notes: tuple[str, ...] = ()


class _Draft(NamedTuple):
    """One provider's candidates (one per model) and what applies to all of them.

    A named tuple (immutable, and cheaper to build than a frozen dataclass:
    a render makes one per provider).
    """

    provider: InferenceProvider
    candidates: tuple[CandidateInput, ...]
    exclusion: Exclusion | None
    detail: str
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Evaluated:
    """Every candidate of one network seen from one site, scored and ranked.

    ``kept`` is what the overlay carries: the top ``candidates_max`` ranked
    candidates (all of them when ``None``). ``rows`` (computed on first use)
    describes every candidate, kept or not, for ``explain``.
    """

    drafts: tuple[_Draft, ...]
    ordering: Ordering
    context: ScoringContext
    candidates_max: int | None

    @property
    def ranking(self) -> Ranking:
        """Every ranked and excluded candidate (built on first use)."""
        return self.ordering.ranking

    @property
    def kept(self) -> tuple[RankedCandidate, ...]:
        """The ranked candidates the overlay carries, in rank order."""
        return self.ordering.top(self.candidates_max)

    @cached_property
    def rows(self) -> tuple[CandidateRow, ...]:
        """Ranked rows in rank order, then scoring exclusions, then earlier exclusions."""
        return _rows(self)


@dataclass(frozen=True)
class Rendered:
    """A render's results: the overlay, its envelope and every candidate row."""

    network: GridNetwork
    scope: Scope
    overlay: dict[str, Any]
    envelope: dict[str, Any]
    evaluated: Evaluated

    @property
    def rows(self) -> tuple[CandidateRow, ...]:
        """Every candidate, including excluded ones."""
        return self.evaluated.rows

    @property
    def scoring_enabled(self) -> bool:
        """False under ``signalTransport.mode: poll``."""
        return self.evaluated.context.config.enabled


def scoring_config(network: GridNetwork) -> ScoringConfig:
    """The scoring engine's settings from ``GridNetwork.spec`` (§2)."""
    spec = network.spec
    weights = spec.scoring.weights
    admission = spec.admission
    return ScoringConfig(
        weights=ScoringWeights(
            locality=weights.locality,
            queue_depth=weights.queue_depth,
            kv_cache=weights.kv_cache,
            prefix_cache=weights.prefix_cache,
            latency=weights.latency,
            cost=weights.cost,
        ),
        latency_ceiling_ms=spec.scoring.latency_ceiling_ms,
        cost_ceiling_per_million_input_tokens=spec.scoring.cost_ceiling_per_million_input_tokens,
        admission=AdmissionThresholds(
            existing_only_queue_depth=admission.existing_only.queue_depth,
            existing_only_kv_cache=admission.existing_only.kv_cache,
            excluded_queue_depth=admission.excluded.queue_depth,
            excluded_kv_cache=admission.excluded.kv_cache,
        ),
        enabled=spec.signal_mode != "poll",
    )


def select_gateway(
    networks: Iterable[GridNetwork], gateway: str, namespace: str | None
) -> tuple[GridNetwork, str | None, str]:
    """The network listing ``gateway``, the gateway's localSiteName and namespace.

    Raises `ValidationError` when no network (or more than one) lists it.
    """
    matches = [
        (network, ref)
        for network in networks
        for ref in network.spec.gateway_refs
        if ref.name == gateway and (namespace is None or ref.namespace in (None, namespace))
    ]
    where = f" in namespace {namespace!r}" if namespace else ""
    if not matches:
        raise ValidationError(
            f"no GridNetwork lists gateway {gateway!r}{where} in spec.gatewayRefs",
            path="spec.gatewayRefs",
        )
    if len(matches) > 1:
        names = ", ".join(sorted(f"{n.name}" for n, _ in matches))
        raise ValidationError(
            f"gateway {gateway!r}{where} is listed by more than one GridNetwork ({names}); "
            "pass --namespace to choose",
            path="spec.gatewayRefs",
        )
    network, ref = matches[0]
    return network, ref.local_site_name, namespace or ref.namespace or DEFAULT_NAMESPACE


def select_network(
    networks: Sequence[GridNetwork], sites: Sequence[GridSite], site: str
) -> GridNetwork:
    """The network a site belongs to (its GridSite's ``gridNetworkRef``), or the only one."""
    owners = {s.spec.grid_network_ref for s in sites if s.name == site}
    candidates = [n for n in networks if n.name in owners] or list(networks)
    if len(candidates) != 1:
        problem = "no GridNetwork" if not candidates else "more than one GridNetwork"
        raise ValidationError(
            f"{problem} found for site {site!r}; add a GridSite naming its gridNetworkRef",
            path="spec.gridNetworkRef",
        )
    return candidates[0]


def _access_problem(
    provider: InferenceProvider, gateway_site: GridSite | None, local_site: str
) -> str | None:
    policy = provider.spec.access_policy
    wanted = policy.site_selector.match_labels if policy else {}
    if not wanted:
        return None
    if gateway_site is None:
        return f"site {local_site!r} has no GridSite, so its labels are unknown (fail closed)"
    labels = gateway_site.metadata.labels
    missing = sorted(k for k, v in wanted.items() if labels.get(k) != v)
    if missing:
        return f"site {local_site!r} lacks siteSelector label(s) {', '.join(missing)}"
    return None


def _credential(
    provider: InferenceProvider, secrets: Sequence[Secret], notes: list[str]
) -> CredentialRef | None:
    auth = provider.spec.auth
    if auth is None or auth.strategy not in CREDENTIAL_STRATEGIES:
        return None
    ref = auth.secret_ref
    if ref is None or not ref.complete or ref.key is None:
        notes.append(f"auth {auth.strategy} has no complete secretRef: no credential emitted")
        return None
    secret = next((s for s in secrets if s.matches(ref)), None)
    if secret is None:
        notes.append(f"Secret {ref.namespace}/{ref.name} not among the inputs: key not checked")
    elif not secret.has_key(ref.key):
        raise ValidationError(
            f"InferenceProvider/{provider.name}: spec.auth.secretRef.key: key {ref.key!r} "
            f"not found in Secret {ref.namespace}/{ref.name}",
            path="spec.auth.secretRef.key",
        )
    return CredentialRef(
        strategy=CREDENTIAL_STRATEGIES[auth.strategy],
        secret_name=ref.name,
        secret_namespace=ref.namespace,
        secret_key=ref.key,
    )


_NO_SIGNALS = SignalValues()


def _signal_values(cost: float | None, entry: ProviderSignals | None) -> SignalValues:
    """Spec values (the cost) overridden by any value the signals entry carries.

    An entry's own values are returned as they are when the spec adds nothing.
    """
    return with_cost(entry.signals if entry is not None else _NO_SIGNALS, cost)


@dataclass(frozen=True)
class _View:
    """What one render sees: the network, the gateway's site, inputs and signals."""

    network: GridNetwork
    local_site: str
    default_site: str
    sites: Mapping[str, GridSite]
    secrets: Sequence[Secret]
    signals: SignalsDocument | None
    signal_index: Mapping[tuple[str, str], ProviderSignals]
    geographies: Mapping[str, Geography]
    """One shared `Geography` per known site (scoring caches by identity)."""
    ttl: int | None
    """The network's ``staleCandidateTtlSeconds``."""


def _draft_for(provider: InferenceProvider, view: _View) -> _Draft:
    metadata, spec, name = provider.metadata, provider.spec, provider.metadata.name
    site = metadata.labels.get(SITE_LABEL) or view.default_site
    entry = view.signal_index.get((site, name))
    notes: list[str] = []
    credential = _credential(provider, view.secrets, notes) if spec.auth is not None else None
    stale = (
        entry is not None
        and view.signals is not None
        and not is_fresh(entry, view.signals.generated_at)
    )
    phase = provider.phase
    degraded = phase is ProviderPhase.DEGRADED
    if degraded:
        notes.append("status.phase is Degraded: not fresh")
    if stale:
        notes.append("signal sample older than 60 s: not fresh")
    if entry is None:
        notes.append("no signal entry: signals missing (neutral 0.5), sample counts as oldest")
    candidates = provider_candidates(
        [model.name for model in spec.models],
        site=site,
        cluster=spec.routing_cluster_ref or name,
        provider=name,
        backend_kind=_BACKEND_KINDS[spec.backend_kind],
        signals=_signal_values(spec.cost.per_million_input_tokens if spec.cost else None, entry),
        geography=view.geographies.get(site),
        healthy=not (entry is not None and entry.healthy is False),
        fresh=not (degraded or stale),
        observed_at=entry.observed_at if entry else None,
        credential=credential,
    )
    if spec.access_policy is None and phase is not ProviderPhase.UNAVAILABLE and view.ttl is None:
        return _Draft(provider, candidates, None, "", tuple(notes))  # nothing can exclude it
    exclusion, detail = _pre_exclusion(provider, phase, site, entry, view)
    return _Draft(provider, candidates, exclusion, detail, tuple(notes))


def _pre_exclusion(
    provider: InferenceProvider,
    phase: ProviderPhase,
    site: str,
    entry: ProviderSignals | None,
    view: _View,
) -> tuple[Exclusion | None, str]:
    access = _access_problem(provider, view.sites.get(view.local_site), view.local_site)
    if access is not None:
        return Exclusion.ACCESS_DENIED, access
    if phase is ProviderPhase.UNAVAILABLE:
        return Exclusion.PROVIDER_UNAVAILABLE, "status.phase is Unavailable"
    ttl = view.ttl
    if (
        ttl is not None
        and entry is not None
        and view.signals is not None
        and site != view.local_site
    ):
        age = view.signals.generated_at - entry.observed_at
        if age > timedelta(seconds=ttl):
            return (
                Exclusion.STALE_EVICTED,
                f"remote sample older than staleCandidateTtlSeconds={ttl}",
            )
    return None, ""


def _route(candidate: CandidateInput) -> tuple[str, str, str]:
    return candidate.kind, candidate.site, candidate.cluster


def _check_duplicates(drafts: Sequence[_Draft]) -> None:
    """Refuse two providers routing one model at one site through one cluster.

    A draft's candidates share kind, site and cluster (one provider, one per
    model), so only drafts whose route another draft shares can collide; the
    others are skipped without changing which collision is reported first.
    """
    routes = [
        (c.kind, c.site, c.cluster) for c in (d.candidates[0] for d in drafts if d.candidates)
    ]
    if len(set(routes)) == len(routes):
        return  # every provider has a route of its own
    shared = {route for route, n in Counter(routes).items() if n > 1}
    seen: dict[tuple[str, str, str, str], str] = {}
    for draft in drafts:
        if not draft.candidates or _route(draft.candidates[0]) not in shared:
            continue
        owner = draft.provider.metadata.name
        for c in draft.candidates:
            key = (c.kind, c.name, c.site, c.cluster)
            first = seen.setdefault(key, owner)
            if first != owner:
                raise ValidationError(
                    f"InferenceProvider/{owner} and InferenceProvider/{first} "
                    f"both route model {c.name!r} at site {c.site!r} through cluster "
                    f"{c.cluster!r}; give one a distinct spec.routingClusterRef",
                    path="spec.routingClusterRef",
                )


def evaluate_network(
    inputs: RenderInputs,
    network: GridNetwork,
    local_site: str,
    default_site: str,
    signals: SignalsDocument | None,
    candidates_max: int | None = CANDIDATES_MAX,
) -> Evaluated:
    """Every candidate of ``network`` seen from ``local_site``, scored and ranked."""
    if signals is not None and signals.network != network.name:
        raise ValidationError(
            f"the signals document is for network {signals.network!r}, not {network.name!r}",
            path="network",
        )
    name = network.name
    sites = {s.name: s for s in inputs.sites if s.spec.grid_network_ref == name}
    index = signals.index() if signals else {}
    geographies = {name: Geography(s.spec.region, s.spec.zone) for name, s in sites.items()}
    view = _View(
        network,
        local_site,
        default_site,
        sites,
        inputs.secrets,
        signals,
        index,
        geographies,
        network.spec.stale_candidate_ttl_seconds,
    )
    providers = sorted(
        (p for p in inputs.providers if p.spec.grid_network_ref == name),
        key=lambda p: p.name,
    )
    drafts = tuple([_draft_for(p, view) for p in providers])
    _check_duplicates(drafts)
    context = ScoringContext(local_site, geographies.get(local_site), scoring_config(network))
    eligible = [c for d in drafts if d.exclusion is None for c in d.candidates]
    return Evaluated(drafts, order_candidates(eligible, context), context, candidates_max)


def _rows(evaluated: Evaluated) -> tuple[CandidateRow, ...]:
    context = evaluated.context
    limit = evaluated.candidates_max
    owner = {id(c): d for d in evaluated.drafts for c in d.candidates}
    rows: list[CandidateRow] = []
    for r in evaluated.ranking.ranked:
        draft = owner[id(r.evaluation.candidate)]
        over = limit is not None and r.rank >= limit
        rows.append(
            CandidateRow(
                evaluation=r.evaluation,
                provider=draft.provider,
                rank=None if over else r.rank,
                exclusion=Exclusion.CANDIDATE_LIMIT if over else None,
                exclusion_detail=f"ranked beyond the {limit}-candidate overlay limit"
                if over
                else "",
                notes=draft.notes,
            )
        )
    for x in evaluated.ranking.excluded:
        draft = owner[id(x.evaluation.candidate)]
        rows.append(
            CandidateRow(
                evaluation=x.evaluation,
                provider=draft.provider,
                exclusion=Exclusion(x.reason.value),
                exclusion_detail=_scoring_exclusion_detail(x.evaluation, context),
                notes=draft.notes,
            )
        )
    for draft in evaluated.drafts:
        if draft.exclusion is None:
            continue
        for candidate in draft.candidates:
            rows.append(
                CandidateRow(
                    evaluation=evaluate(candidate, context),
                    provider=draft.provider,
                    exclusion=draft.exclusion,
                    exclusion_detail=draft.detail,
                    notes=draft.notes,
                )
            )
    return tuple(rows)


def _scoring_exclusion_detail(evaluation: Evaluation, context: ScoringContext) -> str:
    candidate = evaluation.candidate
    if not candidate.healthy:
        return "the signals report healthy: false"
    limits = context.config.admission
    queue, kv = candidate.signals.queue_depth, candidate.signals.kv_cache_utilization
    if queue is not None and queue >= limits.excluded_queue_depth:
        return f"queue_depth {queue:g} >= excluded threshold {limits.excluded_queue_depth:g}"
    return f"kv_cache_utilization {kv or 0:g} >= excluded threshold {limits.excluded_kv_cache:g}"


def render(
    inputs: RenderInputs,
    *,
    site: str,
    gateway: str,
    now: datetime,
    namespace: str | None = None,
    signals: SignalsDocument | None = None,
    producer_version: str = __version__,
    candidates_max: int | None = CANDIDATES_MAX,
) -> Rendered:
    """Render the overlay and envelope for ``gateway`` (``grid render``).

    ``site`` is the operator's site: the default for providers without a site
    label and for a gatewayRef without ``localSiteName``. ``now`` stamps
    ``generated_at`` and ``rendered_at``; it never changes the revision.
    ``candidates_max`` keeps the top-ranked candidates only (default 1,024, the
    §5 limit, so the overlay always verifies); ``None`` keeps every candidate.
    """
    network, local_site_name, resolved_namespace = select_gateway(
        inputs.networks, gateway, namespace
    )
    local_site = local_site_name or site
    evaluated = evaluate_network(inputs, network, local_site, site, signals, candidates_max)
    scope = Scope(network.name, gateway, resolved_namespace, local_site)
    provenance = Provenance(
        producer_version=producer_version,
        source_name=network.name,
        source_uid=network.metadata.uid,
        source_generation=network.metadata.generation,
        rendered_at=now,
    )
    overlay, envelope = build_overlay_and_envelope(
        network.name, local_site, evaluated.kept, now, scope, provenance
    )
    return Rendered(
        network=network, scope=scope, overlay=overlay, envelope=envelope, evaluated=evaluated
    )
