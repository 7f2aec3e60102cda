"""The replica ↔ SWIM glue: how a `GridState` rides on a `SwimMachine`, sans I/O.

Three moments join the CRDT replica to the membership machine, and both the
socket runtime (`grid.adapters.swim_node`) and the simulator
(`grid.testing.simulator`) go through these functions:

- a local write: `write_local` applies a change to our snapshot, installs it in
  the replica and publishes, as (signed) broadcast items, the lanes whose
  revision moved. The change runs where the machine runs, so it always builds
  on the newest revision, re-assertions included, and never races them;
- an announced member: `vouch(replica)` admits at once a name that a
  verified grid-CA certificate carries;
- a received item: the machine asks `admission(replica)` before it holds,
  delivers or relays anything. The replica merges the item (or drops and
  counts it) and names what the machine may hold: the item, the items a
  verified certificate released, or, when a peer held our own lane at a
  revision at least ours, our own item re-asserted past theirs.

`write_local` returns the machine's effects for the caller to carry out.
"""

from __future__ import annotations

from collections.abc import Callable

from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot
from grid.core.swim.admission import MemberVouch
from grid.core.swim.effects import Effect
from grid.core.swim.machine import SwimMachine
from grid.core.swim.membership import ItemAdmission
from grid.core.swim.messages import Alive

Change = Callable[[GridStateSnapshot], GridStateSnapshot]
"""A local write: our current snapshot in, the new one out."""


def admission(replica: GridState) -> ItemAdmission:
    """The machine's verdict on received items: merge them into ``replica``."""
    return replica.admit


def vouch(replica: GridState) -> MemberVouch | None:
    """The machine's verifier of announced members: names the grid CA certified.

    A member we have not met counts at once when the replica holds a verified
    certificate for its name (cert lane: chained to the grid CA, named by its
    pin or SPIFFE ID, signed by its key). Anyone else proves itself by answering
    at its address (`grid.core.swim.admission`). A replica without origin
    authentication vouches for nobody.
    """
    if replica.auth is None:
        return None

    def certified(alive: Alive) -> bool:
        return alive.member != replica.local_origin and replica.trusted(alive.member)

    return certified


def write_local(
    replica: GridState, machine: SwimMachine, change: Change, now: float
) -> tuple[int, list[Effect]]:
    """Apply ``change`` to our snapshot; publish the lanes that moved (their count, effects)."""
    snapshot = change(replica.local)
    if snapshot == replica.local:
        return 0, []
    items = replica.update_local(snapshot)
    effects: list[Effect] = []
    for item in items:
        effects += machine.publish(item, now)
    return len(items), effects


def publish_snapshot(
    replica: GridState, machine: SwimMachine, snapshot: GridStateSnapshot, now: float
) -> tuple[int, list[Effect]]:
    """Install a new snapshot of ours (built from ``replica.local``) and publish it."""
    return write_local(replica, machine, lambda _current: snapshot, now)
