"""Serving signals: encoding with absent keys, the feed's epoch/sequence/ETag, the grid merge."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.routing.scoring import SignalValues
from grid.core.routing.signals import (
    ProviderSignals,
    SignalsDocument,
    SignalsFeed,
    SignalsScope,
    encode_signals,
    etag_matches,
    merge_pulled,
    parse_scope,
    parse_signals,
)
from grid.core.vocabulary import BackendKind
from grid.errors import ValidationError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entry(site: str, name: str, at: datetime = T0, **signals: float) -> ProviderSignals:
    return ProviderSignals(
        name=name,
        cluster=name,
        site=site,
        backend_kind=BackendKind.LOCAL,
        models=("m",),
        healthy=True,
        observed_at=at,
        signals=SignalValues(**signals),
    )


def doc(site: str, *entries: ProviderSignals) -> SignalsDocument:
    return SignalsDocument("1.0.0", "net", site, 1, 1, T0, entries)


def test_missing_signals_are_absent_keys_never_zero_or_null() -> None:
    feed = SignalsFeed("net", "east", epoch=7, now=T0)
    feed.update([entry("east", "p", queue_depth=0.0)], T0)
    body = json.loads(feed.current.body)
    assert body["providers"][0]["signals"] == {"queue_depth": 0.0}
    assert "null" not in feed.current.body.decode()


def test_feed_sequence_rises_only_when_content_changes() -> None:
    feed = SignalsFeed("net", "east", epoch=7, now=T0)
    assert feed.current.document.sequence == 0
    assert feed.update([entry("east", "p", queue_depth=0.2)], T0 + timedelta(seconds=1))
    first = feed.current
    assert not feed.update([entry("east", "p", queue_depth=0.2)], T0 + timedelta(seconds=9))
    assert feed.current is first  # same bytes, same ETag: a poller gets 304
    assert feed.update([entry("east", "p", queue_depth=0.3)], T0 + timedelta(seconds=10))
    second = feed.current
    assert second.document.sequence == first.document.sequence + 1
    assert second.document.epoch == first.document.epoch == 7
    assert second.etag != first.etag
    assert second.document.generated_at == T0 + timedelta(seconds=10)


def test_etag_is_strong_and_if_none_match_compares_strongly() -> None:
    feed = SignalsFeed("net", "east", epoch=1, now=T0)
    tag = feed.current.etag
    assert tag.startswith('"') and tag.endswith('"')
    assert etag_matches(tag, tag)
    assert etag_matches(f'"other", {tag}', tag)
    assert etag_matches("*", tag)
    assert not etag_matches(f"W/{tag}", tag)
    assert not etag_matches(None, tag)


def test_scope_defaults_to_site_and_refuses_others() -> None:
    assert parse_scope(None) is SignalsScope.SITE
    assert parse_scope("grid") is SignalsScope.GRID
    with pytest.raises(ValidationError):
        parse_scope("all")


def test_merge_keeps_a_silent_peers_entries_until_the_ttl() -> None:
    pulled = {"west": doc("west", entry("west", "w", at=T0))}
    own = [entry("east", "e", at=T0)]
    kept = merge_pulled(own, pulled, T0 + timedelta(seconds=30), stale_ttl_s=60)
    assert [(e.site, e.name) for e in kept] == [("east", "e"), ("west", "w")]
    evicted = merge_pulled(own, pulled, T0 + timedelta(seconds=61), stale_ttl_s=60)
    assert [(e.site, e.name) for e in evicted] == [("east", "e")]
    # Without staleCandidateTtlSeconds nothing is evicted.
    forever = merge_pulled(own, pulled, T0 + timedelta(days=9), stale_ttl_s=None)
    assert len(forever) == 2


def test_a_peer_cannot_speak_for_another_site() -> None:
    pulled = {"west": doc("west", entry("west", "w"), entry("east", "e", queue_depth=1.0))}
    kept = merge_pulled([entry("east", "e", queue_depth=0.1)], pulled, T0, None)
    assert [(e.site, e.name, e.signals.queue_depth) for e in kept] == [
        ("east", "e", 0.1),
        ("west", "w", None),
    ]


_RATIO = st.one_of(st.none(), st.floats(0, 1))
_MAG = st.one_of(st.none(), st.floats(0, 1e6))


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["east", "west"]),
            st.text("abcdef", min_size=1, max_size=6),
            _RATIO,
            _RATIO,
            _RATIO,
            _MAG,
            _MAG,
            st.integers(0, 10**6),
        ),
        max_size=8,
        unique_by=lambda t: (t[0], t[1]),
    )
)
def test_encoded_documents_parse_back_to_the_same_entries(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    entries = [
        entry(
            site,
            name,
            at=T0 + timedelta(milliseconds=ms),
            **{
                k: v
                for k, v in zip(
                    (
                        "queue_depth",
                        "kv_cache_utilization",
                        "prefix_cache_hit_ratio",
                        "p99_latency_ms",
                        "cost_per_million_input_tokens",
                    ),
                    values,
                    strict=True,
                )
                if v is not None
            },
        )
        for site, name, *values, ms in rows
    ]
    feed = SignalsFeed("net", "east", epoch=3, now=T0)
    feed.update(entries, T0)
    parsed = parse_signals(json.loads(feed.current.body))
    assert parsed == feed.current.document
    assert encode_signals(parsed) == json.loads(feed.current.body)
