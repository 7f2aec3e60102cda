"""praxis.yaml loading: the rendered shape loads, other shapes are refused by field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grid.core.overlay import Scope
from grid.core.overlay.consumer import RenderedConsumerConfig, render_consumer_config
from grid.core.resources.network_spec import ConsumerSpec
from grid.core.routing.candidate import Geography
from grid.core.routing.rerank import RerankContext
from grid.core.routing.scoring import ScoringConfig, ScoringWeights
from grid.gateway.config import ConfigError, load_config, parse_config

SCOPE = Scope("n", "g", "ns", "east")
OVERLAY = {
    "network": "n",
    "local_site": "east",
    "generated_at": "2026-01-01T00:00:00.000Z",
    "candidates": [
        {
            "kind": "inference_model",
            "name": "m",
            "site": "east",
            "cluster": "c",
            "fresh": True,
            "credential": {
                "strategy": "api_key",
                "secretRef": {"name": "s", "namespace": "ns", "key": "k"},
            },
        }
    ],
}


def _rendered() -> RenderedConsumerConfig:
    config = ConsumerSpec.model_validate(
        {
            "enabled": True,
            "clusterEndpoints": [
                {"cluster": "c", "address": "h:1", "transport": {"mode": "mutual_tls", "sni": "x"}}
            ],
        }
    )
    result = render_consumer_config(OVERLAY, SCOPE, config)
    assert isinstance(result, RenderedConsumerConfig)
    return result


def test_the_rendered_file_loads_with_every_part(tmp_path: Path) -> None:
    path = tmp_path / "praxis.yaml"
    path.write_text(_rendered().text)
    config = load_config(path, 1 << 20)
    assert config.listen == "0.0.0.0:8080" and config.admin == "127.0.0.1:9901"
    assert config.model_header == "X-Model" and config.shutdown_timeout_s == 5
    assert config.clusters["c"].tls is not None and config.clusters["c"].tls.sni == "x"
    assert config.credentials[("s", "ns", "k")].file == "/run/secrets/grid-credentials/s/k"
    assert config.inline is not None and config.inline.candidates[0].credential == ("s", "ns", "k")


def test_an_over_large_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "praxis.yaml"
    path.write_text(_rendered().text)
    with pytest.raises(ConfigError, match="larger than"):
        load_config(path, 100)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("admin"), "admin"),
        (lambda d: d["listeners"].append(d["listeners"][0]), "exactly one listener"),
        (lambda d: d["filter_chains"][0]["filters"].pop(), "load_balancer"),
        (lambda d: d["filter_chains"][0]["filters"][2]["candidates"][0].pop("cluster"), "cluster"),
        (
            lambda d: d["filter_chains"][0]["filters"][3]["credentials"][0].update(strategy="x"),
            "strategy",
        ),
        (lambda d: d.update(shutdown_timeout_secs=-1), "shutdown_timeout_secs"),
    ],
)
def test_a_broken_shape_names_the_field(mutate: object, field: str) -> None:
    document = yaml.safe_load(_rendered().text)
    mutate(document)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=field):
        parse_config(document)


def test_the_poll_mode_scoring_and_sites_round_trip_through_the_rendered_file(
    tmp_path: Path,
) -> None:

    ranking = RerankContext(
        "east",
        {"east": Geography("r1", "a"), "west": Geography("r2", None)},
        ScoringConfig(ScoringWeights(1, 2, 3, 4, 5, 6), 750.0, 12.5),
    )
    config = ConsumerSpec.model_validate(
        {
            "enabled": True,
            "clusterEndpoints": [
                {"cluster": "c", "address": "h:1", "transport": {"mode": "plaintext"}}
            ],
        }
    )
    result = render_consumer_config(OVERLAY, SCOPE, config, ranking=ranking.route_fields())
    assert isinstance(result, RenderedConsumerConfig)
    route = result.document["filter_chains"][0]["filters"][2]
    assert route["sites"] == {"east": {"region": "r1", "zone": "a"}, "west": {"region": "r2"}}
    path = tmp_path / "praxis.yaml"
    path.write_text(result.text)
    assert load_config(path, 1 << 20).ranking == ranking


def test_without_scoring_fields_the_defaults_apply() -> None:
    document = yaml.safe_load(_rendered().text)
    ranking = parse_config(document).ranking
    assert ranking is not None and ranking.local_site == "east" and not ranking.geographies

    assert ranking.config == ScoringConfig()


@pytest.mark.parametrize(
    ("fields", "fault"),
    [
        ({"scoring": {"weights": {"speed": 1}}}, "weights may name only"),
        ({"scoring": {"weights": {"cost": -1}}}, "non-negative"),
        ({"scoring": {"weights": {"cost": "x"}}}, "must be a number"),
        ({"scoring": {"latency_ceiling_ms": 0}}, "positive"),
        ({"sites": {"west": {"region": 3}}}, "region and zone must be strings"),
        ({"sites": []}, "must be mappings"),
    ],
)
def test_bad_scoring_fields_are_refused_by_name(fields: dict, fault: str) -> None:
    document = yaml.safe_load(_rendered().text)
    document["filter_chains"][0]["filters"][2].update(fields)
    with pytest.raises(ConfigError, match=fault):
        parse_config(document)
