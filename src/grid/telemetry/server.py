"""The telemetry admission gateway: seed 004's six steps over mTLS with aiohttp.

`TelemetryGateway` owns the pure `Admission` (roster, buckets, capacity), a
`Backbone` and a `RosterLog`. `start` replays the roster in full, then opens the
listener, then starts the roster tail, so no request is ever judged against a
partial roster. Each request runs the steps in seed order exactly:

1. identity from the verified leaf certificate (SPIFFE URI SAN, else CN);
2. roster lookup; 3. rate, then capacity reservation (before any body byte);
4. content type and a bounded read; 5. decode, versions, stamp, validate;
6. durable publish within the budget; only the backbone's receipt yields 200.

A client that sends ``Expect: 100-continue`` is invited to send its body
only after steps 1 to 4 passed, so a refused body never leaves the client.
After a refusal before the body was read, a declared body of at most 64 KiB
is read and discarded so the client keeps its connection; any other unread
body closes the TCP connection at once, so it is never read.

The listener is `grid.adapters.http_listener` under the gateway's settings:
the TLS handshake and every request head within ``header_read_timeout_s``, a
kept-alive connection closed after ``idle_timeout_s`` of silence, at most
``connections_max`` connections counted from TCP accept. A malformed request
(bad header bytes, an unparsable Content-Length) is answered with a Refusal
``invalid_batch`` and the connection closed; nothing it sent is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
import uuid
from collections.abc import Callable

from aiohttp import HttpVersion11, web
from cryptography import x509
from prometheus_client import CollectorRegistry

from grid.adapters.backbone import Backbone, PublishBatch, RosterLog
from grid.adapters.health_server import ClosedCounter
from grid.adapters.http_listener import HttpListener, ListenerPolicy
from grid.core.address import format_address, parse_address
from grid.core.telemetry.admission import Admission, StampedBatch, Ticket
from grid.core.telemetry.refusals import (
    REFUSALS,
    BackboneUnavailable,
    GatewayAtCapacity,
    InvalidBatch,
    TelemetryRefusal,
)
from grid.core.telemetry.settings import GatewaySettings
from grid.core.telemetry.stamping import ReceptionStamp
from grid.core.telemetry.validation import Route
from grid.core.trust import workload_identity
from grid.telemetry.responses import ack_response, refusal_response

log = logging.getLogger("grid.telemetry")

READ_CHUNK_BYTES = 64 * 1024
PRUNE_EVERY_REQUESTS = 1024
ROSTER_RETRY_S = 1.0
OUTCOMES = ("accepted", *(refusal.code for refusal in REFUSALS))
"""The closed ``outcome`` label of ``grid_telemetry_batches_total``."""


def server_ssl_context(cert: str, key: str, client_ca: str) -> ssl.SSLContext:
    """A TLS server context that requires a client certificate chained to ``client_ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


@functools.lru_cache(maxsize=4096)
def identity_of_leaf(der: bytes) -> str | None:
    """The agent ID a verified leaf asserts: its single SPIFFE URI SAN, else its CN."""
    try:
        return workload_identity(x509.load_der_x509_certificate(der))
    except ValueError:
        return None


def peer_leaf_der(request: web.Request) -> bytes | None:
    """The DER of the verified client leaf certificate of this request's connection."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der if der else None


def listener_error_answer(status: int, reason: str) -> web.StreamResponse:
    """A Refusal for a request the listener refuses itself (malformed, or a failed handler)."""
    refusal: TelemetryRefusal
    if status < 500:
        refusal = InvalidBatch(f"malformed request ({reason})")
    else:
        refusal = GatewayAtCapacity("the request could not be processed", retry_after_s=1.0)
    return refusal_response(refusal, uuid.uuid4().hex, "")


async def _defer_continue(request: web.Request) -> None:
    """Expect handler that sends nothing yet: ``100 Continue`` waits for steps 1-4."""
    expect = request.headers.get("Expect", "")
    if expect and expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown Expect: {expect}")


async def _send_continue(request: web.Request) -> None:
    """Invite the body only once identity, roster, rate, capacity and headers passed."""
    if (
        request.version == HttpVersion11
        and request.headers.get("Expect", "").lower() == "100-continue"
        and request.writer is not None
    ):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0


class TelemetryGateway:
    """The admission gateway service: the pipeline, the listener and the roster tail."""

    def __init__(
        self,
        settings: GatewaySettings,
        backbone: Backbone,
        roster_log: RosterLog,
        ssl_context: ssl.SSLContext,
        gateway_id: str,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.settings = settings
        self.admission = Admission(settings)
        self.backbone = backbone
        self.roster_log = roster_log
        self.ssl_context = ssl_context
        self.gateway_id = gateway_id
        self._monotonic = monotonic
        self._wall_ns = wall_ns
        self.listener = HttpListener(
            self.app(),
            ListenerPolicy(
                header_read_timeout_s=settings.header_read_timeout_s,
                idle_timeout_s=settings.idle_timeout_s,
                connections_max=settings.connections_max,
            ),
            ssl_context=ssl_context,
            error_answer=listener_error_answer,
            auto_decompress=False,
        )
        self.connections = self.listener.connections
        self._tail_task: asyncio.Task[None] | None = None
        self._requests = 0
        self.address: str | None = None
        self.registry = CollectorRegistry()
        self.outcomes = ClosedCounter(
            "grid_telemetry_batches_total",
            "Admission requests by outcome: accepted, or the refusal code (SPEC-DECISIONS §8).",
            "outcome",
            OUTCOMES,
            self.registry,
        )

    def app(self) -> web.Application:
        """The aiohttp application with the two admission routes."""
        app = web.Application(client_max_size=self.settings.request_body_bytes_max)
        for route in ("events", "inventory"):
            app.router.add_post(
                f"/v1/{route}",
                functools.partial(self.handle, route=route),
                expect_handler=_defer_continue,
            )
        return app

    async def start(self) -> str:
        """Replay the roster in full, open the listener, then tail the roster."""
        self.admission.roster.replay(await self.roster_log.replay())
        host, port = parse_address(self.settings.listen, default_host="0.0.0.0")
        self.address = format_address(*await self.listener.start(host, port))
        self._tail_task = asyncio.create_task(self._follow_roster(), name="grid-roster-tail")
        return self.address

    async def _follow_roster(self) -> None:
        """Apply roster appends as they arrive; reconnect after a store failure."""
        while True:
            try:
                async for entry in self.roster_log.tail(self.admission.roster.revision):
                    if self.admission.roster.apply(entry):
                        log.info("roster: %s is %s", entry.agent_id, entry.state)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("roster tail failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(ROSTER_RETRY_S)

    async def stop(self) -> None:
        """Stop listening, finish in-flight requests (bounded), and stop the tail."""
        if self._tail_task is not None:
            self._tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail_task
            self._tail_task = None
        await self.listener.stop()

    async def handle(self, request: web.Request, *, route: Route) -> web.StreamResponse:
        """One admission request through the six steps."""
        request_id = uuid.uuid4().hex
        accept = request.headers.get("Accept", "")
        ticket: Ticket | None = None
        try:
            # Steps 1-3: identity, roster, rate then capacity (before any body byte).
            agent_id = self.admission.identify(identity_of_leaf(peer_leaf_der(request) or b""))
            content_length = request.content_length
            ticket = self.admission.admit(agent_id, route, content_length, self._monotonic())
            self._housekeep()
            # Step 4: content type, declared length, bounded read.
            self.admission.check_content(request.headers.get("Content-Type", ""), content_length)
            await _send_continue(request)
            body = await self._read_body(request)
            # Step 5: decode, versions, stamp, validate.
            reception = ReceptionStamp(self.gateway_id, self._wall_ns(), request_id)
            stamped = self.admission.accept(ticket, body, reception)
            # Step 6: durable publish within the budget.
            accepted = await self._publish(stamped)
            self.outcomes.inc("accepted")
            return ack_response(stamped.batch_id, accepted, request_id)
        except TelemetryRefusal as refusal:
            self.outcomes.inc(refusal.code)
            # An unread body is the listener's: a small one is dropped after the
            # answer so the connection is kept, any other closes the socket unread.
            return refusal_response(refusal, request_id, accept)
        finally:
            if ticket is not None:
                self.admission.release(ticket)

    def _housekeep(self) -> None:
        self._requests += 1
        if self._requests % PRUNE_EVERY_REQUESTS == 0:
            self.admission.buckets.prune(self._monotonic())

    async def _read_body(self, request: web.Request) -> bytes:
        """Read at most the body limit, within the read budget."""
        limit = self.settings.request_body_bytes_max
        chunks: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(self.settings.body_read_budget_s):
                while chunk := await request.content.read(READ_CHUNK_BYTES):
                    total += len(chunk)
                    if total > limit:
                        raise self.admission.body_too_large()
                    chunks.append(chunk)
        except TimeoutError as exc:
            raise InvalidBatch(
                f"body not received within {self.settings.body_read_budget_s:g} s"
            ) from exc
        return b"".join(chunks)

    async def _publish(self, stamped: StampedBatch) -> int:
        """Publish durably within the budget; anything short of a receipt is a 503."""
        batch = PublishBatch(stamped.batch_id, stamped.route, stamped.stamped, stamped.accepted)
        try:
            receipt = await asyncio.wait_for(
                self.backbone.publish(batch), self.settings.publish_budget_s
            )
        except Exception as exc:
            log.warning("publish of batch %s failed: %s", stamped.batch_id, type(exc).__name__)
            raise BackboneUnavailable(
                "no durable publication result; nothing was acknowledged",
                retry_after_s=self.settings.backbone_retry_after_s,
            ) from exc
        if receipt.batch_id != stamped.batch_id:
            raise BackboneUnavailable(
                "backbone receipt names another batch",
                retry_after_s=self.settings.backbone_retry_after_s,
            )
        return stamped.accepted
