"""The signals document of ``GET /v1/site/signals`` (SPEC-DECISIONS §6).

A site publishes the provider load it observes as one JSON document::

    {schema_version, network, site, epoch, sequence, generated_at,
     providers: [{name, cluster, site, backend_kind, models[], healthy?,
                  observed_at, signals: {queue_depth?, kv_cache_utilization?,
                  prefix_cache_hit_ratio?, p99_latency_ms?,
                  cost_per_million_input_tokens?}, requests?}]}

``requests`` (waiting and running requests, a count) is additive: a reader
that does not know it ignores it, as it ignores any unknown entry key.

`parse_signals` turns untrusted JSON into a `SignalsDocument` or raises a
`grid.errors.ValidationError` whose message names the offending path. An absent
signal key means the signal is missing (neutral in scoring), never zero.
Freshness is judged against the document's own ``generated_at``, so it does
not depend on the reader's clock.

The serving side lives here too, pure: `encode_signals` writes a document with
absent keys for missing signals; a `SignalsFeed` is one scope's published series
(``epoch`` fixed for the process, ``sequence`` rising with each change of
content, a strong ``ETag`` over the exact bytes served); `merge_pulled` builds
the ``scope=grid`` view from the site's own entries and what it pulled from
peers, evicting entries older than ``staleCandidateTtlSeconds``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from grid.core.overlay.envelope import format_timestamp
from grid.core.routing.candidate import SignalValues
from grid.core.vocabulary import BackendKind
from grid.errors import ValidationError

FRESHNESS_MAX_AGE_S = 60.0
"""A provider entry older than this (seconds, relative to the document's
``generated_at``) is not fresh. Shorter ages react faster to a stalled scrape
but mark healthy providers stale across a slow poll interval."""

U64_MAX = 2**64 - 1

SCHEMA_VERSION = "1.0.0"
"""The signals document schema version this site writes."""

_RATIO_SIGNALS = ("queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio")
_MAGNITUDE_SIGNALS = ("p99_latency_ms", "cost_per_million_input_tokens")
SIGNAL_KEYS = frozenset(_RATIO_SIGNALS + _MAGNITUDE_SIGNALS)


@dataclass(frozen=True)
class ProviderSignals:
    """One provider's observed signals at one site."""

    name: str
    cluster: str
    site: str
    backend_kind: BackendKind
    models: tuple[str, ...]
    healthy: bool | None
    observed_at: datetime
    signals: SignalValues
    requests: float | None = None
    """Requests waiting and running at the provider, a count; an additive entry key
    (``requests``, outside ``signals``) that older readers ignore (§14)."""


@dataclass(frozen=True)
class SignalsDocument:
    """A parsed signals document; ``providers`` are keyed by ``(site, name)``."""

    schema_version: str
    network: str
    site: str
    epoch: int
    sequence: int
    generated_at: datetime
    providers: tuple[ProviderSignals, ...]

    def lookup(self, site: str, name: str) -> ProviderSignals | None:
        """The entry with this origin ``site`` and provider ``name``, if any."""
        for entry in self.providers:
            if entry.site == site and entry.name == name:
                return entry
        return None

    def index(self) -> dict[tuple[str, str], ProviderSignals]:
        """All entries keyed by ``(site, name)``."""
        return {(e.site, e.name): e for e in self.providers}


FRESHNESS_MAX_AGE = timedelta(seconds=FRESHNESS_MAX_AGE_S)
"""`FRESHNESS_MAX_AGE_S` as a timedelta."""


def is_fresh(
    entry: ProviderSignals, generated_at: datetime, max_age_s: float = FRESHNESS_MAX_AGE_S
) -> bool:
    """True unless the entry is older than ``max_age_s`` relative to ``generated_at``."""
    max_age = (
        FRESHNESS_MAX_AGE if max_age_s == FRESHNESS_MAX_AGE_S else timedelta(seconds=max_age_s)
    )
    return generated_at - entry.observed_at <= max_age


def _fail(path: str, problem: str) -> ValidationError:
    return ValidationError(f"{path}: {problem}", path=path)


def _text(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, "must be a non-empty string")
    return value


def _count(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise _fail(path, "must be an integer between 0 and 2^64-1")
    return value


def parse_timestamp(value: object, path: str) -> datetime:
    """An RFC 3339 timestamp with an offset (``Z`` or ``±hh:mm``)."""
    text = _text(value, path)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _fail(path, "must be an RFC 3339 timestamp") from exc
    if moment.tzinfo is None:
        raise _fail(path, "must carry a UTC offset such as Z")
    return moment


def _number(value: object, path: str, *, ratio: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, "must be a finite number")
    if value < 0 or (ratio and value > 1):
        raise _fail(path, "must be a ratio in [0, 1]" if ratio else "must not be negative")
    return float(value)


def _signal_values(value: object, path: str) -> SignalValues:
    if not isinstance(value, dict):
        raise _fail(path, "must be an object")
    unknown = sorted(k for k in value if k not in SIGNAL_KEYS)
    if unknown:
        raise _fail(
            f"{path}.{unknown[0]}", f"unknown signal (known: {', '.join(sorted(SIGNAL_KEYS))})"
        )
    parsed = {
        key: _number(value[key], f"{path}.{key}", ratio=key in _RATIO_SIGNALS)
        for key in SIGNAL_KEYS
        if key in value
    }
    return SignalValues(**parsed)


def _require(value: Mapping[str, Any], keys: Iterable[str], path: str) -> None:
    for key in keys:
        if key not in value:
            raise _fail(f"{path}.{key}" if path else key, "is required")


def _provider(value: object, path: str) -> ProviderSignals:
    if not isinstance(value, dict):
        raise _fail(path, "must be an object")
    _require(value, ("name", "cluster", "site", "backend_kind", "observed_at", "signals"), path)
    kind = value["backend_kind"]
    if not isinstance(kind, str) or kind not in {k.value for k in BackendKind}:
        raise _fail(f"{path}.backend_kind", "must be local, remote, cloud_managed or api_provider")
    models = value.get("models", [])
    if not isinstance(models, list):
        raise _fail(f"{path}.models", "must be an array of model names")
    healthy = value.get("healthy")
    if healthy is not None and not isinstance(healthy, bool):
        raise _fail(f"{path}.healthy", "must be a boolean")
    return ProviderSignals(
        name=_text(value["name"], f"{path}.name"),
        cluster=_text(value["cluster"], f"{path}.cluster"),
        site=_text(value["site"], f"{path}.site"),
        backend_kind=BackendKind(kind),
        models=tuple(_text(m, f"{path}.models[{i}]") for i, m in enumerate(models)),
        healthy=healthy,
        observed_at=parse_timestamp(value["observed_at"], f"{path}.observed_at"),
        signals=_signal_values(value["signals"], f"{path}.signals"),
        requests=(
            _number(value["requests"], f"{path}.requests", ratio=False)
            if value.get("requests") is not None
            else None
        ),
    )


def parse_signals(document: object) -> SignalsDocument:
    """Validate a decoded signals document; raise `ValidationError` naming the path."""
    if not isinstance(document, dict):
        raise _fail("document", "must be a JSON object")
    keys = ("schema_version", "network", "site", "epoch", "sequence", "generated_at", "providers")
    _require(document, keys, "")
    version = _text(document["schema_version"], "schema_version")
    if version.split(".")[0] != "1":
        raise _fail("schema_version", "only 1.x is supported")
    providers = document["providers"]
    if not isinstance(providers, list):
        raise _fail("providers", "must be an array")
    entries = tuple(_provider(p, f"providers[{i}]") for i, p in enumerate(providers))
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries):
        if (entry.site, entry.name) in seen:
            raise _fail(f"providers[{i}]", "duplicates an earlier (site, name)")
        seen.add((entry.site, entry.name))
    return SignalsDocument(
        schema_version=version,
        network=_text(document["network"], "network"),
        site=_text(document["site"], "site"),
        epoch=_count(document["epoch"], "epoch"),
        sequence=_count(document["sequence"], "sequence"),
        generated_at=parse_timestamp(document["generated_at"], "generated_at"),
        providers=entries,
    )


def merge_entries(*groups: Iterable[ProviderSignals]) -> tuple[ProviderSignals, ...]:
    """Merge own and pulled entries: per ``(site, name)`` the newest ``observed_at`` wins.

    Equal timestamps keep the entry seen first, so callers list their own
    site's entries first. The result is sorted by ``(site, name)``.
    """
    newest: dict[tuple[str, str], ProviderSignals] = {}
    for group in groups:
        for entry in group:
            key = (entry.site, entry.name)
            held = newest.get(key)
            if held is None or entry.observed_at > held.observed_at:
                newest[key] = entry
    return tuple(newest[key] for key in sorted(newest))


class SignalsScope(enum.StrEnum):
    """``?scope=`` of ``GET /v1/site/signals``: own providers, or everything held."""

    SITE = "site"
    GRID = "grid"


def parse_scope(value: str | None) -> SignalsScope:
    """The requested scope (``site`` when absent); `ValidationError` for anything else."""
    if value is None:
        return SignalsScope.SITE
    try:
        return SignalsScope(value)
    except ValueError as exc:
        raise _fail("scope", "must be site or grid") from exc


def encode_entry(entry: ProviderSignals) -> dict[str, Any]:
    """One provider entry as JSON: a missing signal (or health) is an absent key."""
    out: dict[str, Any] = {
        "name": entry.name,
        "cluster": entry.cluster,
        "site": entry.site,
        "backend_kind": entry.backend_kind.value,
        "models": list(entry.models),
    }
    if entry.healthy is not None:
        out["healthy"] = entry.healthy
    out["observed_at"] = format_timestamp(entry.observed_at)
    values = entry.signals
    out["signals"] = {
        key: getattr(values, key) for key in _SIGNAL_ORDER if getattr(values, key) is not None
    }
    if entry.requests is not None:
        out["requests"] = entry.requests
    return out


_SIGNAL_ORDER = (*_RATIO_SIGNALS, *_MAGNITUDE_SIGNALS)


def encode_signals(document: SignalsDocument) -> dict[str, Any]:
    """A document as the JSON object §6 fixes (the inverse of `parse_signals`)."""
    return {
        "schema_version": document.schema_version,
        "network": document.network,
        "site": document.site,
        "epoch": document.epoch,
        "sequence": document.sequence,
        "generated_at": format_timestamp(document.generated_at),
        "providers": [encode_entry(e) for e in document.providers],
    }


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class Published:
    """One published version of a scope: the document, its exact bytes and its ETag."""

    document: SignalsDocument
    body: bytes
    etag: str


def strong_etag(body: bytes) -> str:
    """A strong entity tag: the quoted SHA-256 prefix of the exact bytes served."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """True when an ``If-None-Match`` header names ``etag`` (or is ``*``).

    Strong comparison: a weak tag (``W/"..."``) never matches a strong one.
    """
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


class SignalsFeed:
    """One scope's series of documents, as ``GET /v1/site/signals`` serves it.

    ``epoch`` is fixed for the operator process. `update` bumps ``sequence`` and
    re-stamps ``generated_at`` only when the providers' encoded content changed,
    so an unchanged document keeps its exact bytes and its ETag, and a poller's
    ``If-None-Match`` gets 304. ``generated_at`` is therefore the moment of the
    last change; entry ages are judged from ``observed_at``.
    """

    def __init__(self, network: str, site: str, epoch: int, now: datetime) -> None:
        if not 0 <= epoch <= U64_MAX:
            raise ValueError("epoch must be a u64")
        self.network = network
        self.site = site
        self.epoch = epoch
        self._content = _dump([])
        self.current = self._publish((), 0, now)

    def _publish(
        self, providers: tuple[ProviderSignals, ...], sequence: int, now: datetime
    ) -> Published:
        document = SignalsDocument(
            schema_version=SCHEMA_VERSION,
            network=self.network,
            site=self.site,
            epoch=self.epoch,
            sequence=sequence,
            generated_at=now,
            providers=providers,
        )
        body = _dump(encode_signals(document))
        return Published(document, body, strong_etag(body))

    def update(self, providers: Iterable[ProviderSignals], now: datetime) -> bool:
        """Publish ``providers`` (sorted by site and name); True when content changed."""
        entries = tuple(sorted(providers, key=lambda e: (e.site, e.name)))
        content = _dump([encode_entry(e) for e in entries])
        if content == self._content:
            return False
        self._content = content
        self.current = self._publish(entries, self.current.document.sequence + 1, now)
        return True


def entry_age_s(entry: ProviderSignals, now: datetime) -> float:
    """Seconds since the entry was observed (negative for a clock ahead of ours)."""
    return (now - entry.observed_at).total_seconds()


def merge_pulled(
    own: Iterable[ProviderSignals],
    pulled: Mapping[str, SignalsDocument],
    now: datetime,
    stale_ttl_s: float | None,
) -> tuple[ProviderSignals, ...]:
    """The ``scope=grid`` entries: own ones, plus each peer's own entries while fresh enough.

    ``pulled`` maps a peer site to the last document pulled from it, kept after
    the peer stops answering. Only entries naming that peer as their ``site``
    are taken, so a peer cannot speak for another site, and an entry whose age
    exceeds ``stale_ttl_s`` is evicted (None keeps every entry, as an absent
    ``staleCandidateTtlSeconds`` does). Own entries win over pulled ones.
    """
    own_entries = list(own)
    own_sites = {e.site for e in own_entries}
    remote = []
    for peer, document in sorted(pulled.items()):
        if peer in own_sites:
            continue
        for entry in document.providers:
            if entry.site != peer:
                continue
            if stale_ttl_s is not None and entry_age_s(entry, now) > stale_ttl_s:
                continue
            remote.append(entry)
    return merge_entries(own_entries, remote)
