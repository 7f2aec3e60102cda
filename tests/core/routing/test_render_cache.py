"""A render through a `RenderCache` is a render from scratch, byte for byte, every round.

Random rounds change the mesh as an operator sees it (remote records added,
removed and updated, an own provider edited, signals moving, the clock crossing
the freshness and stale-TTL boundaries, the stabilized-admission hold set, the
network's scoring and selection settings), and after each one the operator's
incremental path (`RecordViews`, `RenderCache`) must give exactly the overlay,
envelope, file text, digest and ranking of a render that keeps nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.overlay import canonical_digest
from grid.core.resources import API_VERSION, SITE_LABEL, GridNetwork, GridSite, InferenceProvider
from grid.core.routing.mesh_view import (
    OriginRecord,
    RecordViews,
    live_records,
    mesh_inputs,
    signals_document,
)
from grid.core.routing.render import Rendered, render
from grid.core.routing.render_cache import RenderCache

NETWORK = "mesh"
OWN = "s0"
ORIGINS = ("s1", "s2", "s3")
NAMES = tuple(f"p{i}" for i in range(6))
MODELS = ("llama", "qwen", "mistral")
TTL_S = 300
START = datetime(2026, 1, 1, tzinfo=UTC)
PRESSURE = {
    "enterThreshold": 0.6,
    "exitThreshold": 0.4,
    "failureThreshold": 2,
    "successThreshold": 3,
    "minimumStateDuration": "10s",
    "recoveryHoldDown": "30s",
}


def _network(spec_extra: dict[str, Any]) -> GridNetwork:
    spec: dict[str, Any] = {
        "gatewayRefs": [{"name": "edge", "namespace": "grid", "localSiteName": OWN}],
        **spec_extra,
    }
    return GridNetwork.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": spec,
        }
    )


def _sites(variant: tuple[str, str]) -> list[GridSite]:
    """The four GridSites; ``variant`` is the own site's team label and s2's region."""
    team, region_s2 = variant
    regions = {"s0": (None, None), "s1": ("r1", "r1-a"), "s2": (region_s2, "r1-b")}
    regions["s3"] = ("r2", None)
    return [
        GridSite.model_validate(
            {
                "apiVersion": API_VERSION,
                "kind": "GridSite",
                "metadata": {"name": name, "labels": {"team": team if name == OWN else name}},
                "spec": {"gridNetworkRef": NETWORK, "region": region, "zone": zone},
            }
        )
        for name, (region, zone) in regions.items()
    ]


def _own(cost: float | None, weight: int, models: tuple[str, ...]) -> InferenceProvider:
    """The site's own provider, validated afresh each round as the store hands it out."""
    spec: dict[str, Any] = {
        "gridNetworkRef": NETWORK,
        "backendKind": "local",
        "providerKind": "self_hosted",
        "models": [{"name": m} for m in models],
        "capacityWeight": weight,
    }
    if cost is not None:
        spec["cost"] = {"perMillionInputTokens": cost}
    return InferenceProvider.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": {"name": "own", "labels": {SITE_LABEL: OWN}},
            "spec": spec,
            "status": {"phase": "Available"},
        }
    )


@dataclass
class Mesh:
    """What the operator reads in one round: records, its own provider, settings, time."""

    now: datetime = START
    records: dict[tuple[str, str], ProviderRecord] = field(default_factory=dict)
    own: tuple[float | None, int, tuple[str, ...]] = (None, 1, ("llama",))
    spec: dict[str, Any] = field(default_factory=lambda: {"staleCandidateTtlSeconds": TTL_S})
    held: frozenset[tuple[str, str]] | None = None
    sites: tuple[str, str] = ("s0", "r1")
    kept_own: tuple[tuple[float | None, int, tuple[str, ...]], InferenceProvider] | None = None


ratio = st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.5, 0.7, 0.86, 0.91, 0.99]))
record_fields = st.fixed_dictionaries(
    {
        "queue": ratio,
        "kv": ratio,
        "latency": st.one_of(st.none(), st.sampled_from([50.0, 900.0, 6000.0])),
        "healthy": st.sampled_from([True, False, None]),
        "age_s": st.sampled_from([0, 30, 59, 61, 200, 299, 301]),
        "models": st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True),
        "kind": st.sampled_from(["local", "cloud_managed", "api_provider"]),
        "phase": st.sampled_from(["Available", "Available", "Degraded", "Unavailable"]),
        "weight": st.sampled_from([1, 3]),
        "access": st.sampled_from([(), (("team", "s0"),), (("team", "s1"),)]),
    }
)
put = st.tuples(st.just("put"), st.sampled_from(ORIGINS), st.sampled_from(NAMES), record_fields)
own_signals = st.tuples(st.just("put"), st.just(OWN), st.just("own"), record_fields)
"""The own provider's record: its signals entry changes while the provider stays."""
remove = st.tuples(st.just("remove"), st.sampled_from(ORIGINS), st.sampled_from(NAMES))
advance = st.tuples(st.just("advance"), st.sampled_from([0, 1, 2, 29, 31, 61, 120, 301]))
own = st.tuples(
    st.just("own"),
    st.sampled_from([None, 0.5, 40.0]),
    st.sampled_from([1, 2]),
    st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True),
)
hold = st.tuples(
    st.just("hold"),
    st.one_of(
        st.none(),
        st.just(frozenset()),
        st.frozensets(st.tuples(st.sampled_from(ORIGINS), st.sampled_from(NAMES)), max_size=4),
    ),
)
network_settings = st.fixed_dictionaries(
    {
        "ttl": st.sampled_from([None, 60, TTL_S]),
        "region": st.sampled_from([None, "r1", "r2"]),
        "mode": st.sampled_from(
            ["deterministic", "roundRobin", "random", "weightedRandom", "leastLoaded"]
        ),
        "routing": st.sampled_from(["geographyFirst", "scoreFirst"]),
        "queue_weight": st.sampled_from([1, 3, 6]),
        "admission": st.sampled_from(
            [None, {"mode": "stabilized", "pressure": PRESSURE}, {"missingMetrics": "excluded"}]
        ),
    }
)
settings_change = st.tuples(st.just("network"), network_settings)
sites_change = st.tuples(
    st.just("sites"), st.tuples(st.sampled_from(["s0", "s1"]), st.sampled_from(["r1", "r2"]))
)
step = st.one_of(
    put, own_signals, remove, advance, own, hold, settings_change, sites_change, st.just(("same",))
)


def _apply(mesh: Mesh, change: tuple[Any, ...]) -> None:
    match change[0]:
        case "put":
            _, origin, name, f = change
            mesh.records[origin, name] = ProviderRecord(
                name=name,
                cluster=f"{name}-{origin}",
                site=origin,
                backend_kind=f["kind"],
                models=tuple(f["models"]),
                healthy=f["healthy"],
                observed_at=(mesh.now - timedelta(seconds=f["age_s"])).timestamp(),
                signals=RecordSignals(
                    queue_depth=f["queue"],
                    kv_cache_utilization=f["kv"],
                    p99_latency_ms=f["latency"],
                ),
                phase=f["phase"],
                capacity_weight=f["weight"],
                access_match_labels=f["access"],
            )
        case "remove":
            mesh.records.pop((change[1], change[2]), None)
        case "advance":
            mesh.now += timedelta(seconds=change[1])
        case "own":
            mesh.own = (change[1], change[2], tuple(change[3]))
        case "hold":
            mesh.held = change[1]
        case "network":
            f = change[1]
            spec: dict[str, Any] = {
                "selectionPolicy": {"mode": f["mode"]},
                "routingPolicy": f["routing"],
                "scoring": {"weights": {"queue_depth": f["queue_weight"]}},
            }
            if f["region"] is not None:
                spec["region"] = f["region"]
            if f["ttl"] is not None:
                spec["staleCandidateTtlSeconds"] = f["ttl"]
            if f["admission"] is not None:
                spec["admissionPolicy"] = f["admission"]
            mesh.spec = spec
        case "sites":
            mesh.sites = change[1]


def _round(mesh: Mesh, views: RecordViews | None, cache: RenderCache | None) -> Rendered:
    """One operator round: live records, mesh inputs, the signals document, the render."""
    network = _network(mesh.spec)
    ttl = network.spec.stale_candidate_ttl_seconds
    records = live_records(
        (OriginRecord(origin, name, r) for (origin, name), r in sorted(mesh.records.items())),
        OWN,
        mesh.now.timestamp(),
        float(ttl) if ttl is not None else None,
    )
    own_provider = _own(*mesh.own)
    if views is not None:
        # The store hands out the same object while the resource is the same.
        if mesh.kept_own is None or mesh.kept_own[0] != mesh.own:
            mesh.kept_own = (mesh.own, own_provider)
        own_provider = mesh.kept_own[1]
    inputs = mesh_inputs(network, _sites(mesh.sites), [own_provider], [], records, OWN, views=views)
    signals = signals_document(
        NETWORK, OWN, records, now=mesh.now, epoch=1, sequence=1, views=views
    )
    if views is not None:
        views.next_round()
    return render(
        inputs, site=OWN, gateway="edge", now=mesh.now, signals=signals, held=mesh.held, cache=cache
    )


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _assert_same_rounds(first: tuple[Any, ...], steps: list[tuple[Any, ...]]) -> None:
    """Apply ``first`` then each step; after each, the kept render equals the scratch one."""
    mesh = Mesh()
    views, cache = RecordViews(), RenderCache()
    for change in [first, *steps]:
        _apply(mesh, change)
        kept = _round(mesh, views, cache)
        scratch = _round(mesh, None, None)
        assert kept.texts == (_text(scratch.overlay), _text(scratch.envelope)), change
        assert kept.texts == scratch.texts
        files = kept.file_texts
        # The kept literals are the files' JSON string literals, as a store writes them.
        if files.config_literal is not None:
            assert files.config_literal == json.dumps(files.config)
            assert files.envelope_literal == json.dumps(files.envelope)
        assert scratch.file_texts.config_literal is None
        assert kept.overlay == scratch.overlay
        assert kept.envelope == scratch.envelope
        assert kept.envelope["revision"]["value"] == canonical_digest(scratch.overlay)
        assert kept.evaluated.ranking == scratch.evaluated.ranking
        assert [d[1:] for d in kept.evaluated.drafts] == [d[1:] for d in scratch.evaluated.drafts]


@settings(max_examples=300)
@given(settings_change, st.lists(step, min_size=1, max_size=25))
def test_incremental_render_equals_a_render_from_scratch_at_every_step(
    first: tuple[Any, ...], steps: list[tuple[Any, ...]]
) -> None:
    _assert_same_rounds(first, steps)


@settings(max_examples=200)
@given(st.lists(st.one_of(put, own_signals, remove, advance), min_size=1, max_size=30))
def test_records_and_the_clock_alone_never_leave_a_stale_candidate(
    steps: list[tuple[Any, ...]],
) -> None:
    _assert_same_rounds(("same",), steps)


stabilized = network_settings.map(
    lambda f: ("network", {**f, "admission": {"mode": "stabilized", "pressure": PRESSURE}})
)


@settings(max_examples=200)
@given(stabilized, st.lists(st.one_of(put, hold, stabilized), min_size=1, max_size=20))
def test_a_hold_set_change_rescores_exactly_what_it_holds(
    first: tuple[Any, ...], steps: list[tuple[Any, ...]]
) -> None:
    _assert_same_rounds(first, steps)


def test_a_round_with_one_change_redrafts_and_rescores_only_that_provider() -> None:
    mesh = Mesh()
    for i, name in enumerate(NAMES):
        for origin in ORIGINS:
            _apply(mesh, ("put", origin, name, _fields(queue=0.1 * i)))
    views, cache = RecordViews(), RenderCache()
    first = _round(mesh, views, cache)
    assert cache.drafted == len(NAMES) * len(ORIGINS) + 1
    _apply(mesh, ("put", "s2", "p3", _fields(queue=0.05)))
    second = _round(mesh, views, cache)
    assert (cache.drafted, cache.scored) == (1, 1)
    assert cache.candidates.reused == len(second.overlay["candidates"]) - 2
    assert second.envelope["revision"] != first.envelope["revision"]
    assert second.texts == (_text(second.overlay), _text(second.envelope))
    assert second.file_texts.config_literal == json.dumps(second.texts[0])
    assert second.file_texts.envelope_literal == json.dumps(second.texts[1])


def _fields(queue: float) -> dict[str, Any]:
    return {
        "queue": queue,
        "kv": 0.1,
        "latency": 50.0,
        "healthy": True,
        "age_s": 0,
        "models": ["llama", "qwen"],
        "kind": "local",
        "phase": "Available",
        "weight": 1,
        "access": (),
    }


def _named(name: str, network: str, cost: float) -> InferenceProvider:
    return InferenceProvider.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceProvider",
            "metadata": {"name": name, "labels": {SITE_LABEL: OWN}},
            "spec": {
                "gridNetworkRef": network,
                "backendKind": "local",
                "providerKind": "self_hosted",
                "models": [{"name": "llama"}],
                "cost": {"perMillionInputTokens": cost},
            },
        }
    )


POOL = [
    _named(name, network, cost)
    for name in ("a", "b", "c")
    for network in (NETWORK, "other")
    for cost in (1.0, 2.0)
]


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(range(len(POOL))), max_size=8),
    st.lists(
        st.tuples(st.integers(0, 7), st.sampled_from(range(len(POOL))), st.booleans()),
        max_size=12,
    ),
)
def test_providers_sorted_by_name_through_the_cache_are_sorted_afresh(
    first: list[int], steps: list[tuple[int, int, bool]]
) -> None:
    """Replacing a provider by one of another name or network sorts again; by one of
    the same name and network reuses the order; either way it is the stable sort."""
    cache = RenderCache()
    providers = [POOL[i] for i in first]
    for at, pick, grow in [(0, 0, False), *steps]:
        if grow:
            providers.insert(at % (len(providers) + 1), POOL[pick])
        elif providers:
            providers[at % len(providers)] = POOL[pick]
        expected = sorted(
            (p for p in providers if p.spec.grid_network_ref == NETWORK),
            key=lambda p: p.metadata.name,
        )
        assert cache.by_name(tuple(providers), NETWORK) == expected
        assert [id(p) for p in cache.by_name(providers, NETWORK)] == [id(p) for p in expected]
