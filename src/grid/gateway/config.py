"""Loading ``praxis.yaml`` (§11) into the typed configuration the gateway runs.

The file is what `grid.core.overlay.consumer` renders: one public listener, one
filter chain (``json_body_field``, ``intelligent_route``, optional
``credential_inject``, ``load_balancer``), the admin listener and the shutdown
timeout. A file that does not have that shape is refused with a `ConfigError`
naming the field, so a broken config never starts a gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.core.overlay import CANDIDATES_MAX, secret_ref_of
from grid.core.routing.candidate import Geography
from grid.core.routing.rerank import RerankContext
from grid.core.routing.scoring import ScoringConfig, ScoringWeights
from grid.core.vocabulary import SIGNAL_NAMES
from grid.errors import ValidationError
from grid.gateway.snapshot import (
    SelectionFieldError,
    Snapshot,
    policy_of,
    ranked_group_key,
    snapshot_from_candidates,
)

TEXT_MAX = 256
"""Longest candidate kind, name, site or cluster (§5)."""


class ConfigError(ValidationError):
    """praxis.yaml is unreadable or not in the §11 shape; the message names the field."""


@dataclass(frozen=True)
class ClusterTls:
    """mTLS settings of a ``mutual_tls`` cluster."""

    ca_path: str
    cert_path: str
    key_path: str
    sni: str
    verify: bool = True


@dataclass(frozen=True)
class Cluster:
    """One routing cluster: its endpoints and, for mutual_tls, its TLS settings."""

    name: str
    endpoints: tuple[str, ...]
    tls: ClusterTls | None = None


@dataclass(frozen=True)
class CredentialFile:
    """Where one credential reference's value is mounted, and how it is sent."""

    strategy: str
    file: str


@dataclass(frozen=True)
class ClientAuthConfig:
    """The ``client_auth`` filter (§15): how a request's tenant is established.

    ``none`` trusts the tenant header (``default_tenant`` for a request without
    one); ``api_key`` reads hashed keys from ``keys_file``; ``mtls`` requires a
    client certificate from ``ca_path`` on a listener serving ``cert_path`` and
    ``key_path``."""

    mode: str = "none"
    keys_file: str | None = None
    default_tenant: str | None = None
    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None


@dataclass(frozen=True)
class PraxisConfig:
    """Everything ``grid gateway`` needs from praxis.yaml."""

    listen: str
    admin: str
    model_field: str
    model_header: str
    local_site: str
    clusters: Mapping[str, Cluster]
    credentials: Mapping[tuple[str, str, str], CredentialFile]
    """By (secret name, namespace, key)."""
    shutdown_timeout_s: float
    inline: Snapshot | None = None
    """The inline candidates, when the route filter carries them."""
    overlay_file: str | None = None
    expected_scope: Mapping[str, str] | None = None
    ranking: RerankContext | None = None
    """What poll mode scores with: the route filter's optional ``scoring`` and
    ``sites``, defaults where absent (see docs/gateway.md)."""
    client_auth: ClientAuthConfig = ClientAuthConfig()


def _need(mapping: Any, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise ConfigError(f"{where}.{key} is required")
    value = mapping[key]
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise ConfigError(f"{where}.{key} has the wrong type or is blank")
    return value


YAML_DEPTH_MAX = 32
"""Deepest nesting accepted in praxis.yaml; the rendered file nests seven levels."""


class _PraxisLoader(yaml.SafeLoader):
    """The safe loader, refusing aliases (no expansion bombs) and deep nesting."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise ConfigError("YAML aliases are not accepted in praxis.yaml")
        self._depth += 1
        try:
            if self._depth > YAML_DEPTH_MAX:
                raise ConfigError(f"praxis.yaml nests deeper than {YAML_DEPTH_MAX} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_config(path: Path, max_bytes: int) -> PraxisConfig:
    """Read and check ``path``; raises `ConfigError` with the field at fault."""
    try:
        data = read_bounded(path, max_bytes)
    except UnreadableFile as exc:
        raise ConfigError(str(exc)) from None
    loader = _PraxisLoader(data)
    try:
        document = loader.get_single_data()
    except yaml.YAMLError:
        raise ConfigError("the config file is not valid YAML") from None
    finally:
        loader.dispose()
    return parse_config(document)


def parse_config(document: Any) -> PraxisConfig:
    """The typed form of a decoded praxis.yaml document."""
    listeners = _need(document, "listeners", "", list)
    if len(listeners) != 1:
        raise ConfigError("listeners must hold exactly one listener")
    listener = listeners[0]
    listen = _need(listener, "address", "listeners[0]")
    chain_names = _need(listener, "filter_chains", "listeners[0]", list)
    chains = {
        c.get("name"): c for c in _need(document, "filter_chains", "", list) if isinstance(c, dict)
    }
    if len(chain_names) != 1 or chain_names[0] not in chains:
        raise ConfigError("listeners[0].filter_chains must name one declared filter chain")
    filters = _need(chains[chain_names[0]], "filters", "filter_chains[0]", list)
    by_kind = {f.get("filter"): f for f in filters if isinstance(f, dict)}
    body = by_kind.get("json_body_field") or {}
    route = by_kind.get("intelligent_route")
    balancer = by_kind.get("load_balancer")
    if route is None or balancer is None:
        raise ConfigError("the filter chain needs intelligent_route and load_balancer filters")
    admin = _need(_need(document, "admin", "", dict), "address", "admin")
    timeout = document.get("shutdown_timeout_secs", 5)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
        raise ConfigError("shutdown_timeout_secs must be a non-negative number")
    config = PraxisConfig(
        listen=listen,
        admin=admin,
        model_field=str(body.get("field", "model")),
        model_header=str(route.get("model_header", body.get("header", "X-Model"))),
        local_site=_need(route, "local_site", "intelligent_route"),
        clusters=_clusters(_need(balancer, "clusters", "load_balancer", list)),
        credentials=_credentials(by_kind.get("credential_inject")),
        shutdown_timeout_s=float(timeout),
        ranking=_ranking(route),
        client_auth=_client_auth(by_kind.get("client_auth")),
    )
    return _with_candidates(config, route)


def _client_auth(section: Any) -> ClientAuthConfig:
    """The ``client_auth`` filter; absent is ``mode: none``."""
    if section is None:
        return ClientAuthConfig()
    where = "client_auth"
    mode = _need(section, "mode", where)
    default = section.get("default_tenant")
    if default is not None and (not isinstance(default, str) or not default.strip()):
        raise ConfigError(f"{where}.default_tenant must be a non-blank string")
    if mode == "none":
        return ClientAuthConfig(default_tenant=default)
    if default is not None:
        raise ConfigError(f"{where}.default_tenant applies to mode none only")
    if mode == "api_key":
        return ClientAuthConfig(mode, keys_file=_need(section, "keys_file", where))
    if mode == "mtls":
        tls = _need(section, "tls", where, dict)
        return ClientAuthConfig(
            mode,
            ca_path=_need(tls, "ca_path", f"{where}.tls"),
            cert_path=_need(tls, "cert_path", f"{where}.tls"),
            key_path=_need(tls, "key_path", f"{where}.tls"),
        )
    raise ConfigError(f"{where}.mode must be none, api_key or mtls")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number")
    return float(value)


def _ranking(route: dict[str, Any]) -> RerankContext:
    """The route filter's ``scoring`` (weights, ceilings) and ``sites`` (geography)."""
    where = "intelligent_route"
    scoring = route.get("scoring", {})
    sites = route.get("sites", {})
    if not isinstance(scoring, dict) or not isinstance(sites, dict):
        raise ConfigError(f"{where}.scoring and {where}.sites must be mappings")
    weights = scoring.get("weights", {})
    if not isinstance(weights, dict) or any(k not in SIGNAL_NAMES for k in weights):
        raise ConfigError(f"{where}.scoring.weights may name only {', '.join(SIGNAL_NAMES)}")
    defaults = ScoringConfig()
    latency = scoring.get("latency_ceiling_ms", defaults.latency_ceiling_ms)
    cost = scoring.get(
        "cost_ceiling_per_million_input_tokens", defaults.cost_ceiling_per_million_input_tokens
    )
    values = {k: _number(v, f"{where}.scoring.weights.{k}") for k, v in weights.items()}
    try:
        config = ScoringConfig(
            weights=ScoringWeights(**values),
            latency_ceiling_ms=_number(latency, f"{where}.scoring.latency_ceiling_ms"),
            cost_ceiling_per_million_input_tokens=_number(
                cost, f"{where}.scoring.cost_ceiling_per_million_input_tokens"
            ),
        )
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"{where}.scoring: {exc}") from None
    geographies: dict[str, Geography] = {}
    for site, geo in sites.items():
        if not isinstance(site, str) or not isinstance(geo, dict):
            raise ConfigError(f"{where}.sites must map site names to {{region, zone}}")
        region, zone = geo.get("region"), geo.get("zone")
        if not all(v is None or (isinstance(v, str) and v) for v in (region, zone)):
            raise ConfigError(f"{where}.sites.{site} region and zone must be strings")
        geographies[site] = Geography(region, zone)
    return RerankContext(_need(route, "local_site", where), geographies, config)


def _with_candidates(config: PraxisConfig, route: dict[str, Any]) -> PraxisConfig:
    # The route filter's selection_policy is checked either way, so a typo refuses the
    # file; with overlay_file it is not used: the overlay's own top level governs.
    try:
        policy = policy_of(route, "intelligent_route")
    except SelectionFieldError as exc:
        raise ConfigError(str(exc)) from None
    if "overlay_file" in route:
        scope = _need(route, "expected_scope", "intelligent_route", dict)
        expected = {k: str(v) for k, v in scope.items() if isinstance(v, str)}
        return _replace(
            config,
            overlay_file=_need(route, "overlay_file", "intelligent_route"),
            expected_scope=expected,
        )
    candidates = _need(route, "candidates", "intelligent_route", list)
    if len(candidates) > CANDIDATES_MAX:
        raise ConfigError(f"intelligent_route.candidates holds more than {CANDIDATES_MAX}")
    seen: set[tuple[str, ...]] = set()
    for i, candidate in enumerate(candidates):
        where = f"intelligent_route.candidates[{i}]"
        identity = tuple(_need(candidate, k, where) for k in ("kind", "name", "site", "cluster"))
        if any(len(part) > TEXT_MAX for part in identity) or identity in seen:
            raise ConfigError(f"{where} is over-long or a duplicate")
        seen.add(identity)
        if not isinstance(candidate.get("fresh", True), bool):
            raise ConfigError(f"{where}.fresh must be a boolean")
        credential = candidate.get("credential")
        if credential is not None:
            if not isinstance(credential, dict):
                raise ConfigError(f"{where}.credential must be a mapping")
            ref = secret_ref_of(credential)
            for key in ("name", "namespace", "key"):
                _need(ref, key, f"{where}.credential.secretRef")
    derive = ranked_group_key(config.ranking or RerankContext(config.local_site))
    try:
        inline = snapshot_from_candidates(candidates, None, "inline", policy, derive)
    except SelectionFieldError as exc:
        raise ConfigError(f"intelligent_route.{exc}") from None
    return _replace(config, inline=inline)


def _replace(config: PraxisConfig, **changes: Any) -> PraxisConfig:
    return replace(config, **changes)


def _clusters(entries: list[Any]) -> dict[str, Cluster]:
    clusters: dict[str, Cluster] = {}
    for i, entry in enumerate(entries):
        where = f"load_balancer.clusters[{i}]"
        name = _need(entry, "name", where)
        endpoints = _need(entry, "endpoints", where, list)
        if not endpoints or not all(isinstance(e, str) and ":" in e for e in endpoints):
            raise ConfigError(f"{where}.endpoints must list host:port strings")
        tls = None
        if "tls" in entry:
            t = _need(entry, "tls", where, dict)
            tls = ClusterTls(
                ca_path=_need(_need(t, "ca", f"{where}.tls", dict), "ca_path", f"{where}.tls.ca"),
                cert_path=_need(
                    _need(t, "client_cert", f"{where}.tls", dict), "cert_path", f"{where}.tls"
                ),
                key_path=_need(t["client_cert"], "key_path", f"{where}.tls.client_cert"),
                sni=_need(t, "sni", f"{where}.tls"),
                verify=bool(t.get("verify", True)),
            )
        clusters[name] = Cluster(name, tuple(endpoints), tls)
    return clusters


def _credentials(section: Any) -> dict[tuple[str, str, str], CredentialFile]:
    if section is None:
        return {}
    found: dict[tuple[str, str, str], CredentialFile] = {}
    for i, entry in enumerate(_need(section, "credentials", "credential_inject", list)):
        where = f"credential_inject.credentials[{i}]"
        key = (
            _need(entry, "name", where),
            _need(entry, "namespace", where),
            _need(entry, "key", where),
        )
        strategy = _need(entry, "strategy", where)
        if strategy not in ("bearer_token", "api_key"):
            raise ConfigError(f"{where}.strategy must be bearer_token or api_key")
        found[key] = CredentialFile(strategy, _need(entry, "file", where))
    return found
