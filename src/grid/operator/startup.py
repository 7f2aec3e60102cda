"""Operator start-up: which GridNetwork to serve, its SWIM key, and a new gridId.

One operator serves one GridNetwork in one signal mode, read once at start
(seed 000). These checks run before anything binds a socket, so a refusal is a
clear message and a non-zero exit, never a half-started process.
"""

from __future__ import annotations

import os
import time
import uuid

from grid.adapters.store.port import ResourceStore
from grid.core.resources import GridNetwork
from grid.errors import GridError

SWIM_KEY_DEFAULT_ITEM = "swim.key"
"""Key read from the swimKeyRef Secret when the reference names none."""


def new_grid_id() -> str:
    """A fresh gridId: a UUIDv7, time-ordered so the oldest id sorts first."""
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = (rand >> 62) & 0xFFF, rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b))


class StartupError(GridError):
    """The operator cannot start; the message says what to fix."""

    code = "startup_failed"


async def select_network(store: ResourceStore, wanted: str | None) -> GridNetwork:
    """The one GridNetwork this operator serves; refuses none or more than one.

    One operator serves one GridNetwork (seed 000): with more than one in the
    store it refuses to start rather than pick a signal mode for the process.
    ``wanted`` (``--network``) must then name that one network.
    """
    networks = [GridNetwork.model_validate(o) for o in await store.list("GridNetwork")]
    if not networks:
        raise StartupError("no GridNetwork in the store: apply one first (grid apply -f ...)")
    if len(networks) > 1:
        names = ", ".join(sorted(n.name for n in networks))
        raise StartupError(
            f"one operator serves one GridNetwork, found {len(networks)} ({names}); "
            "remove the others or run one operator per network with its own store"
        )
    network = networks[0]
    if wanted is not None and network.name != wanted:
        raise StartupError(f"GridNetwork {wanted!r} is not in the store (found {network.name!r})")
    return network
