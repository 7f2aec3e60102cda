"""The public listener's handler: route one OpenAI-compatible request (§11).

Per request: read the body (bounded), take the model from its JSON field,
pick candidates from the current snapshot (`grid.gateway.routing`), and send
the request to the first that answers. Connect failures, a missing
credential, or a 502/503 before any byte reached the client move on to the
next candidate; once the client has received bytes nothing is retried.
Event streams are relayed chunk by chunk as they arrive.

Identity (§15): the ``client_auth`` filter (`grid.gateway.client_auth`) names
the request's tenant first, or refuses it (401 ``unauthenticated``, 400
``ambiguous_tenant``) before anything is routed.

Budgets (§12): a request whose tenant is exhausted in the budget
view is answered 429 ``budget_exhausted`` before anything is routed. Every
answer's ``usage`` is counted for its tenant and cluster; a stream is made to
carry its usage chunk (``stream_options.include_usage``), which is removed
again when the client did not ask for it.

Outgoing requests lose the client's ``Authorization``, ``x-api-key``, tenant
and ``x-ai-routing-*`` headers and the hop-by-hop ones, and ask for an
unencoded answer (``Accept-Encoding: identity``, which metering reads); they gain the candidate's
credential and the provider-hop headers ``x-ai-routing-candidate``,
``x-ai-routing-request-id`` and, for an enveloped overlay,
``x-ai-routing-revision``.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from grid.core.metering.bounds import UsageBound, usage_bound
from grid.core.metering.usage import (
    StreamUsage,
    answer_usage,
    ask_for_usage,
    decoded_body,
    stream_refusal,
)
from grid.gateway import request_trace
from grid.gateway.affinity import AffinityTable
from grid.gateway.agent_routes import AgentRoutes
from grid.gateway.body import BodyTooLarge, BodyTooSlow, read_body, write_within
from grid.gateway.client_auth import ClientAuth, Refusal
from grid.gateway.config import PraxisConfig
from grid.gateway.credentials import CredentialFiles
from grid.gateway.metering import TenantMeter
from grid.gateway.metrics import GatewayMetrics
from grid.gateway.paths import routable_target
from grid.gateway.redaction import Masker, error_answer, secret_of
from grid.gateway.routing import KIND, Router
from grid.gateway.settings import GatewaySettings
from grid.gateway.snapshot import Candidate, Snapshot
from grid.gateway.upstream import Upstream

SESSION_HEADER = "x-grid-session"
CANDIDATE_HEADER = "x-ai-routing-candidate"
REQUEST_ID_HEADER = "x-ai-routing-request-id"
REVISION_HEADER = "x-ai-routing-revision"

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_STRIPPED = _HOP_BY_HOP | {
    "authorization",
    "x-api-key",
    CANDIDATE_HEADER,
    REQUEST_ID_HEADER,
    REVISION_HEADER,
}
Metered = tuple[str, str, UsageBound]
"""Whom an answer's usage is billed to: (tenant label, cluster, the answer's bound)."""
_FAILOVER_STATUS = frozenset({502, 503})
_LARGE_BODY = 1024 * 1024
"""Bodies this size and up are sent from a stream (aiohttp's threshold for raw bytes)."""


def error(status: int, code: str, message: str) -> web.Response:
    """The gateway's own refusal: ``{error: {code, message}}``."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


@dataclass(frozen=True, slots=True)
class _Answered:
    """A cluster's answer to one attempt: relayed (``response``) or failed over from."""

    response: aiohttp.ClientResponse | None
    status: int
    outcome: str


class Proxy:
    """Routes requests by the current snapshot."""

    def __init__(
        self,
        config: PraxisConfig,
        settings: GatewaySettings,
        snapshot: Callable[[], Snapshot],
        upstreams: Mapping[str, Upstream],
        metrics: GatewayMetrics,
        meter: TenantMeter | None = None,
        client_auth: ClientAuth | None = None,
    ) -> None:
        self.config = config
        self.meter = meter or TenantMeter(None)
        self.client_auth = client_auth or ClientAuth(config.client_auth, settings.tenant_header)
        self._stripped = _STRIPPED | {settings.tenant_header.lower(), "accept-encoding"}
        self.settings = settings
        self._snapshot = snapshot
        self.upstreams = upstreams
        self.metrics = metrics
        self.affinity = AffinityTable(settings.affinity_ttl_s, settings.affinity_max)
        self.router = Router(settings.failover_max, metrics)
        self.credentials = CredentialFiles()
        self._model_header = config.model_header
        # Request ids: a random per-process prefix and a counter, unique without a
        # syscall per request (they identify, they do not authenticate).
        self._id_prefix = f"{secrets.token_hex(8)}-"
        self._ids = itertools.count(1)

    def app(self) -> web.Application:
        """The public application: POST anything under /v1/, GET /v1/models, and the
        tool and agent routes (`grid.gateway.agent_routes`)."""
        app = web.Application(client_max_size=self.settings.body_max_bytes)
        app.router.add_get("/v1/models", self.models)
        AgentRoutes(self).mount(app)  # /mcp and /a2a/{agent} (§16)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def models(self, _request: web.Request) -> web.Response:
        """The models the snapshot routes, in OpenAI's list shape."""
        names = dict.fromkeys(c.name for c in self._snapshot().candidates if c.kind == KIND)
        data = [{"id": n, "object": "model", "owned_by": "grid"} for n in names]
        return web.json_response({"object": "list", "data": data})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Route one request."""
        requests = self.metrics.requests
        target = routable_target(request.raw_path)
        if request.method != "POST" or target is None:
            requests["not_found"].inc()
            return error(404, "not_found", "only POST requests under /v1/ are routed")
        admitted = await self.admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        tenant, body = admitted
        document = self._document(body)
        model = self._model(document)
        if model is None:
            requests["bad_request"].inc()
            return error(
                400,
                "invalid_model",
                f"the body must be a JSON object with a non-blank '{self.config.model_field}' "
                f"of at most {self.settings.model_max_chars} characters",
            )
        snapshot = self._snapshot()
        session = request.headers.get(SESSION_HEADER)
        if session is not None and (not session or len(session) > self.settings.session_max_chars):
            session = None
        bound = self.affinity.get(session) if session is not None else None
        tries = self.router.attempts(snapshot, model, bound)
        if not tries:
            requests["no_candidate"].inc()
            return error(404, "no_candidate", "no candidate admits new requests for this model")
        assert isinstance(document, dict)
        if (problem := stream_refusal(document)) is not None:
            requests["bad_request"].inc()
            return error(400, "invalid_stream", problem)
        strip = ask_for_usage(document)
        if strip:
            body = json.dumps(document, separators=(",", ":")).encode()
        usage_cap = usage_bound(document, len(body), *self.settings.usage_limits)
        base = self._outgoing_headers(request, model, snapshot)
        request_trace.routed(model, tenant, snapshot, tries[0])
        last = len(tries) - 1
        for index, candidate in enumerate(tries):
            response = await self._attempt(request, target, body, base, candidate, index, last)
            if response is None:
                if index < last:
                    self.metrics.failovers.inc()
                continue
            if session is not None:
                self.affinity.bind(session, candidate.stable_id)
            metered = (self.meter.label(tenant), candidate.cluster, usage_cap)
            masker = Masker.of(secret_of(self._credential(candidate)))
            try:
                return await self._relay(request, response, metered, strip, masker)
            finally:
                self.router.ended(candidate)
        requests["upstream_unavailable"].inc()
        return error(502, "upstream_unavailable", "no candidate could be reached")

    async def admit(self, request: web.Request) -> tuple[str | None, bytes] | web.Response:
        """The request's tenant and body, or its refusal (identity, budget, body bounds)."""
        requests = self.metrics.requests
        try:
            tenant = self.meter.canonical(self.client_auth.tenant(request))
        except Refusal as refused:
            requests[refused.outcome].inc()
            return error(refused.status, refused.code, refused.message)
        if self.meter.is_exhausted(tenant):
            requests["budget_exhausted"].inc()
            return error(429, "budget_exhausted", "the tenant's budget is spent")
        limit = self.settings.body_max_bytes
        try:
            return tenant, await read_body(request, limit, *self.settings.body_pace)
        except BodyTooSlow:
            requests["body_timeout"].inc()
            slow = error(408, "body_timeout", "the body did not arrive at the minimum rate")
            slow.force_close()
            return slow
        except BodyTooLarge:
            requests["too_large"].inc()
            return error(413, "body_too_large", f"the body exceeds {limit} bytes")

    @staticmethod
    def _document(body: bytes) -> object:
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None

    def _model(self, document: object) -> str | None:
        if not isinstance(document, dict):
            return None
        model = document.get(self.config.model_field)
        if not isinstance(model, str) or not model.strip():
            return None
        return model if len(model) <= self.settings.model_max_chars else None

    def _outgoing_headers(
        self, request: web.Request, model: str, snapshot: Snapshot
    ) -> dict[str, str]:
        stripped = self._stripped
        headers = {k: v for k, v in request.headers.items() if k.lower() not in stripped}
        # Always: an encoded answer could not be metered, and aiohttp would otherwise
        # ask for gzip on behalf of a client that never asked for it.
        headers["Accept-Encoding"] = "identity"
        headers[self._model_header] = model
        headers[REQUEST_ID_HEADER] = f"{self._id_prefix}{next(self._ids):x}"
        if snapshot.revision is not None:
            headers[REVISION_HEADER] = snapshot.revision
        return headers

    def _credential(self, candidate: Candidate) -> tuple[str, str] | bool | None:
        """The credential header, None when the candidate needs none, False when missing."""
        if candidate.credential is None:
            return None
        entry = self.config.credentials.get(candidate.credential)
        if entry is None:
            return False
        value = self.credentials.value(entry.file)
        if value is None:
            return False
        if entry.strategy == "bearer_token":
            return ("Authorization", f"Bearer {value}")
        return ("x-api-key", value)

    async def _attempt(
        self,
        request: web.Request,
        target: str,
        body: bytes,
        base: dict[str, str],
        candidate: Candidate,
        index: int,
        last: int,
    ) -> aiohttp.ClientResponse | None:
        """One attempt, traced: the answer to relay, or None to try the next candidate."""
        headers = dict(base)
        headers[CANDIDATE_HEADER] = candidate.stable_id
        with request_trace.attempt(candidate, index, headers) as span:
            answer = await self._send(request, target, body, headers, candidate, index == last)
            if isinstance(answer, str):
                request_trace.attempt_ended(span, answer)
            else:
                request_trace.attempt_ended(span, answer.outcome, answer.status)
        if isinstance(answer, str) or answer.response is None:
            if index < last:
                request_trace.failed_over(
                    candidate, answer if isinstance(answer, str) else answer.outcome
                )
            return None
        return answer.response

    async def _send(
        self,
        request: web.Request,
        target: str,
        body: bytes,
        headers: dict[str, str],
        candidate: Candidate,
        final: bool,
    ) -> _Answered | str:
        """Send one attempt: how the cluster answered, or why nothing was answered
        (``no_credential``, ``connect_failed``)."""
        upstream = self.upstreams.get(candidate.cluster)
        credential = self._credential(candidate)
        if upstream is None or credential is False:
            return "no_credential"
        if isinstance(credential, tuple):
            headers[credential[0]] = credential[1]
        counter = self.metrics.upstream.get(candidate.cluster)
        if counter is not None:
            counter.inc()
        router = self.router
        started = router.started(candidate)
        try:
            response = await upstream.open().request(
                request.method,
                # Already normalised and encoded (`routable_target`): sent as it is.
                URL(upstream.next_base() + target, encoded=True),
                # aiohttp warns on large raw bytes; a fresh stream per attempt is fine.
                data=body if len(body) < _LARGE_BODY else io.BytesIO(body),
                headers=headers,
                server_hostname=upstream.server_hostname,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, TimeoutError, OSError):
            router.ended(candidate)
            if router.failed(candidate):
                request_trace.ejected(candidate)
            return "connect_failed"
        except BaseException:
            router.ended(candidate)
            raise
        if router.answered(candidate, response.status, started):
            request_trace.ejected(candidate)
        if response.status in _FAILOVER_STATUS and not final:
            response.release()
            router.ended(candidate)
            return _Answered(None, response.status, "failover_status")
        return _Answered(response, response.status, "ok")

    async def _relay(
        self,
        request: web.Request,
        response: aiohttp.ClientResponse,
        metered: Metered,
        strip: bool,
        masker: Masker,
    ) -> web.StreamResponse:
        headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers = masker.headers(headers)
        length = response.content_length
        streaming = response.headers.get("Content-Type", "").startswith("text/event-stream")
        requests = self.metrics.requests
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        try:
            if streaming and encoding not in ("", "identity"):
                # Asked for identity; an encoded stream's usage could not be read.
                requests["upstream_unavailable"].inc()
                return error(502, "upstream_unavailable", "the cluster's stream is encoded")
            if response.status >= 400:  # an error body may echo the credential
                try:
                    answer = await error_answer(
                        response, headers, masker, self.settings.error_body_max_bytes
                    )
                except (aiohttp.ClientError, TimeoutError):
                    requests["upstream_unavailable"].inc()
                    return error(502, "upstream_unavailable", "the cluster's answer broke off")
                requests["routed"].inc()
                return answer
            if not streaming and length is not None and length <= self.settings.buffer_max_bytes:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError):
                    requests["upstream_unavailable"].inc()
                    return error(502, "upstream_unavailable", "the cluster's answer broke off")
                requests["routed"].inc()
                self._meter_answer(
                    decoded_body(data, encoding, self.settings.buffer_max_bytes), metered
                )
                return web.Response(status=response.status, body=data, headers=headers)
            usage = StreamUsage(strip) if streaming else None
            out = await self._stream(request, response, headers, usage)
            if usage is not None and usage.usage is not None:
                self.meter.add_answer(*metered, usage.usage)
            return out
        finally:
            response.release()

    def _meter_answer(self, data: bytes, metered: Metered) -> None:
        usage = answer_usage(data)
        if usage is not None:
            self.meter.add_answer(*metered, usage)

    async def _stream(
        self,
        request: web.Request,
        response: aiohttp.ClientResponse,
        headers: dict[str, Any],
        usage: StreamUsage | None,
    ) -> web.StreamResponse:
        out = web.StreamResponse(status=response.status, headers=headers)
        await out.prepare(request)
        try:
            async for chunk in response.content.iter_any():
                if usage is not None:
                    chunk = usage.feed(chunk)
                    if not chunk:
                        continue
                await write_within(out, chunk, self.settings.write_timeout_s)
            if usage is not None and (rest := usage.finish()):
                await write_within(out, rest, self.settings.write_timeout_s)
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            # Bytes already reached the client: never retried; the connection is cut
            # so the client sees an incomplete answer rather than a clean end.
            self.metrics.requests["stream_broken"].inc()
            response.close()
            if request.transport is not None:
                request.transport.abort()
            return out
        self.metrics.requests["routed"].inc()
        with contextlib.suppress(ConnectionError):
            await out.write_eof()
        return out
