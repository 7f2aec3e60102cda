"""Rendering ``praxis.yaml``: a complete gateway configuration from an overlay (§11).

`render_consumer_config` turns a gateway's overlay and its ``consumerConfig``
into the Praxis configuration that ``grid gateway`` (and a Praxis gateway)
runs: the public listener, one filter chain (``client_auth``, ``json_body_field``,
``intelligent_route``, ``credential_inject`` when a candidate has a credential,
``load_balancer``), the admin listener and the shutdown timeout.

It fails closed: every distinct candidate cluster needs an endpoint with a
transport, ``mutual_tls`` needs an ``sni`` and ``plaintext`` refuses one. The
first problem found, in overlay order, is the render's reason.

The ``load_balancer`` clusters are listed by name and the ``credential_inject``
entries by (strategy, name, namespace, key), as upstream Grid orders them, not
in rank order: with ``overlay_file`` the text then changes only when the set of
clusters or credentials (or the config) does, not whenever the ranking moves.

Only what the gateway needs is copied: the §14 selection fields (the route
filter's ``selection_policy`` and ``selection_load_aware``, each candidate's
``selection_group`` and ``traffic_weight`` or ``capacity_weight``) are, but
operator-only candidate fields (``stable_id``, ``admission_state``,
``selection_tier``, ``rank``) and ``generated_at`` never enter the file, and
credentials are only ever ``file:`` references under ``credentialMountBase``.
The YAML is written by PyYAML with every string double-quoted, so a model
named ``a: b`` or ``- x`` parses back as itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from grid.core.identity import RENDERED_MODES
from grid.core.overlay.envelope import Scope
from grid.core.resources.network_spec import ClusterEndpointSpec, ConsumerSpec

CONFIG_KEY = "praxis.yaml"
"""The one data key of the consumer-config ConfigMap (and the embedded file name)."""

CHAIN_NAME = "consumer-chain"
"""The name of the one rendered filter chain."""

MODEL_HEADER = "X-Model"
"""The header `json_body_field` fills from the body's ``model`` and routing reads."""

SHUTDOWN_TIMEOUT_SECS = 5
"""The rendered drain time on SIGTERM (§11)."""

MISSING_CLUSTER_ENDPOINT = "MissingClusterEndpoint"
MISSING_TRANSPORT = "MissingTransport"
MISSING_SNI = "MissingSni"
PLAINTEXT_WITH_SNI = "PlaintextWithSni"
FAIL_CLOSED_REASONS = (
    MISSING_CLUSTER_ENDPOINT,
    MISSING_TRANSPORT,
    MISSING_SNI,
    PLAINTEXT_WITH_SNI,
)
"""Every reason a render fails closed with, in the order each cluster is checked."""
RENDER_FAILED = "ConsumerConfigRenderFailed"
"""Upstream's reason for a render that failed otherwise (an input it could not take)."""
CONFIG_ERROR = "ConsumerConfigError"
"""Upstream's reason for any other failure: in Grid, the embedded file not written."""
DISABLED = "ConsumerConfigDisabled"
"""Upstream's reason for a gateway whose consumerConfig is absent or not enabled."""

_CANDIDATE_FIELDS = (
    "kind",
    "name",
    "site",
    "cluster",
    "fresh",
    "selection_group",
    "traffic_weight",
    "capacity_weight",
)
"""The candidate fields copied inline when present; `credential` follows when present."""

_ROUTE_SELECTION_FIELDS = ("selection_policy", "selection_load_aware")
"""The overlay's top-level §14 fields, copied onto the route filter when present."""


@dataclass(frozen=True)
class ConsumerConfigError:
    """A render that failed closed: the §11 reason and a sentence naming the cluster."""

    reason: str
    message: str


@dataclass(frozen=True)
class RenderedConsumerConfig:
    """A rendered ``praxis.yaml``: its text and the document it encodes."""

    text: str
    document: dict[str, Any]


def render_consumer_config(
    overlay: Mapping[str, Any],
    scope: Scope,
    config: ConsumerSpec,
    overlay_file: str | None = None,
    ranking: Mapping[str, Any] | None = None,
    default_tenant: str | None = None,
) -> RenderedConsumerConfig | ConsumerConfigError:
    """The ``praxis.yaml`` for one gateway, or why it fails closed.

    ``overlay`` is the bare overlay (``grid-config.json``). With ``overlay_file``
    the route filter reads the envelope at that path (verified against
    ``scope``) instead of carrying the candidates inline; the clusters and
    credentials are still those of ``overlay``'s candidates. With ``ranking``
    (under ``signalTransport.mode: poll``; `RerankContext.route_fields`) the route
    filter also carries the network's ``scoring`` settings and the ``sites``'
    geography, which the gateway scores pulled signals with. ``default_tenant``
    (``budgetPolicy.defaultTenant``) is what ``clientAuth.mode: none`` charges a
    request without a tenant header to.
    """
    candidates: Sequence[Mapping[str, Any]] = overlay["candidates"]
    clusters = _distinct(str(c["cluster"]) for c in candidates)
    endpoints = {e.cluster: e for e in config.cluster_endpoints}
    problem = _first_problem(clusters, endpoints)
    if problem is not None:
        return problem
    filters: list[dict[str, Any]] = [
        client_auth_filter(config, default_tenant),
        {"filter": "json_body_field", "field": "model", "header": MODEL_HEADER},
        _route_filter(overlay, candidates, scope, overlay_file, ranking),
    ]
    credentials = _credentials(candidates, config.credential_mount_base)
    if credentials:
        filters.append({"filter": "credential_inject", "credentials": credentials})
    filters.append(
        {
            "filter": "load_balancer",
            "clusters": [_cluster(endpoints[name], config) for name in sorted(clusters)],
        }
    )
    document: dict[str, Any] = {
        "listeners": [
            {
                "name": "public",
                "address": f"{config.listener_host}:{config.listener_port}",
                "filter_chains": [CHAIN_NAME],
            }
        ],
        "filter_chains": [{"name": CHAIN_NAME, "filters": filters}],
        "admin": {"address": config.admin_address},
        "shutdown_timeout_secs": SHUTDOWN_TIMEOUT_SECS,
    }
    return RenderedConsumerConfig(text=dump_yaml(document), document=document)


def client_auth_filter(config: ConsumerSpec, default_tenant: str | None) -> dict[str, Any]:
    """The ``client_auth`` filter of ``consumerConfig.clientAuth`` (§15): file references only."""
    auth = config.client_auth
    section: dict[str, Any] = {"filter": "client_auth", "mode": RENDERED_MODES[auth.mode]}
    if auth.mode == "apiKey":
        ref = auth.secret_ref
        assert ref is not None and ref.key
        root = config.credential_mount_base.rstrip("/")
        section["keys_file"] = f"{root}/{ref.name}/{ref.key}"
    elif auth.mode == "mtls":
        tls = config.tls_cert_mount_path.rstrip("/")
        section["tls"] = {
            "ca_path": f"{tls}/ca.crt",
            "cert_path": f"{tls}/tls.crt",
            "key_path": f"{tls}/tls.key",
        }
    elif default_tenant is not None:
        section["default_tenant"] = default_tenant
    return section


def _distinct(values: Any) -> list[str]:
    return list(dict.fromkeys(values))


def _first_problem(
    clusters: Sequence[str], endpoints: Mapping[str, ClusterEndpointSpec]
) -> ConsumerConfigError | None:
    for name in clusters:
        endpoint = endpoints.get(name)
        if endpoint is None:
            return ConsumerConfigError(
                MISSING_CLUSTER_ENDPOINT,
                f"candidate cluster {name!r} has no clusterEndpoints entry",
            )
        transport = endpoint.transport
        if transport is None:
            return ConsumerConfigError(
                MISSING_TRANSPORT, f"the endpoint of cluster {name!r} has no transport"
            )
        if transport.mode == "mutual_tls" and not transport.sni:
            return ConsumerConfigError(
                MISSING_SNI, f"cluster {name!r} uses mutual_tls without an sni"
            )
        if transport.mode == "plaintext" and transport.sni:
            return ConsumerConfigError(
                PLAINTEXT_WITH_SNI, f"cluster {name!r} is plaintext but names an sni"
            )
    return None


def _route_filter(
    overlay: Mapping[str, Any],
    candidates: Sequence[Mapping[str, Any]],
    scope: Scope,
    overlay_file: str | None,
    ranking: Mapping[str, Any] | None,
) -> dict[str, Any]:
    route: dict[str, Any] = {
        "filter": "intelligent_route",
        "local_site": overlay["local_site"],
        "model_header": MODEL_HEADER,
    }
    for key in _ROUTE_SELECTION_FIELDS:
        if key in overlay:
            route[key] = overlay[key]
    if overlay_file is not None:
        route["overlay_file"] = overlay_file
        route["expected_scope"] = scope.as_dict()
    else:
        route["candidates"] = [_inline_candidate(c) for c in candidates]
    if ranking is not None:
        route.update(ranking)
    return route


def _inline_candidate(candidate: Mapping[str, Any]) -> dict[str, Any]:
    inline = {key: candidate[key] for key in _CANDIDATE_FIELDS if key in candidate}
    credential = candidate.get("credential")
    if credential is not None:
        ref = credential["secretRef"]
        inline["credential"] = {
            "strategy": credential["strategy"],
            "secretRef": {"name": ref["name"], "namespace": ref["namespace"], "key": ref["key"]},
        }
    return inline


def _credentials(candidates: Sequence[Mapping[str, Any]], base: str) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    root = base.rstrip("/") or "/"
    for candidate in candidates:
        credential = candidate.get("credential")
        if credential is None:
            continue
        ref = credential["secretRef"]
        key = (ref["name"], ref["namespace"], ref["key"], credential["strategy"])
        if key not in seen:
            seen[key] = {
                "name": ref["name"],
                "namespace": ref["namespace"],
                "key": ref["key"],
                "strategy": credential["strategy"],
                "file": f"{root.rstrip('/')}/{ref['name']}/{ref['key']}",
            }
    return [seen[key] for key in sorted(seen, key=_credential_order)]


def _credential_order(key: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    """Upstream's order of credential entries: strategy, then name, namespace, key."""
    name, namespace, secret_key, strategy = key
    return strategy, name, namespace, secret_key


def _cluster(endpoint: ClusterEndpointSpec, config: ConsumerSpec) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": endpoint.cluster, "endpoints": [endpoint.address]}
    transport = endpoint.transport
    if transport is not None and transport.mode == "mutual_tls":
        tls = config.tls_cert_mount_path.rstrip("/")
        cluster["tls"] = {
            "ca": {"ca_path": f"{tls}/ca.crt"},
            "client_cert": {"cert_path": f"{tls}/tls.crt", "key_path": f"{tls}/tls.key"},
            "sni": transport.sni,
            "verify": True,
        }
    return cluster


_PLAIN_KEY = re.compile(r"[A-Za-z_]+")
"""Mapping keys that stay unquoted: the fixed field names of the format."""


class _QuotingDumper(yaml.SafeDumper):
    """A safe dumper that double-quotes every string value and never writes aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_mapping(self, tag: str, mapping: Any, flow_style: Any = None) -> yaml.MappingNode:
        node = super().represent_mapping(tag, mapping, flow_style)
        for key_node, _value in node.value:
            if isinstance(key_node, yaml.ScalarNode) and _PLAIN_KEY.fullmatch(key_node.value):
                key_node.style = None
        return node


def _quoted_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


_QuotingDumper.add_representer(str, _quoted_str)


def dump_yaml(document: Mapping[str, Any]) -> str:
    """YAML text of ``document``: block style, keys in order, every string quoted."""
    return yaml.dump(
        dict(document),
        Dumper=_QuotingDumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        width=2**31 - 1,
    )
