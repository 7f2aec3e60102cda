"""The gateway's connection cap, sized below the process's file descriptor limit.

Every client connection holds a descriptor, and so does the cluster connection
it is relayed over, so a cap equal to ``nofile`` lets idle connections exhaust
the descriptors before the cap refuses anything (accept then fails, and honest
clients with it). At start the gateway raises its soft ``RLIMIT_NOFILE`` to the
hard limit, then caps its public connections at half of what is left after
``DESCRIPTORS_RESERVED`` (files, the admin listener, logs), and never above the
configured cap: with ``nofile`` 1,024 that is 480 connections.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

DESCRIPTORS_RESERVED = 64
"""Descriptors kept for everything but client and cluster connections."""

CONNECTIONS_MIN = 16
"""The cap never goes below this, however low the limit."""


def raise_nofile() -> int:
    """Raise the soft descriptor limit to the hard one; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            log.warning("cannot raise the descriptor limit", extra={"soft": soft, "hard": hard})
    return soft


def connection_cap(configured: int, nofile: int) -> int:
    """The public listener's cap: half the descriptors past the reserve, at most ``configured``."""
    if nofile == resource.RLIM_INFINITY:
        return configured
    return max(CONNECTIONS_MIN, min(configured, (nofile - DESCRIPTORS_RESERVED) // 2))
