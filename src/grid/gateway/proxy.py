"""The public listener's handler: route one OpenAI-compatible request (§11).

Per request: read the body (bounded), pick candidates from the current
snapshot (`grid.gateway.routing`), and let the pure planner
(`grid.gateway.plan`) turn the pieces into a refusal or a plan; `Proxy` then
only carries the plan out: its attempts in order, each credential read from
its reference as the attempt is sent, and the plan's failover rule (connect
failures, a missing credential, or a 502/503 before any byte reached the
client move on to the next attempt; once the client has received bytes
nothing is retried). Event streams are relayed chunk by chunk as they arrive.

Identity (§15): the ``client_auth`` filter (`grid.gateway.client_auth`) names
the request's tenant first, or refuses it (401 ``unauthenticated``, 400
``ambiguous_tenant``) before anything is routed.

Budgets (§12): a request whose tenant is exhausted in the budget
view is answered 429 ``budget_exhausted`` before anything is routed. Every
answer's ``usage`` is counted for its tenant and cluster; a stream is made to
carry its usage chunk (``stream_options.include_usage``), which is removed
again when the client did not ask for it.

Outgoing requests lose the client's ``Authorization``, ``x-api-key``, tenant
and ``x-ai-routing-*`` headers and the hop-by-hop ones (those ``Connection``
lists included), and ask for an unencoded answer (``Accept-Encoding:
identity``, which metering reads); they gain the candidate's credential and
the provider-hop headers ``x-ai-routing-candidate``,
``x-ai-routing-request-id`` and, for an enveloped overlay,
``x-ai-routing-revision``. Headers stay multidicts both ways, so repeated
ones (``Set-Cookie``) keep every value.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from grid.core.metering.bounds import UsageBound
from grid.core.metering.usage import (
    StreamUsage,
    answer_usage,
    decoded_body,
)
from grid.gateway import request_trace
from grid.gateway.affinity import AffinityTable
from grid.gateway.agent_routes import AgentRoutes
from grid.gateway.body import BodyTooLarge, BodyTooSlow, read_body, write_within
from grid.gateway.client_auth import ClientAuth, Refused
from grid.gateway.config import PraxisConfig
from grid.gateway.credentials import CredentialFiles
from grid.gateway.metering import TenantMeter
from grid.gateway.metrics import GatewayMetrics
from grid.gateway.paths import routable_target
from grid.gateway.plan import (
    NOT_FOUND,
    STRIPPED,
    UNREACHABLE,
    Attempt,
    FailoverRule,
    Plan,
    PlanRules,
    Refusal,
    attempt_of,
    budget_refusal,
    not_relayed,
    plan_request,
    routable,
)
from grid.gateway.redaction import Masker, error_answer
from grid.gateway.routing import KIND, Router
from grid.gateway.settings import GatewaySettings
from grid.gateway.snapshot import Candidate, Snapshot
from grid.gateway.upstream import Upstream

SESSION_HEADER = "x-grid-session"
Metered = tuple[str, str, UsageBound]
"""Whom an answer's usage is billed to: (tenant label, cluster, the answer's bound)."""
_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
_LARGE_BODY = 1024 * 1024
"""Bodies this size and up are sent from a stream (aiohttp's threshold for raw bytes)."""


def error(status: int, code: str, message: str) -> web.Response:
    """The gateway's own refusal: ``{error: {code, message}}``."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


BODY_TIMEOUT = Refusal(
    408, "body_timeout", "the body did not arrive at the minimum rate", "body_timeout"
)
ENCODED_STREAM = Refusal(
    502, "upstream_unavailable", "the cluster's stream is encoded", "upstream_unavailable"
)
"""Asked for identity; an encoded stream's usage could not be read."""
BROKE_OFF = Refusal(
    502, "upstream_unavailable", "the cluster's answer broke off", "upstream_unavailable"
)


@dataclass(slots=True)
class Answered:
    """A cluster's answer to one attempt: relayed (``response``) or failed over from."""

    response: aiohttp.ClientResponse | None
    status: int
    outcome: str
    secret: str | None = None
    """The credential value sent, for masking what is relayed."""


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
        self.settings = settings
        self.config = config
        self.meter = meter or TenantMeter(None)
        self.client_auth = client_auth or ClientAuth(config.client_auth, settings.tenant_header)
        self.snapshot = snapshot
        """The current routing snapshot."""
        self.upstreams = upstreams
        self.metrics = metrics
        self.affinity = AffinityTable(settings.affinity_ttl_s, settings.affinity_max)
        self.router = Router(settings.failover_max, metrics)
        self.credentials = CredentialFiles()
        self._pace = settings.body_pace
        """(grace, minimum rate, timeout) of a body (the settings are fixed per process)."""
        # Request ids: a random per-process prefix and a counter, unique without a
        # syscall per request (they identify, they do not authenticate).
        self._id_prefix = f"{secrets.token_hex(8)}-"
        self._ids = itertools.count(1)

    @property
    def config(self) -> PraxisConfig:
        """The running config; setting it (a praxis.yaml reload) renews `rules`."""
        return self._config

    @config.setter
    def config(self, config: PraxisConfig) -> None:
        self._config = config
        settings = self.settings
        self.rules = PlanRules(
            model_field=config.model_field,
            model_header=config.model_header,
            model_max_chars=settings.model_max_chars,
            session_max_chars=settings.session_max_chars,
            credentials=config.credentials,
            usage_limits=settings.usage_limits,
            stripped=STRIPPED | {settings.tenant_header.lower()},
        )

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
        names = dict.fromkeys(c.name for c in self.snapshot().candidates if c.kind == KIND)
        data = [{"id": n, "object": "model", "owned_by": "grid"} for n in names]
        return web.json_response({"object": "list", "data": data})

    def refuse(self, refusal: Refusal) -> web.Response:
        """The refusal's answer, counted under its outcome."""
        self.metrics.requests[refusal.outcome].inc()
        return error(refusal.status, refusal.code, refusal.message)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Route one request: plan it (`grid.gateway.plan`), then carry the plan out."""
        target = routable_target(request.raw_path)
        if request.method != "POST" or target is None:
            return self.refuse(NOT_FOUND)
        admitted = await self.admit(request)
        if not isinstance(admitted, tuple):  # (a Response is an ABC: a slower check)
            return admitted
        tenant, body = admitted
        rules = self.rules
        parsed = routable(self._document(body), request.headers.get(SESSION_HEADER), rules)
        if isinstance(parsed, Refusal):
            return self.refuse(parsed)
        snapshot = self.snapshot()
        session = parsed.session
        bound = self.affinity.get(session) if session is not None else None
        tries = self.router.attempts(snapshot, parsed.model, bound)
        plan = plan_request(
            request.headers, target, body, parsed, tries, rules, self.request_id(),
            snapshot.revision,
        )  # fmt: skip
        if isinstance(plan, Refusal):
            return self.refuse(plan)
        recording = request_trace.recording()  # asked once per request, not per attempt
        if recording:
            request_trace.routed(plan.model, tenant, snapshot, plan.attempts[0].candidate)
        return await self.execute(request, plan, tenant, recording)

    async def execute(
        self, request: web.Request, plan: Plan, tenant: str | None, recording: bool | None = None
    ) -> web.StreamResponse:
        """The plan's attempts in order until one answers; that answer is relayed.
        ``recording`` says whether the request is traced (None: look it up)."""
        answered = await self.first_answer(request, plan, recording)
        if answered is None:
            return self.refuse(UNREACHABLE)
        attempt, answer = answered
        if plan.session is not None:
            self.affinity.bind(plan.session, attempt.candidate.stable_id)
        return await self.relay(request, plan, attempt, answer, tenant)

    async def first_answer(
        self, request: web.Request, plan: Plan, recording: bool | None = None
    ) -> tuple[Attempt, Answered] | None:
        """The plan's attempts in order until one answers: that attempt and its answer
        (to relay, which ends it with the router), or None when every one failed over."""
        last = len(plan.attempts) - 1
        for attempt in plan.attempts:
            answered = await self.send(request, attempt, plan, last, recording)
            if answered is not None:
                return attempt, answered
            if attempt.index < last:
                self.metrics.failovers.inc()
        return None

    async def relay(
        self,
        request: web.Request,
        plan: Plan,
        attempt: Attempt,
        answered: Answered,
        tenant: str | None,
    ) -> web.StreamResponse:
        """Relay the answer to one of the plan's attempts, metered for ``tenant``, its
        credential masked; the attempt then ends with the router."""
        response, candidate = answered.response, attempt.candidate
        assert response is not None
        metered = (self.meter.label(tenant), candidate.cluster, plan.usage_cap)
        try:
            masker = Masker.of(answered.secret)
            return await self._relay(request, response, metered, plan.strip_usage, masker)
        finally:
            self.router.ended(candidate)

    async def admit(self, request: web.Request) -> tuple[str | None, bytes] | web.Response:
        """The request's tenant and body, or its refusal (identity, budget, body bounds)."""
        try:
            tenant = self.meter.canonical(self.client_auth.tenant(request))
        except Refused as refused:
            return self.refuse(refused.refusal)
        if (spent := budget_refusal(self.meter.is_exhausted(tenant))) is not None:
            return self.refuse(spent)
        limit = self.settings.body_max_bytes
        try:
            return tenant, await read_body(request, limit, *self._pace)
        except BodyTooSlow:
            slow = self.refuse(BODY_TIMEOUT)
            slow.force_close()
            return slow
        except BodyTooLarge:
            return self.refuse(
                Refusal(413, "body_too_large", f"the body exceeds {limit} bytes", "too_large")
            )

    @staticmethod
    def _document(body: bytes) -> object:
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None

    def request_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids):x}"

    def credential(self, candidate: Candidate) -> tuple[str, str] | bool | None:
        """The header carrying the candidate's credential for the gateway's own messages
        to its cluster (an MCP session's handshake): None when it needs none, False when
        it is missing."""
        attempt = attempt_of(candidate, 0, "", _NO_HEADERS, self.rules)
        if attempt.blocked is not None:
            return False
        if attempt.credential is None:
            return None
        value = self.credentials.value(attempt.credential.file)
        return False if value is None else attempt.credential.inject(value)

    async def send(
        self,
        request: web.Request,
        attempt: Attempt,
        plan: Plan,
        last: int,
        recording: bool | None = None,
    ) -> Answered | None:
        """One attempt of the plan, traced: the answer to relay, or None to go on to the
        next one (``last`` is the index of the plan's last attempt; ``recording``, whether
        the request is traced, None to look it up)."""
        candidate, index = attempt.candidate, attempt.index
        headers = attempt.headers
        final = index == last
        if recording is None:
            recording = request_trace.recording()
        if not recording:  # not sampled: no span to open or end
            answer = await self._send(request, attempt, plan.body, headers, plan.failover, final)
        else:
            with request_trace.attempt(candidate, index, headers) as span:
                answer = await self._send(
                    request, attempt, plan.body, headers, plan.failover, final
                )
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
        return answer

    async def _send(
        self,
        request: web.Request,
        attempt: Attempt,
        body: bytes,
        headers: CIMultiDict[str],
        rule: FailoverRule,
        final: bool,
    ) -> Answered | str:
        """Send one attempt, its credential read now: how the cluster answered, or why
        nothing was answered (``no_credential``, ``connect_failed``)."""
        candidate = attempt.candidate
        upstream = self.upstreams.get(candidate.cluster)
        if upstream is None or attempt.blocked is not None:
            return "no_credential"
        secret = None
        if attempt.credential is not None:
            secret = self.credentials.value(attempt.credential.file)
            if secret is None:
                return "no_credential"
            name, value = attempt.credential.inject(secret)
            headers[name] = value
        counter = self.metrics.upstream.get(candidate.cluster)
        if counter is not None:
            counter.inc()
        router = self.router
        started = router.started(candidate)
        try:
            response = await upstream.open().request(
                request.method,
                # Already normalised and encoded (`routable_target`): sent as it is.
                URL(upstream.next_base() + attempt.target, encoded=True),
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
        if rule.on_status(response.status, final):
            response.release()
            router.ended(candidate)
            return Answered(None, response.status, "failover_status")
        return Answered(response, response.status, "ok", secret)

    async def _relay(
        self,
        request: web.Request,
        response: aiohttp.ClientResponse,
        metered: Metered,
        strip: bool,
        masker: Masker,
    ) -> web.StreamResponse:
        headers = masker.headers(response.headers, not_relayed(response.headers))
        length = response.content_length
        streaming = response.headers.get("Content-Type", "").startswith("text/event-stream")
        requests = self.metrics.requests
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        try:
            if streaming and encoding not in ("", "identity"):
                return self.refuse(ENCODED_STREAM)
            if response.status >= 400:  # an error body may echo the credential
                try:
                    answer = await error_answer(
                        response, headers, masker, self.settings.error_body_max_bytes
                    )
                except (aiohttp.ClientError, TimeoutError):
                    return self.refuse(BROKE_OFF)
                requests["routed"].inc()
                return answer
            if not streaming and length is not None and length <= self.settings.buffer_max_bytes:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError):
                    return self.refuse(BROKE_OFF)
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
        headers: CIMultiDict[str],
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
