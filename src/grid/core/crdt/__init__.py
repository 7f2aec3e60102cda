"""Conflict-free replicated data types: LWW registers, OR-Sets and G-Counters.

`snapshot` composes them into the per-origin `GridStateSnapshot` with its four
invalidation lanes; `record` defines the provider record that scoring reads.
"""

from grid.core.crdt.gcounter import CounterRefusal, GCounter, merge_gcounter
from grid.core.crdt.lww import LwwRegister, merge_lww
from grid.core.crdt.orset import ORSet, Tag, merge_orset
from grid.core.crdt.record import ProviderRecord, RecordSignals
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    MetadataLaneValue,
    PrivateKeyRefused,
    StateLaneValue,
)
from grid.core.swim.messages import Lane

__all__ = [
    "CertLaneValue",
    "CounterRefusal",
    "GCounter",
    "GatewayLaneValue",
    "GridStateSnapshot",
    "Lane",
    "LwwRegister",
    "MetadataLaneValue",
    "ORSet",
    "PrivateKeyRefused",
    "ProviderRecord",
    "RecordSignals",
    "StateLaneValue",
    "Tag",
    "merge_gcounter",
    "merge_lww",
    "merge_orset",
]
