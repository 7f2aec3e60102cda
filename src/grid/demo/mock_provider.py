"""A mock inference backend: OpenAI-compatible API, vLLM-named Prometheus metrics.

`grid demo` starts one per provider so that the scrape loop, scoring and overlay
have real, moving load to react to; tests use it as a real HTTP backend. It serves
``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health`` and
``GET /metrics``, plus ``GET /stats`` (``{"requests": N, "routed": M}``: completions
received, and those of them that came through a Grid gateway, recognised by its
``x-ai-routing-candidate`` header, so the demo can show traffic follow the ranking),
and ``POST /control/degrade`` (``{"factor": F, "after_s": T}``: service times are
multiplied by F from T seconds on; F = 1 restores them), which bench/routing.py uses
to slow one provider down in the middle of a run.
``"stream": true`` answers with Server-Sent Events chunk by chunk across the
service time, ending with a ``usage`` chunk when ``stream_options.include_usage``
is set, then ``[DONE]``.

Load is real: each completion takes one of ``capacity`` concurrency slots for a
simulated service time, and requests beyond the capacity wait for a slot. The
metrics report that load:

- ``vllm:num_requests_waiting`` / ``vllm:num_requests_running``: requests queued
  for a slot / holding one;
- ``vllm:kv_cache_usage_perc``: a baseline plus the share of busy slots;
- ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``: prompt
  tokens looked up, and those whose prompt prefix was seen recently;
- ``vllm:e2e_request_latency_seconds``: a histogram of observed end-to-end latency
  (queueing included).

Profiles add behaviour on top. ``steady`` adds nothing. ``bursty`` adds a synthetic
load that follows a sine wave of period ``burst_period_s`` (30 s by default): up to
``2 * capacity`` phantom waiting requests and 50 % KV-cache use at the crest, and
service time up to twice as long, so rankings visibly move. ``failing`` answers
``/health`` with 503 always and completions with 503 always, while ``/metrics``
keeps answering, as a backend that is up but broken does.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from grid.adapters.http_listener import HttpListener, ListenerPolicy

PROFILES = ("steady", "bursty", "failing")
LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Bucket bounds of the latency histogram, finer than vLLM's at the low end because
the mock's service times are tens of milliseconds."""
KV_BASELINE = 0.05
"""KV-cache use of an idle server."""
KV_PER_BUSY_SHARE = 0.7
"""KV-cache use added when every slot is busy."""
PREFIX_MEMORY = 256
"""How many recent prompt prefixes count as cached."""
PREFIX_CHARS = 64
"""Characters of the prompt that form its cache key."""
ROUTED_HEADER = "x-ai-routing-candidate"
"""The provider-hop header a Grid gateway adds: its presence marks a routed request."""
BODY_MAX_BYTES = 1024 * 1024
"""Largest accepted request body."""
LISTENER_POLICY = ListenerPolicy(
    header_read_timeout_s=5.0, idle_timeout_s=30.0, connections_max=256
)
"""The mock provider's deadlines and cap, those of any small Grid HTTP server."""
DEGRADE_FACTOR_MAX = 1000.0
"""Largest service-time factor a degradation may set."""
DEGRADE_AFTER_MAX_S = 86400.0
"""Latest start of a degradation, in seconds from when it is set."""


@dataclass(frozen=True)
class MockSettings:
    """How a mock provider behaves; every field has a CLI flag."""

    model: str
    profile: str = "steady"
    capacity: int = 4
    """Concurrency slots; requests beyond this wait (and show as waiting)."""
    service_time_s: float = 0.05
    """Mean simulated service time per completion, jittered by ±20 %."""
    burst_period_s: float = 30.0
    """Period of the bursty profile's synthetic wave."""
    degrade_factor: float = 1.0
    """Service times are multiplied by this from `degrade_after_s` after the start."""
    degrade_after_s: float = 0.0

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}")
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")
        if self.service_time_s < 0 or self.burst_period_s <= 0:
            raise ValueError("service time must be >= 0 and the burst period > 0")
        _check_degrade(self.degrade_factor, self.degrade_after_s)


def _check_degrade(factor: float, after_s: float) -> None:
    if not (0 < factor <= DEGRADE_FACTOR_MAX) or not (0 <= after_s <= DEGRADE_AFTER_MAX_S):
        raise ValueError(
            f"the degrade factor must be in (0, {DEGRADE_FACTOR_MAX:g}] and its start "
            f"in [0, {DEGRADE_AFTER_MAX_S:g}] s"
        )


def _estimate_tokens(text: str) -> int:
    """A rough token count (four characters a token), enough for load accounting."""
    return max(1, len(text) // 4)


class _Metrics:
    """The private Prometheus registry with the vLLM-named metrics."""

    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Requests waiting for a slot.",
            labels,
            registry=self.registry,
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Requests being served.", labels, registry=self.registry
        )
        self.kv_cache = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage, 1 means 100 %.",
            labels,
            registry=self.registry,
        )
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            labels,
            registry=self.registry,
        )
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency.",
            labels,
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.requests = Counter(
            "grid_mock_requests",
            "Chat completion requests received (any outcome).",
            registry=self.registry,
        )
        self.model = model
        # Create every series up front, as vLLM does, so an idle server exports zeros.
        for metric in (
            self.waiting,
            self.running,
            self.kv_cache,
            self.prefix_queries,
            self.prefix_hits,
            self.latency,
        ):
            metric.labels(model)


class MockProvider:
    """The mock backend: its load state, metrics and aiohttp application."""

    def __init__(
        self,
        settings: MockSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._rng = rng or random.Random()
        self._started = clock()
        self._degrade = (settings.degrade_factor, self._started + settings.degrade_after_s)
        self._slots = asyncio.Semaphore(settings.capacity)
        self.waiting = 0
        self.running = 0
        self._prefixes: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.metrics = _Metrics(settings.model)
        self.requests = 0
        """Chat completion requests received so far (any outcome)."""
        self.routed = 0
        """Those of `requests` that a Grid gateway routed here."""
        self._listener: HttpListener | None = None

    # -- load model ------------------------------------------------------------

    def wave(self) -> float:
        """The bursty profile's synthetic load in [0, 1] now (0 for other profiles)."""
        if self.settings.profile != "bursty":
            return 0.0
        phase = 2 * math.pi * (self._clock() - self._started) / self.settings.burst_period_s
        return (1 - math.cos(phase)) / 2

    def degrade(self, factor: float, after_s: float = 0.0) -> None:
        """Multiply service times by ``factor`` from ``after_s`` seconds from now (1 restores)."""
        _check_degrade(factor, after_s)
        self._degrade = (factor, self._clock() + after_s)

    def service_factor(self) -> float:
        """The degradation's factor on service times now (1 before it starts)."""
        factor, since = self._degrade
        return factor if self._clock() >= since else 1.0

    def _service_time(self) -> float:
        jitter = self._rng.uniform(0.8, 1.2)
        return self.settings.service_time_s * jitter * (1 + self.wave()) * self.service_factor()

    def _observe_prompt(self, prompt: str) -> None:
        tokens = _estimate_tokens(prompt)
        key = hashlib.sha256(prompt[:PREFIX_CHARS].encode("utf-8")).hexdigest()
        model = self.settings.model
        self.metrics.prefix_queries.labels(model).inc(tokens)
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            self.metrics.prefix_hits.labels(model).inc(min(tokens, PREFIX_CHARS // 4))
        else:
            self._prefixes[key] = None
            if len(self._prefixes) > PREFIX_MEMORY:
                self._prefixes.popitem(last=False)

    def refresh_gauges(self) -> None:
        """Set the gauges from the current real load plus the profile's synthetic load."""
        model, capacity, wave = self.settings.model, self.settings.capacity, self.wave()
        self.metrics.waiting.labels(model).set(self.waiting + round(2 * capacity * wave))
        self.metrics.running.labels(model).set(self.running)
        busy_share = self.running / capacity
        kv = KV_BASELINE + KV_PER_BUSY_SHARE * busy_share + 0.5 * wave
        self.metrics.kv_cache.labels(model).set(min(1.0, kv))

    async def serve_one(self, prompt: str) -> float:
        """Queue for a slot, hold it for a service time; returns the e2e latency in s."""
        begun = time.monotonic()
        self._observe_prompt(prompt)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            await asyncio.sleep(self._service_time())
        finally:
            self.running -= 1
            self._slots.release()
        elapsed = time.monotonic() - begun
        self.metrics.latency.labels(self.settings.model).observe(elapsed)
        return elapsed

    # -- HTTP --------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application serving the four routes."""
        app = web.Application(client_max_size=BODY_MAX_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/control/degrade", self._control_degrade)
        return app

    async def _control_degrade(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            factor, after_s = float(body["factor"]), float(body.get("after_s", 0.0))
            self.degrade(factor, after_s)
        except (ValueError, TypeError, KeyError) as exc:
            reason = str(exc) if isinstance(exc, ValueError) else "'factor' is required"
            return _error(400, reason, "invalid_request_error")
        return web.json_response({"factor": factor, "after_s": after_s})

    async def _stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests, "routed": self.routed})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if ROUTED_HEADER in request.headers:
            self.routed += 1
        self.metrics.requests.inc()
        if self.settings.profile == "failing":
            return _error(503, "the backend is failing (mock profile 'failing')", "server_error")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON", "invalid_request_error")
        problem = _check_chat_body(body)
        if problem is not None:
            return _error(400, problem, "invalid_request_error")
        if body["model"] != self.settings.model:
            return _error(404, f"the model {body['model']!r} does not exist", "model_not_found")
        prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
        if body.get("stream"):
            return await self._stream(request, prompt, body)
        await self.serve_one(prompt)
        return web.json_response(self._completion(prompt, body))

    async def _stream(
        self, request: web.Request, prompt: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        """An SSE completion: one chunk per word, spread over the service time."""
        completion = self._completion(prompt, body)
        words = completion["choices"][0]["message"]["content"].split(" ")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        base = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": self.settings.model,
        }

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            await out.write(_sse({**base, "choices": [choice]}))

        await send({"role": "assistant", "content": ""})
        pause = self._service_time() / max(1, len(words))
        for i, word in enumerate(words):
            await self._hold(pause)
            await send({"content": word if i == 0 else f" {word}"})
        await send({}, "stop")
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            await out.write(_sse({**base, "choices": [], "usage": completion["usage"]}))
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    async def _hold(self, seconds: float) -> None:
        """Hold a concurrency slot for ``seconds`` (one chunk of a stream)."""
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            self.running -= 1
            self._slots.release()

    def _completion(self, prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        last = str(body["messages"][-1].get("content", ""))
        content = f"[{self.settings.model}] {last[:200]}"
        prompt_tokens, completion_tokens = _estimate_tokens(prompt), _estimate_tokens(content)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.settings.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def _models(self, _request: web.Request) -> web.Response:
        model = {"id": self.settings.model, "object": "model", "created": 0, "owned_by": "grid"}
        return web.json_response({"object": "list", "data": [model]})

    async def _health(self, _request: web.Request) -> web.Response:
        if self.settings.profile == "failing":
            return web.json_response({"status": "failing"}, status=503)
        return web.json_response({"status": "ok"})

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.refresh_gauges()
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on host:port (0 picks a free port); returns the bound address."""
        listener = HttpListener(self.app(), LISTENER_POLICY, error_answer=_malformed)
        bound = await listener.start(host, port)
        self._listener = listener
        return bound

    async def stop(self) -> None:
        """Stop listening and finish."""
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None


def _check_chat_body(body: object) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "'model' is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list"
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return "each message needs a 'role'"
    return None


def _sse(payload: dict[str, Any]) -> bytes:
    """One Server-Sent Event carrying ``payload`` as JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _malformed(status: int, reason: str) -> web.Response:
    """The answer to a request the listener refuses, in OpenAI's error shape."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _error(status, reason, kind)


def _error(status: int, message: str, error_type: str) -> web.Response:
    """An error in OpenAI's shape."""
    payload = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
    return web.json_response(payload, status=status)
