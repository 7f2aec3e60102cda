"""The gateway's reporter against the real ingest endpoint over mTLS.

An operator without feedback (405) or one that cannot be reached leaves the
evidence pending; the same reporter delivers it once an operator with feedback
answers, and the persisted state is the reporter's.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from grid.adapters.tls_probe import client_context
from grid.gateway.feedback import Delivery, FeedbackReporter, HttpIngestTransport

from .conftest import Pki
from .feedback_harness import serving


def sites(pki: Pki) -> dict[str, tuple[Path, Path]]:
    return {name: (s.cert, s.key) for name, s in pki.sites.items()}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_evidence_survives_an_old_operator_and_an_outage_then_is_delivered(
    pki: Pki,
) -> None:
    own = client_context(pki.ca, pki.sites["east"].cert, pki.sites["east"].key)
    unreachable = HttpIngestTransport(f"127.0.0.1:{closed_port()}", own, 5.0)
    reporter = FeedbackReporter(
        unreachable,
        reporter_id="gw-east",
        replica="east-0",
        epoch=7,
        rng=random.Random(1),
    )
    reporter.record(accepted=False)
    assert await reporter.send_once() is Delivery.RETRY  # unreachable
    await unreachable.close()
    async with serving(pki.ca, sites(pki), enabled=False) as old:
        transport = HttpIngestTransport(old.url.removeprefix("https://"), own, 5.0)
        reporter.transport = transport
        assert await reporter.send_once() is Delivery.RETRY  # 405: no feedback there
        assert await old.get_signals("east") == 200  # polling still works
        await transport.close()
    sent = reporter.record(accepted=True)
    assert sent.rejected == 1 and sent.sequence == 2
    async with serving(pki.ca, sites(pki)) as new:
        transport = HttpIngestTransport(new.url.removeprefix("https://"), own, 5.0)
        reporter.transport = transport
        assert await reporter.send_once() is Delivery.ACKED
        await transport.close()
        (persisted,) = (await new.status())["gatewayFeedback"]["reporters"]
    assert reporter.pending is None
    # The operator first sees this reporter at sequence 2 with one rejection: evidence.
    assert (persisted["sequence"], persisted["rejected"], persisted["evidence"]) == ("2", "1", True)
