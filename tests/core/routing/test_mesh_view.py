"""The mesh as one site sees it: store resources plus peers' records, into render inputs.

The scenario is a three-site grid: east and central share the region us-east-1
(different zones), west is in us-west-2. Each site holds one self-hosted
provider; peers learn about the others only through CRDT records.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from grid.core.crdt import GridStateSnapshot, Lane
from grid.core.crdt.payload import decode_lane, encode_lane
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.resources import API_VERSION, SITE_LABEL, GridNetwork, GridSite, InferenceProvider
from grid.core.routing.mesh_view import (
    SIGNALS_SCHEMA_VERSION,
    OriginRecord,
    converged_grid_id,
    live_records,
    mesh_inputs,
    record_for,
    remote_provider,
    signals_document,
)
from grid.core.routing.render import Rendered, render
from grid.core.vocabulary import BackendKind

NETWORK = "grid-test"
MODEL = "llama"
NOW_S = 1_800_000_000.0
NOW = datetime.fromtimestamp(NOW_S, UTC)
GEOGRAPHY = {
    "east": ("us-east-1", "us-east-1a"),
    "central": ("us-east-1", "us-east-1b"),
    "west": ("us-west-2", "us-west-2a"),
}


def network(ttl: int | None = None) -> GridNetwork:
    """The grid, with one gateway per site."""
    spec: dict[str, Any] = {
        "gatewayRefs": [
            {"name": f"edge-{s}", "namespace": "grid-system", "localSiteName": s} for s in GEOGRAPHY
        ]
    }
    if ttl is not None:
        spec["staleCandidateTtlSeconds"] = ttl
    return GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": spec,
        }
    )


def sites() -> list[GridSite]:
    """Every site's GridSite; only east carries the ``team: east`` label."""
    return [
        GridSite.model_validate(
            {
                "apiVersion": API_VERSION,
                "kind": "GridSite",
                "metadata": {"name": name, "labels": {"team": name}},
                "spec": {"gridNetworkRef": NETWORK, "region": region, "zone": zone},
            }
        )
        for name, (region, zone) in GEOGRAPHY.items()
    ]


def provider(
    name: str,
    site: str,
    *,
    match_labels: dict[str, str] | None = None,
    provider_kind: str = "self_hosted",
    backend_kind: str = "local",
    phase: str | None = None,
) -> InferenceProvider:
    """An InferenceProvider held by ``site``'s operator."""
    spec: dict[str, Any] = {
        "gridNetworkRef": NETWORK,
        "backendKind": backend_kind,
        "providerKind": provider_kind,
        "models": [{"name": MODEL}],
        "cost": {"perMillionInputTokens": 2.0},
    }
    if match_labels is not None:
        spec["accessPolicy"] = {"siteSelector": {"matchLabels": match_labels}}
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": name, "labels": {SITE_LABEL: site}},
        "spec": spec,
    }
    if phase is not None:
        doc["status"] = {"phase": phase}
    return InferenceProvider.model_validate(doc)


def published(p: InferenceProvider, site: str, *, age_s: float = 1.0) -> OriginRecord:
    """The record ``site``'s operator publishes for ``p``, as a peer decodes it."""
    record = record_for(
        p,
        site,
        signals=RecordSignals(queue_depth=0.25, kv_cache_utilization=0.5),
        healthy=True,
        observed_at_s=NOW_S - age_s,
    )
    # Through the wire, so the test covers what a peer really receives.
    state = GridStateSnapshot.empty(site).put_provider(p.name, record).state
    decoded = decode_lane(Lane.STATE, encode_lane(state), site)
    return OriginRecord(site, p.name, decoded.live_providers()[p.name])  # type: ignore[arg-type]


def raw(origin: str, name: str, site: str | None = None, *, age_s: float = 1.0) -> OriginRecord:
    """A bare record from ``origin`` naming ``site`` (the origin unless given)."""
    record = ProviderRecord(
        name=name,
        cluster=name,
        site=site or origin,
        backend_kind="local",
        models=(MODEL,),
        healthy=True,
        observed_at=NOW_S - age_s,
    )
    return OriginRecord(origin, name, record)


def render_at(
    site: str,
    own: list[InferenceProvider],
    records: list[OriginRecord],
    net: GridNetwork | None = None,
) -> Rendered:
    """What ``site``'s operator renders for its gateway from these inputs."""
    net = net or network()
    ttl = net.spec.stale_candidate_ttl_seconds
    live = live_records(records, site, NOW_S, float(ttl) if ttl is not None else None)
    inputs = mesh_inputs(net, sites(), own, [], live, site)
    doc = signals_document(NETWORK, site, live, now=NOW, epoch=1, sequence=1)
    return render(inputs, site=site, gateway=f"edge-{site}", now=NOW, signals=doc)


def by_site(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """The overlay's candidates keyed by their site."""
    return {c["site"]: c for c in rendered.overlay["candidates"]}


# -- remote records become providers -------------------------------------------------


def test_a_remote_record_becomes_a_provider_labelled_with_its_origin() -> None:
    west = provider("vllm-west", "west", provider_kind="vertex", phase="Degraded")
    inputs = mesh_inputs(network(), sites(), [], [], [published(west, "west")], "east")
    (remote,) = inputs.providers
    assert remote.name == "vllm-west"
    assert remote.site_label == "west"
    assert remote.cluster == "vllm-west"
    assert remote.phase.value == "Degraded"
    assert remote.spec.provider_kind == "vertex"
    assert remote.spec.backend_kind == "local"
    assert [m.name for m in remote.spec.models] == [MODEL]
    assert remote.spec.auth is None  # a peer's Secret lives in its own cluster


def test_records_of_the_operators_own_origin_are_not_added_as_remote_providers() -> None:
    east = provider("vllm-east", "east")
    inputs = mesh_inputs(network(), sites(), [east], [], [published(east, "east")], "east")
    assert inputs.providers == (east,)


def test_a_record_naming_another_site_than_its_origin_is_dropped() -> None:
    forged = raw("west", "vllm-east", site="east")
    honest = raw("west", "vllm-west")
    kept = live_records([forged, honest], "central", NOW_S, None)
    assert kept == [honest]


def test_stale_remote_records_are_evicted_when_the_ttl_is_set() -> None:
    fresh, stale = raw("west", "fresh", age_s=5), raw("west", "stale", age_s=31)
    assert live_records([fresh, stale], "east", NOW_S, 30.0) == [fresh]


def test_without_a_ttl_stale_remote_records_are_kept() -> None:
    stale = raw("west", "stale", age_s=86_400)
    assert live_records([stale], "east", NOW_S, None) == [stale]


def test_remote_origins_outside_the_trusted_sites_are_dropped() -> None:
    verified, unverified, own = (
        raw("west", "vllm-west"),
        raw("north", "vllm-north"),
        raw("east", "vllm-east"),
    )
    kept = live_records([verified, unverified, own], "east", NOW_S, None, trusted={"west"})
    assert kept == [own, verified]


def test_the_grid_settles_on_the_oldest_grid_id() -> None:
    older = "0190a1b2-0000-7000-8000-000000000000"
    newer = "0190a1b3-0000-7000-8000-000000000000"
    assert converged_grid_id(newer, [older, ""]) == older
    assert converged_grid_id(older, [newer]) == older
    assert converged_grid_id(newer, []) == newer


def test_own_records_are_never_evicted_for_age() -> None:
    own = raw("east", "vllm-east", age_s=86_400)
    assert live_records([own], "east", NOW_S, 30.0) == [own]


def test_live_records_are_sorted_whatever_the_arrival_order() -> None:
    records = [raw("west", "b"), raw("central", "z"), raw("west", "a")]
    kept = live_records(records, "east", NOW_S, None)
    assert [(r.origin, r.record.name) for r in kept] == [
        ("central", "z"),
        ("west", "a"),
        ("west", "b"),
    ]


def test_an_own_provider_wins_over_a_remote_record_with_the_same_site_and_name() -> None:
    own = provider("shared", "west", provider_kind="vertex")
    inputs = mesh_inputs(network(), sites(), [own], [], [raw("west", "shared")], "east")
    assert inputs.providers == (own,)


def test_a_remote_record_that_forms_no_valid_provider_is_dropped_not_fatal() -> None:
    bad = raw("west", "Not A Valid Name!")
    good = raw("west", "vllm-west")
    inputs = mesh_inputs(network(), sites(), [], [], [bad, good], "east")
    assert [p.name for p in inputs.providers] == ["vllm-west"]


def test_a_remote_record_colliding_on_cluster_and_model_is_dropped_so_rendering_succeeds() -> None:
    first = raw("west", "a")
    clash = OriginRecord(
        "west",
        "b",
        ProviderRecord(name="b", cluster="a", site="west", backend_kind="local", models=(MODEL,)),
    )
    live = live_records([first, clash], "east", NOW_S, None)
    inputs = mesh_inputs(network(), sites(), [], [], live, "east")
    assert [p.name for p in inputs.providers] == ["a"]
    rendered = render(inputs, site="east", gateway="edge-east", now=NOW)
    assert [c["cluster"] for c in rendered.overlay["candidates"]] == ["a"]


# -- signals document ----------------------------------------------------------------


def test_the_signals_document_has_one_entry_per_live_record() -> None:
    west = published(provider("vllm-west", "west"), "west", age_s=3)
    central = raw("central", "vllm-central", age_s=2)
    doc = signals_document(NETWORK, "east", [west, central], now=NOW, epoch=7, sequence=42)
    assert (doc.schema_version, doc.network, doc.site) == (SIGNALS_SCHEMA_VERSION, NETWORK, "east")
    assert (doc.epoch, doc.sequence, doc.generated_at) == (7, 42, NOW)
    assert [(e.site, e.name) for e in doc.providers] == [
        ("central", "vllm-central"),
        ("west", "vllm-west"),
    ]
    entry = doc.lookup("west", "vllm-west")
    assert entry is not None
    assert entry.cluster == "vllm-west"
    assert entry.backend_kind is BackendKind.LOCAL
    assert entry.models == (MODEL,)
    assert entry.healthy is True
    assert entry.observed_at == datetime.fromtimestamp(NOW_S - 3, UTC)
    assert entry.signals.queue_depth == 0.25
    assert entry.signals.kv_cache_utilization == 0.5
    # Missing signals stay missing; the cost comes from the provider's spec.
    assert entry.signals.prefix_cache_hit_ratio is None
    assert entry.signals.p99_latency_ms is None
    assert entry.signals.cost_per_million_input_tokens == 2.0


def test_record_for_carries_the_provider_kind_and_access_labels() -> None:
    p = provider(
        "openai",
        "east",
        provider_kind="open_ai",
        backend_kind="api_provider",
        match_labels={"team": "east", "env": "prod"},
    )
    record = record_for(p, "east", signals=RecordSignals(), healthy=None, observed_at_s=NOW_S)
    assert record.provider_kind == "open_ai"
    assert record.access_match_labels == (("env", "prod"), ("team", "east"))
    assert record.signals.cost_per_million_input_tokens == 2.0
    back = remote_provider(record, NETWORK)
    assert back.spec.access_policy is not None
    assert back.spec.access_policy.site_selector.match_labels == {"env": "prod", "team": "east"}


# -- rendering -------------------------------------------------------------------------


def three_sites() -> dict[str, tuple[InferenceProvider, OriginRecord]]:
    """Each site's own provider and the record its peers receive."""
    out = {}
    for site in GEOGRAPHY:
        p = provider(f"vllm-{site}", site, phase="Available")
        out[site] = (p, published(p, site))
    return out


@pytest.mark.parametrize(
    ("local", "tiers"),
    [
        ("east", {"east": "same_site", "central": "same_region", "west": "cross_region"}),
        ("central", {"central": "same_site", "east": "same_region", "west": "cross_region"}),
        ("west", {"west": "same_site", "east": "cross_region", "central": "cross_region"}),
    ],
)
def test_each_site_renders_every_sites_provider_with_the_right_tier(
    local: str, tiers: dict[str, str]
) -> None:
    mesh = three_sites()
    own = [mesh[local][0]]
    records = [record for _p, record in mesh.values()]
    rendered = render_at(local, own, records)
    candidates = by_site(rendered)
    assert {s: c["selection_tier"] for s, c in candidates.items()} == tiers
    assert rendered.overlay["local_site"] == local
    assert candidates[local]["rank"] == 0
    assert all(c["fresh"] for c in candidates.values())


def test_a_stale_remote_provider_disappears_from_the_overlay_while_own_ones_stay() -> None:
    mesh = three_sites()
    records = [
        published(mesh["west"][0], "west", age_s=120),
        published(mesh["east"][0], "east", age_s=120),
        mesh["central"][1],
    ]
    rendered = render_at("east", [mesh["east"][0]], records, network(ttl=30))
    assert set(by_site(rendered)) == {"east", "central"}


def test_an_east_only_provider_at_west_is_routed_by_east_and_refused_to_central() -> None:
    east_only = provider("vllm-west-private", "west", match_labels={"team": "east"})
    record = published(east_only, "west")
    at_east = render_at("east", [], [record])
    at_central = render_at("central", [], [record])
    assert [c["cluster"] for c in at_east.overlay["candidates"]] == ["vllm-west-private"]
    assert at_central.overlay["candidates"] == []
    (row,) = at_central.rows
    assert row.exclusion is not None and row.exclusion.value == "access_denied"


def test_an_open_provider_at_west_is_routed_by_every_peer() -> None:
    record = published(provider("vllm-west", "west"), "west")
    for site in ("east", "central"):
        candidates = render_at(site, [], [record]).overlay["candidates"]
        assert [c["site"] for c in candidates] == ["west"]


def test_identical_mesh_inputs_render_the_identical_revision() -> None:
    mesh = three_sites()
    records = [record for _p, record in mesh.values()]
    first = render_at("east", [mesh["east"][0]], records)
    again = render_at("east", [mesh["east"][0]], list(reversed(records)))
    assert first.envelope["revision"] == again.envelope["revision"]
