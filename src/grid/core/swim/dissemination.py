"""The piggyback queue: what rides on the next datagram, and how often.

Infection-style dissemination: every member that learns an update re-sends it
on its next datagrams, about λ·⌈log10(n + 1)⌉ times in all (the retransmit
limit, computed by `SwimConfig.retransmit_limit`). The queue hands out entries
least-transmitted first and, among equals, most recently queued first, so news
overtakes old news when the datagram budget is tight.

Invalidation keeps the queue small and correct:

- member updates are keyed by member: a newer update about a member replaces
  the queued one (SWIM's precedence was already checked by the machine);
- broadcast items are keyed by (origin, lane): a newer revision replaces a
  queued older one within the same origin and lane only, so a burst in one lane
  never evicts another lane's news (seed 003's four lanes).

Sizes come from an injected `SizeEstimator`, the codec's exact
`grid.core.wire.codec.encoded_size` wherever a machine runs. An entry that
cannot fit even an otherwise empty datagram is never queued; it travels by
push-pull.

Entries live in buckets by transmit count (an insertion-ordered dict each), so
selection touches only the entries it returns plus the few it skips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from grid.core.swim.messages import (
    Ack,
    Alive,
    BroadcastItem,
    Dead,
    Gossip,
    MemberUpdate,
    Nack,
    Ping,
    PingReq,
    Suspect,
)

WireValue = Ping | PingReq | Ack | Nack | Gossip | Alive | Suspect | Dead | BroadcastItem
SizeEstimator = Callable[[WireValue], int]
"""Encoded byte size of a datagram (without piggyback) or of one piggybacked part."""

PART_OVERHEAD_BYTES = 4
"""Added per piggybacked part for its repeated-field tag and length prefix."""

DATAGRAM_HEADROOM_BYTES = 192
"""Room kept for the datagram's own fields when deciding whether a part can ever
fit; a part larger than the budget minus this is left to push-pull."""

QueueKey = tuple[str, str] | tuple[str, str, str]


@dataclass(slots=True)
class _Entry:
    key: QueueKey
    value: MemberUpdate | BroadcastItem
    size: int
    transmits: int = 0
    live: bool = True


@dataclass(slots=True)
class Piggyback:
    """The parts chosen for one datagram and the bytes they use."""

    updates: list[MemberUpdate]
    items: list[BroadcastItem]
    used_bytes: int


class DisseminationQueue:
    """Updates and items waiting to be piggybacked, with invalidation.

    Each bucket is a stack (newest on top). A replaced entry is only marked
    dead and discarded when a selection reaches it, so every operation costs
    O(1) per entry touched. When dead entries outnumber live ones (sustained
    churn can bury them under fresher news), the stacks are compacted, which is
    O(1) amortized per replacement.
    """

    __slots__ = ("_buckets", "_entries", "_max_part_bytes", "_min_size", "_stacked")

    def __init__(self, max_part_bytes: int) -> None:
        self._entries: dict[QueueKey, _Entry] = {}
        self._buckets: list[list[_Entry]] = [[]]
        self._max_part_bytes = max_part_bytes
        self._min_size = max_part_bytes
        self._stacked = 0  # entries in the stacks, live or dead

    def __len__(self) -> int:
        return len(self._entries)

    def transmits(self, key: QueueKey) -> int | None:
        """How often the entry under `key` was sent, or None when not queued."""
        entry = self._entries.get(key)
        return None if entry is None else entry.transmits

    def enqueue_update(self, update: MemberUpdate, size: int) -> bool:
        """Queue gossip about a member, replacing older gossip about it."""
        return self._enqueue(("m", update.member), update, size)

    def enqueue_item(self, item: BroadcastItem, size: int) -> bool:
        """Queue an item, replacing an older revision of its (origin, lane) only."""
        key = ("i", item.origin, str(item.lane))
        queued = self._entries.get(key)
        if queued is not None:
            assert isinstance(queued.value, BroadcastItem)
            if queued.value.revision >= item.revision:
                return False
        return self._enqueue(key, item, size)

    def _enqueue(self, key: QueueKey, value: MemberUpdate | BroadcastItem, size: int) -> bool:
        old = self._entries.pop(key, None)
        if old is not None:
            old.live = False
            if self._stacked > 2 * len(self._entries) + 64:
                self._compact()
        part = size + PART_OVERHEAD_BYTES
        if part > self._max_part_bytes:
            return False  # never fits a datagram; push-pull carries it instead
        entry = _Entry(key, value, part)
        self._entries[key] = entry
        self._buckets[0].append(entry)
        self._stacked += 1
        if part < self._min_size:
            self._min_size = part
        return True

    def select(self, budget_bytes: int, limit: int) -> Piggyback:
        """Take what fits in `budget_bytes`, counting one transmit for each.

        Entries that reach `limit` transmits leave the queue. Entries whose
        count already reached a lower limit (the cluster shrank) are dropped.
        """
        chosen: list[_Entry] = []
        remaining = budget_bytes
        min_size = self._min_size
        buckets = self._buckets
        for transmits, bucket in enumerate(buckets):
            if remaining < min_size:
                break
            if transmits >= limit:
                for entry in bucket:
                    if entry.live:
                        entry.live = False
                        del self._entries[entry.key]
                self._stacked -= len(bucket)
                bucket.clear()
                continue
            skipped: list[_Entry] = []
            while bucket and remaining >= min_size:
                entry = bucket.pop()
                self._stacked -= 1
                if not entry.live:
                    continue
                if entry.size <= remaining:
                    chosen.append(entry)
                    remaining -= entry.size
                else:
                    skipped.append(entry)
            skipped.reverse()
            bucket.extend(skipped)
            self._stacked += len(skipped)
        return self._commit(chosen, limit, budget_bytes - remaining)

    def _compact(self) -> None:
        for bucket in self._buckets:
            bucket[:] = [entry for entry in bucket if entry.live]
        self._stacked = sum(len(bucket) for bucket in self._buckets)

    @property
    def stacked(self) -> int:
        """Entries held in the stacks, including replaced ones not yet discarded."""
        return self._stacked

    def _commit(self, chosen: list[_Entry], limit: int, used: int) -> Piggyback:
        updates: list[MemberUpdate] = []
        items: list[BroadcastItem] = []
        buckets = self._buckets
        # Re-stack oldest first so the newest stays on top of the next bucket.
        for entry in reversed(chosen):
            entry.transmits += 1
            value = entry.value
            if type(value) is BroadcastItem:
                items.append(value)
            else:
                updates.append(value)  # type: ignore[arg-type]
            if entry.transmits >= limit:
                entry.live = False
                del self._entries[entry.key]
                continue
            if entry.transmits == len(buckets):
                buckets.append([])
            buckets[entry.transmits].append(entry)
            self._stacked += 1
        return Piggyback(updates, items, used)
