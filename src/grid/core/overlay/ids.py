"""Stable candidate identifiers: 32-bit FNV-1a over a candidate's identity.

A `stable_id` names a routing candidate across renders and sites without a
registry: every renderer derives the same 8 hex digits from
``"{kind}/{name}/{site}/{cluster}"`` (SPEC-DECISIONS §4a).
"""

from __future__ import annotations

from functools import lru_cache

FNV_OFFSET_BASIS = 2166136261
"""The 32-bit FNV offset basis."""

FNV_PRIME = 16777619
"""The 32-bit FNV prime."""


def fnv1a_32(data: bytes, start: int = FNV_OFFSET_BASIS) -> int:
    """The 32-bit FNV-1a hash of ``data``.

    ``start`` continues a hash: ``fnv1a_32(b, fnv1a_32(a)) == fnv1a_32(a + b)``.
    """
    value, prime = start, FNV_PRIME
    for byte in data:
        value = ((value ^ byte) * prime) & 0xFFFFFFFF
    return value


@lru_cache(maxsize=16)
def _kind_prefix(kind: str) -> int:
    """The FNV-1a state after ``"{kind}/"``: every id of one kind starts there."""
    return fnv1a_32(f"{kind}/".encode())


def model_prefix(kind: str, name: str) -> int:
    """The FNV-1a state after ``"{kind}/{name}/"``, shared by every site and cluster.

    With `stable_id_at`, ``stable_id_at(model_prefix(k, n), s, c) == stable_id(k, n, s, c)``;
    a renderer hashes each model's prefix once rather than once per candidate.
    """
    return fnv1a_32(f"{name}/".encode(), _kind_prefix(kind))


def stable_id_at(prefix: int, site: str, cluster: str) -> str:
    """`stable_id` from a `model_prefix` state and the candidate's site and cluster."""
    return f"{fnv1a_32(f'{site}/{cluster}'.encode(), prefix):08x}"


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """8 lowercase hex digits of FNV-1a over UTF-8 ``"{kind}/{name}/{site}/{cluster}"``."""
    return stable_id_at(model_prefix(kind, name), site, cluster)
