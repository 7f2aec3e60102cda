"""Poll-mode ingest feedback: every overlay reload and signals ingest is a §7 report."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from grid.demo.pki import DevCA
from grid.gateway.config import load_config
from grid.gateway.feedback import FeedbackReporter, ReporterSettings
from grid.gateway.ingest_reports import IngestReports
from grid.gateway.server import Gateway
from grid.gateway.settings import GatewaySettings
from grid.gateway.signals_poll import SiteCredentials
from grid.testing.gateway import Upstream, candidate, envelope, overlay, render_praxis, write_json
from grid.testing.poll import eventually
from grid.testing.signals_operator import SignalsOperator

FAST = GatewaySettings(
    signals_poll_interval_s=0.05,
    signals_backoff_max_s=0.2,
    overlay_poll_interval_s=0.05,
    feedback=ReporterSettings(initial_backoff_s=0.05, max_backoff_s=0.2, request_timeout_s=2.0),
)


class _NoTransport:
    async def post(self, headers: Any) -> None:
        return None


def test_a_good_ingest_is_held_while_the_other_source_stands_rejected() -> None:
    reporter = FeedbackReporter(_NoTransport(), reporter_id="gw", epoch=1)
    reports = IngestReports(reporter)
    reports.ingest("overlay", True)
    assert reporter.pending is not None and reporter.pending.clean
    reports.ingest("overlay", False)
    assert reporter.pending.rejected == 1 and not reporter.pending.clean
    sequence = reporter.sequence
    reports.ingest("signals", True)  # would claim clean: held
    assert reporter.sequence == sequence and reports.held == 1
    reports.ingest("signals", False)  # a refused document is always reported
    assert reporter.pending.rejected == 2 and not reporter.pending.clean
    reports.ingest("overlay", True)  # signals still stands rejected
    assert reports.held == 2
    reports.ingest("signals", True)
    assert reporter.pending.clean and reporter.pending.rejected == 2


@pytest.fixture
async def operator(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCA()
    issued = ca.issue_site("east")
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    (directory / "east.pem").write_bytes(issued.cert_pem)
    (directory / "east-key.pem").write_bytes(issued.key_pem)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(directory / "ca.pem"))
    tls.load_cert_chain(str(directory / "east.pem"), str(directory / "east-key.pem"))
    tls.verify_mode = ssl.CERT_REQUIRED
    server = SignalsOperator(tls, _signals(1))
    address = await server.start()
    site = SiteCredentials(directory / "east.pem", directory / "east-key.pem", directory / "ca.pem")
    yield server, address, site
    await server.stop()


def _signals(sequence: int, valid: bool = True) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema_version": "1.0.0",
        "network": "net",
        "site": "east",
        "epoch": 1,
        "sequence": sequence,
        "generated_at": "2026-01-01T00:01:00Z",
        "providers": [],
    }
    if not valid:
        del document["providers"]
    return document


async def test_reloads_and_signals_ingests_are_reported_and_acknowledged(
    operator: Any, tmp_path: Path
) -> None:
    server, address, site = operator
    server.ingest_status = 405  # an operator without feedback, at first
    up = await Upstream("a").start()
    overlay_path = tmp_path / "grid-overlay.json"
    good = envelope(overlay(candidate("a")))
    write_json(overlay_path, good)
    rendered, _public, _admin = render_praxis(
        overlay(candidate("a")), [up], tmp_path, overlay_file=overlay_path
    )
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    gateway = Gateway(load_config(path, 1 << 20), FAST, path, address, site)
    assert gateway.reports is not None
    reporter = gateway.reports.reporter
    await gateway.start()
    try:
        # Unacknowledged (405) evidence is kept and re-sent, never dropped.
        await eventually(lambda: len(server.reports) >= 3, "reports re-sent while refused")
        assert reporter.pending is not None and not server.acknowledged
        server.ingest_status = None
        await eventually(lambda: reporter.pending is None, "the pending report acknowledged")
        assert server.acknowledged[-1].clean and server.acknowledged[-1].rejected == 0
        assert all(server.client_certs)

        # A reload the verifier rejects raises the cumulative counter.
        broken = {**good, "content_digest": {"algorithm": "sha256", "value": "0" * 64}}
        write_json(overlay_path, broken)
        await eventually(
            lambda: server.acknowledged and server.acknowledged[-1].rejected == 1,
            "the rejected reload reported",
        )
        assert not server.acknowledged[-1].clean
        # Good signals ingests meanwhile are held: they must not clear the evidence.
        server.document = _signals(2)
        await eventually(lambda: gateway.reports is not None and gateway.reports.held, "held")
        assert not server.acknowledged[-1].clean

        # A good reload reports clean, the counter unchanged.
        write_json(overlay_path, envelope(overlay(candidate("a"), candidate("a2"))))
        await eventually(
            lambda: server.acknowledged[-1].clean and reporter.pending is None,
            "a clean report after the good reload",
        )
        assert server.acknowledged[-1].rejected == 1

        # A refused signals document is a rejected ingest too.
        server.document = _signals(3, valid=False)
        await eventually(lambda: server.acknowledged[-1].rejected == 2, "refused document")
        epochs = {r.epoch for r in server.reports}
        sequences = [r.sequence for r in server.acknowledged]
        assert len(epochs) == 1 and sequences == sorted(set(sequences))
    finally:
        await gateway.stop()
        await up.stop()


async def test_an_unreachable_or_failing_operator_keeps_the_evidence(
    operator: Any, tmp_path: Path
) -> None:
    server, address, site = operator
    server.ingest_status = 503
    up = await Upstream("a").start()
    rendered, _public, _admin = render_praxis(overlay(candidate("a")), [up], tmp_path)
    path = tmp_path / "praxis.yaml"
    path.write_text(rendered.text)
    gateway = Gateway(load_config(path, 1 << 20), FAST, path, address, site)
    assert gateway.reports is not None
    reporter = gateway.reports.reporter
    server.document = _signals(1, valid=False)
    await gateway.start()
    try:
        await eventually(lambda: len(server.reports) >= 3, "retried against 503")
        assert reporter.pending is not None and reporter.pending.rejected >= 1
        await eventually(lambda: reporter.failures >= 3, "each 503 counted as a failure")
        server.ingest_status = 404
        count = len(server.reports)
        await eventually(lambda: len(server.reports) > count + 1, "retried against 404")
        server.ingest_status = None
        await eventually(lambda: reporter.pending is None, "delivered once the operator answers")
        assert server.acknowledged[-1].rejected == reporter.rejected >= 1
        assert not server.acknowledged[-1].clean
    finally:
        await gateway.stop()
        await up.stop()
