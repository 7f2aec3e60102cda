"""Candidate drafts: what one InferenceProvider contributes to a render, before scoring.

A render reads resources in two steps. This module is the first: for each
InferenceProvider it makes one `CandidateInput` per model (site from its label,
signals from the signals document with the spec's cost filled in, freshness
from its phase and the sample's age, a credential reference checked against
the Secrets), and decides whether something excludes the provider before
scoring (access policy, an ``Unavailable`` phase, a remote sample past the
stale TTL). The result is a `CandidateDraft`. `grid.core.routing.render` is the second
step: it scores and ranks the drafts' candidates and builds the overlay.

The split keeps the resource-reading rules (labels, Secrets, phases, signal
entries) apart from the ranking and overlay building they feed. Secrets are only
consulted to check that a referenced key exists; no value is ever read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple

from grid.core.resources import (
    SITE_LABEL,
    GridNetwork,
    GridSite,
    InferenceProvider,
    ProviderAuth,
    hosting_sites,
)
from grid.core.resources.phases import ProviderPhase
from grid.core.resources.secret import Secret
from grid.core.routing.candidate import (
    CandidateInput,
    CredentialRef,
    ExclusionReason,
    Geography,
    SignalValues,
    provider_candidates,
    with_cost,
)
from grid.core.routing.signals import (
    FRESHNESS_MAX_AGE,
    ProviderSignals,
    SignalsDocument,
    is_fresh,
)
from grid.core.vocabulary import KIND_NOUNS
from grid.errors import ValidationError

if TYPE_CHECKING:
    from grid.core.routing.agent_candidates import AgentRoute

CREDENTIAL_STRATEGIES: Mapping[str, str] = {"BearerToken": "bearer_token", "ApiKey": "api_key"}
"""Auth strategies projected as a credential reference, with their wire names."""


class CandidateDraft(NamedTuple):
    """One provider's candidates (one per model) and what applies to all of them.

    A named tuple (immutable, and cheaper to build than a frozen dataclass:
    a render makes one per provider).
    """

    provider: InferenceProvider | AgentRoute
    """The provider, or the tool provider or agent (`grid.core.routing.agent_candidates`)."""
    candidates: tuple[CandidateInput, ...]
    exclusion: ExclusionReason | None
    detail: str
    notes: tuple[str, ...]


def access_problem(
    wanted: Mapping[str, str], gateway_site: GridSite | None, local_site: str
) -> str | None:
    """Why the gateway's site may not consume what ``accessPolicy`` labels ``wanted``
    guard, or None (an empty policy admits every site; an unknown site fails closed)."""
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
    if auth is None:
        return None
    return credential_ref(auth, f"InferenceProvider/{provider.name}", secrets, notes)


def credential_ref(
    auth: ProviderAuth, owner: str, secrets: Sequence[Secret], notes: list[str]
) -> CredentialRef | None:
    """The credential reference ``auth`` projects (checked against ``secrets``), or None.

    ``owner`` (``Kind/name``) names the resource in a refusal and ``notes`` gets why
    no reference is emitted.
    """
    if auth.strategy not in CREDENTIAL_STRATEGIES:
        return None
    if auth.manual:
        notes.append("auth.manual: no credential emitted (wired at the gateway)")
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
            f"{owner}: spec.auth.secretRef.key: key {ref.key!r} "
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
class DraftView:
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


def site_geographies(
    network: GridNetwork, sites: dict[str, GridSite], own_site: str
) -> dict[str, Geography]:
    """Each GridSite's region and zone, with the network's own standing in for ``own_site``.

    A GridNetwork is applied at one site, and its ``spec.region``/``zone`` say where
    that site runs (upstream's fallback): where the site's own GridSite names no
    region (or there is none), the network's region is used, and the network's
    zone where the site names no zone and the regions agree. Other sites keep
    exactly what their GridSite says.
    """
    geographies = {name: Geography(s.spec.region, s.spec.zone) for name, s in sites.items()}
    geographies[own_site] = own_geography(network, sites.get(own_site))
    return geographies


def own_geography(network: GridNetwork, own: GridSite | None) -> Geography:
    """The operator's own site's region and zone: its GridSite's, else the network's."""
    region = own.spec.region if own is not None else None
    zone = own.spec.zone if own is not None else None
    spec = network.spec
    if region is None:
        region = spec.region
    if zone is None and region is not None and region == spec.region:
        zone = spec.zone
    return Geography(region, zone)


def provider_sites(provider: InferenceProvider, view: DraftView) -> list[str]:
    """The sites hosting ``provider`` (§2a): the GridSites its siteSelector selects,
    else its site label, else the default site. A selector selecting no GridSite
    hosts it nowhere."""
    if provider.spec.hosting_labels:
        return hosting_sites(provider, view.sites.values())
    return [provider.metadata.labels.get(SITE_LABEL) or view.default_site]


def drafts_for(provider: InferenceProvider, view: DraftView) -> list[CandidateDraft]:
    """One `draft_for` per site hosting ``provider``."""
    return [draft_for(provider, view, site) for site in provider_sites(provider, view)]


def draft_for(
    provider: InferenceProvider, view: DraftView, site: str | None = None
) -> CandidateDraft:
    """``provider``'s candidates at ``site`` as ``view`` sees them, and any exclusion.

    ``site`` defaults to the provider's site label, else the view's default site.
    """
    metadata, spec, name = provider.metadata, provider.spec, provider.metadata.name
    site = site or metadata.labels.get(SITE_LABEL) or view.default_site
    entry = view.signal_index.get((site, name))
    notes: list[str] = []
    credential = _credential(provider, view.secrets, notes) if spec.auth is not None else None
    stale, evicted = sample_clock(entry, site, view)
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
        backend_kind=spec.backend_kind,
        signals=_signal_values(spec.cost.per_million_input_tokens if spec.cost else None, entry),
        geography=view.geographies.get(site),
        healthy=not (entry is not None and entry.healthy is False),
        fresh=not (degraded or stale),
        observed_at=entry.observed_at if entry else None,
        credential=credential,
        capacity_weight=spec.capacity_weight,
    )
    if spec.access_policy is None and phase is not ProviderPhase.UNAVAILABLE and view.ttl is None:
        # Nothing can exclude it.
        return CandidateDraft(provider, candidates, None, "", tuple(notes))
    exclusion, detail = _pre_exclusion(provider, phase, evicted, view)
    return CandidateDraft(provider, candidates, exclusion, detail, tuple(notes))


def sample_clock(entry: ProviderSignals | None, site: str, view: DraftView) -> tuple[bool, bool]:
    """What the clock decides of a provider's sample at ``site``: (stale, evicted).

    Stale: older than the 60 s freshness bound at the document's ``generated_at``.
    Evicted: a remote sample older than ``staleCandidateTtlSeconds``. A draft
    depends on the time through these two answers only, which is what lets a
    render cache (`grid.core.routing.render_cache`) keep it while they hold.
    """
    signals = view.signals
    if entry is None or signals is None:
        return False, False
    stale = not is_fresh(entry, signals.generated_at)
    ttl = view.ttl
    evicted = (
        ttl is not None
        and site != view.local_site
        and signals.generated_at - entry.observed_at > timedelta(seconds=ttl)
    )
    return stale, evicted


class SampleClock:
    """`sample_clock` of every entry of one view, as two comparisons per entry.

    A render asks what the clock decides of each of a thousand samples against
    one ``generated_at``. Rather than subtract each sample's age, this takes
    the two instants once (the oldest fresh sample, the oldest sample not
    evicted) and compares each ``observed_at`` with them. Datetime arithmetic is
    exact in microseconds, so both give the same answers; where the instants
    cannot be taken the same way (``generated_at`` not in UTC, or out of range)
    each entry goes through `sample_clock`.
    """

    __slots__ = ("_bounds", "_local", "_view")

    def __init__(self, view: DraftView) -> None:
        self._view = view
        self._local = view.local_site
        self._bounds: tuple[datetime, datetime | None] | None = None
        signals = view.signals
        if signals is None or signals.generated_at.tzinfo is not UTC:
            return
        at = signals.generated_at
        try:
            oldest_fresh = at - FRESHNESS_MAX_AGE
            kept_from = None if view.ttl is None else at - timedelta(seconds=view.ttl)
        except OverflowError:
            return
        self._bounds = (oldest_fresh, kept_from)

    @property
    def bounds(self) -> tuple[datetime, datetime | None] | None:
        """The oldest fresh instant and the oldest not evicted (None: no TTL), or None
        where every entry goes through `sample_clock`. A sample is stale when its
        ``observed_at`` is before the first, evicted (a remote one) before the second."""
        return self._bounds

    def __call__(self, entry: ProviderSignals | None, site: str) -> tuple[bool, bool]:
        """``sample_clock(entry, site, view)``."""
        bounds = self._bounds
        if bounds is None or entry is None:
            return sample_clock(entry, site, self._view)
        observed = entry.observed_at
        kept_from = bounds[1]
        return (
            observed < bounds[0],
            kept_from is not None and site != self._local and observed < kept_from,
        )


def _pre_exclusion(
    provider: InferenceProvider, phase: ProviderPhase, evicted: bool, view: DraftView
) -> tuple[ExclusionReason | None, str]:
    policy = provider.spec.access_policy
    wanted = policy.site_selector.match_labels if policy else {}
    access = access_problem(wanted, view.sites.get(view.local_site), view.local_site)
    if access is not None:
        return ExclusionReason.ACCESS_DENIED, access
    if phase is ProviderPhase.UNAVAILABLE:
        return ExclusionReason.PROVIDER_UNAVAILABLE, "status.phase is Unavailable"
    if evicted:
        return (
            ExclusionReason.STALE_EVICTED,
            f"remote sample older than staleCandidateTtlSeconds={view.ttl}",
        )
    return None, ""


_route: Callable[[CandidateInput], tuple[str, str, str]] = attrgetter("kind", "site", "cluster")
"""A candidate's route: its kind, site and cluster."""


def check_duplicates(drafts: Sequence[CandidateDraft]) -> None:
    """Refuse two providers routing one model at one site through one cluster.

    A draft's candidates share kind, site and cluster (one provider, one per
    model), so only drafts whose route another draft shares can collide; the
    others are skipped without changing which collision is reported first.
    """
    routes = list(map(_route, [d.candidates[0] for d in drafts if d.candidates]))
    if len(set(routes)) == len(routes):
        return  # every provider has a route of its own
    shared = {route for route, n in Counter(routes).items() if n > 1}
    seen: dict[tuple[str, str, str, str], str] = {}
    for draft in drafts:
        if not draft.candidates or _route(draft.candidates[0]) not in shared:
            continue
        owner = _owner(draft)
        for c in draft.candidates:
            key = (c.kind, c.name, c.site, c.cluster)
            first = seen.setdefault(key, owner)
            if first != owner:
                raise ValidationError(
                    f"{owner} and {first} both route {KIND_NOUNS.get(c.kind, c.kind)} "
                    f"{c.name!r} at site {c.site!r} through cluster "
                    f"{c.cluster!r}; give one a distinct spec.routingClusterRef",
                    path="spec.routingClusterRef",
                )


def _owner(draft: CandidateDraft) -> str:
    provider = draft.provider
    if isinstance(provider, InferenceProvider):
        return f"InferenceProvider/{provider.metadata.name}"
    return f"{provider.resource_kind}/{provider.provider}"
