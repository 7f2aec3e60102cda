"""Stable candidate identifiers: 32-bit FNV-1a over a candidate's identity.

A `stable_id` names a routing candidate across renders and sites without a
registry: every renderer derives the same 8 hex digits from
``"{kind}/{name}/{site}/{cluster}"`` (SPEC-DECISIONS §4a).
"""

from __future__ import annotations

FNV_OFFSET_BASIS = 2166136261
"""The 32-bit FNV offset basis."""

FNV_PRIME = 16777619
"""The 32-bit FNV prime."""


def fnv1a_32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    value = FNV_OFFSET_BASIS
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & 0xFFFFFFFF
    return value


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """8 lowercase hex digits of FNV-1a over UTF-8 ``"{kind}/{name}/{site}/{cluster}"``."""
    return f"{fnv1a_32(f'{kind}/{name}/{site}/{cluster}'.encode()):08x}"
