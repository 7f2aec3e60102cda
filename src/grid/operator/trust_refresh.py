"""Applying a changed site trust to the replica and to the SWIM machine."""

from __future__ import annotations

import logging

from grid.adapters.swim_node import SwimNode
from grid.core.crdt.origin import OriginTrust
from grid.core.crdt.replica import GridState

log = logging.getLogger(__name__)


async def refresh_trust(replica: GridState, trust: OriginTrust, swim: SwimNode | None) -> None:
    """Install ``trust`` (which certificates may speak for which site) when it changed.

    Sites whose certificate is no longer trusted are forgotten, by the replica
    and by the SWIM machine, so their items are taken again once they are
    trusted again.
    """
    auth = replica.auth
    if auth is None or auth.trust == trust:
        return
    for origin in replica.set_trust(trust):
        log.info("site certificate no longer trusted", extra={"site": origin})
        if swim is not None:
            await swim.forget_origin(origin)
