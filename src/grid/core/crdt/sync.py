"""The replica ↔ SWIM glue: how a `GridState` rides on a `SwimMachine`, sans I/O.

Two moments join the CRDT replica to the membership machine, and both the
socket runtime (`grid.adapters.swim_node`) and the simulator
(`grid.testing.simulator`) go through these functions:

- a local write: `publish_snapshot` installs our new snapshot in the replica and
  publishes, as broadcast items, the lanes whose revision moved;
- a `Deliver` effect: `merge_delivered` merges the received item. When the
  outcome is ``reasserted`` (a peer held our own lane at a revision at least
  ours, e.g. from before we restarted), the replica has bumped our revision
  past theirs and we publish our item again, like a SWIM refutation.

Both return the machine's effects for the caller to carry out.
"""

from __future__ import annotations

from grid.core.crdt.replica import GridState, MergeOutcome
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.effects import Effect
from grid.core.swim.machine import SwimMachine
from grid.core.swim.messages import BroadcastItem


def publish_snapshot(
    replica: GridState, machine: SwimMachine, snapshot: GridStateSnapshot, now: float
) -> tuple[int, list[Effect]]:
    """Install our new snapshot; publish the lanes that moved (their count, and effects)."""
    items = replica.update_local(snapshot)
    effects: list[Effect] = []
    for item in items:
        effects += machine.publish(item, now)
    return len(items), effects


def merge_delivered(
    replica: GridState, machine: SwimMachine, item: BroadcastItem, now: float
) -> tuple[MergeOutcome, list[Effect]]:
    """Merge a delivered item; on ``reasserted`` re-publish our own lane past the peer's.

    Raises the replica's `ProtocolError` for an undecodable payload (the caller
    counts it and drops the item).
    """
    outcome = replica.apply(item)
    if outcome is not MergeOutcome.REASSERTED:
        return outcome, []
    own = replica.item(replica.local_origin, item.lane)
    return outcome, machine.publish(own, now)
