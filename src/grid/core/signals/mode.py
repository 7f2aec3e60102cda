"""The signal transport's lifecycle rules (seed 000), as pure decisions.

The mode (``gossip`` or ``poll``) is read once, when the operator starts, and
fixed for the process: it decides whether the mTLS signals listener is bound
at all. Later declarations are judged against what the process runs:

* a GridNetwork declaring another mode than the running one (including one
  created after start) means exit, so the supervisor restarts the operator
  into the declared mode; the change is a restart, never a live flip;
* a peer-trust change (a GridSite fingerprint edited, a site added to or
  removed from trust, the trust mode or domain changed) means exit under poll
  only, because only the poll path's listener and poller hold the trust they
  started with; under gossip nothing restarts;
* certificate rotation reads the declared trust on every check: it re-reads
  the mounted SVID files under ``spiffe`` and does nothing under ``pin`` (a
  pinned fingerprint would no longer match a rotated certificate), so under
  gossip a switch to pin stops rotation without a restart.

`judge` answers with None (keep running) or the one line the operator logs
before it exits non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grid.core.trust import TrustPolicy

Mode = Literal["gossip", "poll"]


@dataclass(frozen=True)
class Running:
    """What this process fixed at start: its mode, and the trust the poll path holds."""

    network: str
    mode: Mode
    trust: TrustPolicy | None = None
    """The declared trust at start (always known under poll; None under gossip)."""


def judge(running: Running, declared_mode: Mode, declared_trust: TrustPolicy | None) -> str | None:
    """None to keep running, else why the process must exit for a restart.

    ``declared_trust`` is None when it cannot be built (no certificate
    configured); under poll that never happens, as poll refuses to start
    without one.
    """
    if declared_mode != running.mode:
        return (
            f"GridNetwork {running.network!r} declares signalTransport.mode: {declared_mode}, "
            f"this process serves {running.mode}; exiting to restart in {declared_mode} mode"
        )
    if running.mode == "poll" and declared_trust != running.trust:
        return (
            f"peer trust of GridNetwork {running.network!r} changed; "
            "exiting to restart the poll path with the declared trust"
        )
    return None


def rotates(declared_trust_mode: str) -> bool:
    """Whether certificate rotation re-reads the site's certificate files (spiffe only)."""
    return declared_trust_mode == "spiffe"
