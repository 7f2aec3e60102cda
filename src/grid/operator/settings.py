"""Settings of one site operator, each with its default, unit and trade-off.

Every setting is a ``grid operator`` flag, generated from the field: ``--site``
for ``site``, ``--render-interval`` for ``render_interval_s`` (a trailing ``_s``,
seconds, is dropped), with the description as its help. Each has a ``GRID_*``
environment fallback named after the flag (``GRID_RENDER_INTERVAL``); a flag
wins over the environment, which wins over the default. docs/operator.md lists
them.

Upstream Grid's operator variables are accepted as aliases (`UPSTREAM_ENV`):
``GRID_SWIM_BIND_ADDR`` for ``--swim-bind``, ``GRID_SWIM_SITE_NAME`` (and
``GRID_SITE_NAME``) for ``--site``, and so on. Grid's own variable wins over
its alias, and a flag over both. ``GRID_SWIM_ENCRYPT_KEY`` (64 hex digits) has
no flag: a key on a command line would show in every process listing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, FilePath, SecretBytes, field_validator

from grid.core.address import parse_address
from grid.core.crdt.origin import AuthLimits
from grid.core.resources.types import DNS_SUBDOMAIN_PATTERN
from grid.errors import ValidationError

DEFAULT_STORE = "sqlite:.grid/store.db"
DEFAULT_SWIM_BIND = "0.0.0.0:7946"
DEFAULT_METRICS_BIND = "0.0.0.0:9090"
DEFAULT_SIGNALS_BIND = "0.0.0.0:7947"


class OperatorSettings(BaseModel):
    """What one ``grid operator`` process needs to know."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    site: str = Field(
        description=(
            "This operator's site: the GridSite it speaks for, the site of its "
            "InferenceProviders, and its SWIM member name (a Kubernetes object name)."
        ),
    )
    store: str = Field(
        DEFAULT_STORE, description="Resource store URL: sqlite:PATH (embedded) or kubernetes."
    )
    kubeconfig: FilePath | None = Field(
        None,
        description=(
            "Kubeconfig for --store kubernetes; absent means KUBECONFIG, then the in-cluster "
            "service account, then ~/.kube/config."
        ),
    )
    network: str | None = Field(
        None, description="The GridNetwork to serve; absent means the only one in the store."
    )
    swim_bind: str = Field(
        DEFAULT_SWIM_BIND,
        description="UDP and TCP host:port for SWIM and push-pull (port 0 picks a free one).",
    )
    swim_advertise: str | None = Field(
        None,
        description="The host:port peers use to reach this node; absent means the bound address.",
    )
    swim_key_file: FilePath | None = Field(
        None,
        description=(
            "File of exactly 32 raw bytes, the SWIM key, used when the GridNetwork's "
            "swimKeyRef Secret is absent."
        ),
    )
    swim_encrypt_key: SecretBytes | None = Field(
        None,
        description=(
            "The SWIM key as 64 hex digits, from the environment only (upstream's "
            "GRID_SWIM_ENCRYPT_KEY): used when neither the swimKeyRef Secret nor "
            "--swim-key-file gives one."
        ),
        json_schema_extra={"env_only": True},
    )
    swim_seeds: list[str] = Field(
        default_factory=list,
        description=(
            "More SWIM seed peers (host:port) beside the GridNetwork's spec.seeds "
            "(repeatable; the environment form separates them by commas or spaces)."
        ),
    )
    swim_dead_retention_s: float = Field(
        60.0,
        ge=1.0,
        description=(
            "Seconds a dead or left member stays in the SWIM table as a tombstone. Longer "
            "guards better against stale gossip resurrecting it, at the cost of table space."
        ),
    )
    metrics_bind: str = Field(
        DEFAULT_METRICS_BIND,
        description="host:port for /metrics, /healthz, /readyz and the live view /ui/.",
    )
    ui_public: bool = Field(
        False,
        description=(
            "Serve the live view (/ui/) to every client even when --metrics-bind is not a "
            "loopback address. Off by default: the view is unauthenticated, so on a wider "
            "bind it answers only clients connecting from loopback (kubectl port-forward)."
        ),
    )
    overlay_dir: Path | None = Field(
        None,
        description=(
            "Also write grid-config.json and grid-overlay.json here (the embedded default)."
        ),
    )
    state_dir: Path | None = Field(
        None,
        description=(
            "Directory for a second copy of the tenant-spend ledger (budget-ledger.json; "
            "the first is the ConfigMap grid-budget-ledger-{site}); absent means --overlay-dir."
        ),
    )
    gateway_metrics: list[str] = Field(
        default_factory=list,
        description=(
            "Admin /metrics URL of a local gateway whose tenant token counters this site "
            "prices into its spend slot (repeatable; the environment form is space-separated)."
        ),
    )
    budget_scrape_interval_s: float = Field(
        2.0,
        ge=0.1,
        description=(
            "Seconds between scrapes of the --gateway-metrics URLs. Shorter tracks spend "
            "sooner (and loses less if a gateway crashes); longer costs the gateways less."
        ),
    )
    budget_scrape_timeout_s: float = Field(
        2.0, ge=0.1, description="Seconds one gateway metrics scrape may take."
    )
    ca: FilePath | None = Field(
        None, description="PEM of the grid CA that signs site certificates."
    )
    cert: FilePath | None = Field(
        None,
        description=(
            "PEM of this site's certificate (presented on egress probes and at the egress "
            "stand-in)."
        ),
    )
    key: FilePath | None = Field(None, description="PEM of this site's private key.")
    egress_bind: str | None = Field(
        None,
        description="Serve an mTLS egress stand-in presenting the site certificate at host:port.",
    )
    record_refresh_s: float = Field(
        5.0,
        description=(
            "Longest seconds an own provider record goes without being re-published. Keep it "
            "well below peers' staleCandidateTtlSeconds or they evict this site's candidates."
        ),
    )
    site_probe_interval_s: float = Field(
        2.0, description="Seconds between GridSite reconciles (SWIM view, egress mTLS probes)."
    )
    render_interval_s: float = Field(
        1.0,
        ge=0.05,
        description=(
            "Most seconds between renders; changes render sooner. Time-driven rules "
            "(freshness, stale-candidate eviction) take effect within this bound."
        ),
    )
    render_settle_s: float = Field(
        0.1,
        ge=0,
        le=1.0,
        description=(
            "Seconds a render round waits after the change that asked for it, so that "
            "changes arriving together (several providers' scrapes, a peer's records) "
            "render once."
        ),
    )
    render_gap_s: float = Field(
        0.0,
        ge=0,
        le=1.0,
        description=(
            "Least seconds between the starts of two render rounds (0 to 1, never past "
            "the render interval): changes that keep coming (a provider whose load "
            "moves on every scrape) render once per gap instead of once each."
        ),
    )
    shutdown_timeout_s: float = Field(
        5.0,
        ge=0,
        description=(
            "Seconds a graceful stop may spend leaving the SWIM mesh before the node is "
            "closed anyway."
        ),
    )
    signals_bind: str = Field(
        DEFAULT_SIGNALS_BIND,
        description=(
            "host:port of the mTLS signals listener, bound only under signalTransport.mode: "
            "poll. Peers poll a site at its SWIM-advertised host and this port (port 0 picks "
            "a free one; the bound port is advertised to peers)."
        ),
    )
    signals_advertise_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description=(
            "The signals port peers are told to poll, when it is not the bound one (a "
            "Service, NAT or proxy in between); absent means the bound port."
        ),
    )
    signals_poll_interval_s: float = Field(
        2.0,
        ge=0.05,
        description=(
            "Seconds between polls of each alive peer's signals under poll. Shorter spreads "
            "load changes faster at the cost of one request per peer per interval."
        ),
    )
    cert_check_interval_s: float = Field(
        5.0,
        ge=0.05,
        description=(
            "Seconds between checks of the site certificate files for rotation (spiffe trust "
            "only). Shorter picks up a renewed SVID sooner at the cost of a file read."
        ),
    )
    pending_items_max: int = Field(
        AuthLimits().pending_items_max,
        ge=0,
        description=(
            "Received items held while their origin's certificate is not verified yet, over "
            "all sites (one per site and lane). Beyond it they are dropped and come again by "
            "anti-entropy; more room means less waiting after a start, and more memory a peer "
            "can claim."
        ),
    )
    ingest_feedback: bool = Field(
        True,
        description=(
            "Serve POST /v1/site/signals/ingest under poll. Off (--no-ingest-feedback) the "
            "POST answers 405 and nothing is acknowledged, as by an operator without "
            "feedback; GET polling keeps working either way."
        ),
    )
    feedback_reporter_capacity: int = Field(
        64,
        ge=1,
        description=(
            "Gateway reporters persisted per GridNetwork; a new identity past it gets 429 "
            "reporter_capacity. More admits more gateway processes but grows the status."
        ),
    )
    feedback_reporter_idle_s: float = Field(
        3600.0,
        gt=0,
        description=(
            "Seconds without a report after which a full reporter table gives that "
            "reporter's slot to a new identity (gateways that change ID on restart). "
            "Shorter frees slots sooner; longer keeps a quiet reporter's evidence longer."
        ),
    )
    feedback_write_attempts: int = Field(
        3,
        ge=1,
        description=(
            "Attempts in all of the feedback status write when the store answers 409. More "
            "rides out busier writers but spends more of the 5 s request budget."
        ),
    )

    leader_election: bool = Field(
        False,
        description=(
            "Lead through a Lease so several replicas can run: only the leader reconciles, "
            "gossips and binds SWIM (--store kubernetes only)."
        ),
    )
    lease_name: str | None = Field(
        None,
        description="The Lease, in POD_NAMESPACE; absent means grid-operator-{site}.",
    )
    lease_duration_s: float = Field(
        15.0,
        ge=0.1,
        description="Seconds a follower waits after the Lease last changed before taking it.",
    )
    renew_deadline_s: float = Field(
        10.0,
        ge=0.1,
        description="Seconds a leader leads without a successful renewal (< lease duration).",
    )
    retry_period_s: float = Field(
        2.0,
        ge=0.05,
        description="Seconds between renewals and takeover attempts (< renew deadline).",
    )
    otlp_endpoint: str | None = Field(
        None,
        description=(
            "OTLP/HTTP base URL to export traces to (/v1/traces is appended); absent means "
            "OTEL_EXPORTER_OTLP_ENDPOINT, and without either tracing is off."
        ),
    )

    @field_validator("site", mode="after")
    @classmethod
    def _site_is_an_object_name(cls, site: str) -> str:
        if len(site) > 253 or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, site):
            raise ValueError(
                "must be a Kubernetes object name: lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit"
            )
        return site

    @field_validator("swim_seeds", mode="after")
    @classmethod
    def _seeds_are_addresses(cls, seeds: list[str]) -> list[str]:
        # Upstream's GRID_SWIM_SEEDS separates seeds by commas.
        split = [s.strip() for seed in seeds for s in seed.split(",") if s.strip()]
        for seed in split:
            try:
                parse_address(seed)
            except ValidationError as exc:
                raise ValueError(f"seed {seed!r}: {exc.message}") from None
        return split


UPSTREAM_ENV: Mapping[str, tuple[str, ...]] = {
    "site": ("GRID_SWIM_SITE_NAME", "GRID_SITE_NAME"),
    "swim_bind": ("GRID_SWIM_BIND_ADDR",),
    "swim_advertise": ("GRID_SWIM_ADVERTISE_ADDR",),
    "metrics_bind": ("GRID_METRICS_ADDR",),
    "swim_dead_retention_s": ("GRID_SWIM_DEAD_MEMBER_TTL_SECS",),
    "swim_encrypt_key": ("GRID_SWIM_ENCRYPT_KEY",),
}
"""Upstream Grid's operator variables, read after the setting's own ``GRID_*`` name.
``GRID_SWIM_SEEDS`` needs no alias: it is already ``--swim-seeds``' own name."""


def env_only(field: str) -> bool:
    """Whether a setting is read from the environment only (it has no flag)."""
    extra = OperatorSettings.model_fields[field].json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("env_only"))


def env_names(field: str) -> list[str]:
    """Every variable a setting is read from, first wins: its own, then upstream's."""
    own = [] if env_only(field) else [env_name(field)]
    return own + list(UPSTREAM_ENV.get(field, ()))


def flag_name(field: str) -> str:
    """The ``grid operator`` flag of a setting: ``render_interval_s`` -> ``--render-interval``."""
    return "--" + field.removesuffix("_s").replace("_", "-")


def env_name(field: str) -> str:
    """The environment fallback of a setting: ``render_interval_s`` -> ``GRID_RENDER_INTERVAL``."""
    return "GRID_" + field.removesuffix("_s").upper()
