"""The words every part of the core shares: kinds, admission states, tiers and signals.

These are the types that resources, the CRDT records, routing and the overlay all
speak, so they live below all four (the import contract's layers inside the core):
a module that needs only the vocabulary never pulls in the pipeline that produces
it. Each enum has one definition here and is mapped to the wire by its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class BackendKind(StrEnum):
    """Where an inference backend runs (InferenceProvider ``spec.backendKind``, seed 003).

    The one type for the concept: the CRD field, the scoring engine and the CRDT
    provider record all hold it; the wire maps it to ``grid.swim.v1.BackendKind``
    by member name (``LOCAL`` <-> ``BACKEND_KIND_LOCAL``).
    """

    LOCAL = "local"
    REMOTE = "remote"
    CLOUD_MANAGED = "cloud_managed"
    API_PROVIDER = "api_provider"

    @property
    def self_hosted(self) -> bool:
        """True for capacity a Grid site runs itself (``local`` or ``remote``)."""
        return self in (BackendKind.LOCAL, BackendKind.REMOTE)


PROVIDER_KINDS = ("open_ai", "anthropic", "bedrock", "vertex", "self_hosted")
"""The provider kinds seed 003 names. ``providerKind`` accepts any string (upstream
Grid has no enum); it describes the API flavour and never changes routing."""


class CandidateKind(StrEnum):
    """What an overlay candidate routes to (§5 ``kind``)."""

    INFERENCE_MODEL = "inference_model"
    """A model served by an inference provider (chat and completions)."""
    MCP_TOOL = "mcp_tool"
    """A tool served by an MCP server (upstream's reserved kind)."""
    A2A_AGENT = "a2a_agent"
    """An agent reached over A2A (§16)."""


KIND_NOUNS: dict[str, str] = {
    CandidateKind.INFERENCE_MODEL.value: "model",
    CandidateKind.MCP_TOOL.value: "tool",
    CandidateKind.A2A_AGENT.value: "agent",
}
"""The word a message or a table uses for each candidate kind."""


class AdmissionState(StrEnum):
    """Whether a candidate may take new sessions, only existing ones, or none."""

    NEW_AND_EXISTING = "new_and_existing"
    EXISTING_ONLY = "existing_only"
    EXCLUDED = "excluded"


ADMISSION_NONE = "none"
"""Upstream's overlay ``admission_state`` for `AdmissionState.EXCLUDED`: a candidate that
serves no request, not even a bound session. Grid never writes it (an excluded candidate
leaves the overlay); readers accept it."""

OVERLAY_ADMISSIONS: dict[str, AdmissionState] = {
    AdmissionState.NEW_AND_EXISTING.value: AdmissionState.NEW_AND_EXISTING,
    AdmissionState.EXISTING_ONLY.value: AdmissionState.EXISTING_ONLY,
    ADMISSION_NONE: AdmissionState.EXCLUDED,
}
"""Every ``admission_state`` an overlay reader accepts (§5), by its wire name."""

ADMISSION_ORDER: dict[AdmissionState, int] = {state: i for i, state in enumerate(AdmissionState)}
"""How candidates sort by admission: ``new_and_existing`` first."""


class SelectionTier(StrEnum):
    """The locality tier of a candidate relative to the gateway's local site."""

    SAME_SITE = "same_site"
    SAME_ZONE = "same_zone"
    SAME_REGION = "same_region"
    CROSS_REGION = "cross_region"
    UNKNOWN = "unknown"
    """Upstream's tier when a site has no region; an overlay reader accepts it and
    orders it after ``cross_region``. Grid's scoring never assigns it."""


TIER_ORDER: dict[SelectionTier, int] = {tier: i for i, tier in enumerate(SelectionTier)}
"""How candidates sort by tier: nearest first, ``unknown`` after ``cross_region``."""

SIGNAL_NAMES = ("locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost")
"""The six signals in their fixed order (weights, scores and breakdowns follow it)."""

NEUTRAL_SIGNAL_SCORE = 0.5
"""The score of a missing signal: neutral, so absence neither helps nor hurts."""


@dataclass(frozen=True)
class ScoreBreakdown:
    """Each signal's contribution wᵢ·sᵢ / Σw, and ``total`` (the score)."""

    locality: float
    queue_depth: float
    kv_cache: float
    prefix_cache: float
    latency: float
    cost: float
    total: float

    def as_dict(self) -> dict[str, float]:
        """The wire form of §5 ``score_breakdown``."""
        return {
            "locality": self.locality,
            "queue_depth": self.queue_depth,
            "kv_cache": self.kv_cache,
            "prefix_cache": self.prefix_cache,
            "latency": self.latency,
            "cost": self.cost,
            "total": self.total,
        }


class OverlayFormat(StrEnum):
    """``gatewayRefs[].overlayFormat``: the layout of a gateway's overlay ConfigMap.

    ``grid`` (the default) is SPEC-DECISIONS §1's keys; ``upstream`` is upstream
    Grid's keys, annotations and name rule, for consumers written against it.
    The overlay documents are the same in both.
    """

    GRID = "grid"
    UPSTREAM = "upstream"


class RouteIdentity(Protocol):
    """What names a routing candidate: its kind, name, site, cluster and freshness.

    The overlay's writer and the gateway's re-ranking both read candidates through
    protocols that extend this one.
    """

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def site(self) -> str: ...
    @property
    def cluster(self) -> str: ...
    @property
    def fresh(self) -> bool: ...


class RoutingPolicy(StrEnum):
    """``GridNetwork.spec.routingPolicy``: what makes candidates equivalent (§14).

    The values are upstream Grid's spellings. ``geographyFirst`` (the default)
    groups candidates by admission, tier and freshness, so remote providers
    stay a fallback; ``scoreFirst`` groups by admission and freshness, so
    eligible providers of every site share one group.
    """

    GEOGRAPHY_FIRST = "geographyFirst"
    SCORE_FIRST = "scoreFirst"


class SelectionMode(StrEnum):
    """``GridNetwork.spec.selectionPolicy.mode``: how a gateway picks inside a group (§14).

    Written in the overlay as `SelectionPolicy` (``leastLoaded`` as ``random``
    plus ``selection_load_aware``, so a consumer that does not know it falls
    back to random within the group, never to herding).
    """

    DETERMINISTIC = "deterministic"
    ROUND_ROBIN = "roundRobin"
    RANDOM = "random"
    WEIGHTED_RANDOM = "weightedRandom"
    LEAST_LOADED = "leastLoaded"


class SelectionPolicy(StrEnum):
    """The overlay's top-level ``selection_policy`` (§14), upstream's wire values."""

    DETERMINISTIC = "deterministic"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    WEIGHTED_RANDOM = "weighted_random"


CAPACITY_WEIGHT_MIN = 1
CAPACITY_WEIGHT_MAX = 1000
"""``InferenceProvider.spec.capacityWeight`` bounds (§14), also the overlay's
``traffic_weight`` and ``capacity_weight`` bounds; the default weight is 1."""
