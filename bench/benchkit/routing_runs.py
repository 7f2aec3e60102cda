"""The routing bench's load: one seeded trace replayed open loop through each strategy.

* `replay_http`: each arrival is sent at its time to its gateway's public
  listener (a Grid mode), or by `Oracle` straight to the provider with the
  shortest true queue. Latency is taken from the scheduled arrival, so a late
  send counts against the strategy, never hidden.
* `LiteLLMWorkers`: one ``benchkit/litellm_worker.py`` process per gateway in
  LiteLLM's virtualenv, each with its own Router, each replaying its gateway's
  share of the same trace from one shared start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from .procs import LITELLM_PYTHON, spawn
from .routing_model import Arrival, Degrade, ProviderSpec, oracle_pick

BODY = {"messages": [{"role": "user", "content": "route this request"}]}
REQUEST_TIMEOUT_S = 60.0
START_LEAD_S = 0.5
"""How far ahead of its first arrival a run's start is fixed (workers get the command)."""
WORKER_READY_S = 120.0

Send = Callable[[aiohttp.ClientSession, Arrival], Awaitable[bool]]


async def replay_http(
    session: aiohttp.ClientSession, trace: Sequence[Arrival], send: Send, start: float
) -> tuple[list[float | None], float]:
    """Send every arrival at ``start`` (perf_counter) plus its offset; (latencies, elapsed)."""

    async def one(arrival: Arrival, due: float) -> float | None:
        try:
            ok = await send(session, arrival)
        except (aiohttp.ClientError, TimeoutError):
            return None
        return time.perf_counter() - due if ok else None

    tasks = []
    for arrival in trace:
        due = start + arrival.at_s
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(arrival, due)))
    latencies = list(await asyncio.gather(*tasks))
    first = trace[0].at_s if trace else 0.0
    return latencies, time.perf_counter() - (start + first)


def gateway_sender(model: str, gateways: Sequence[str], key: str) -> Send:
    """Each arrival to its gateway's chat completions URL, presenting client key ``key``."""
    body = {**BODY, "model": model}
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {key}"}

    async def send(session: aiohttp.ClientSession, arrival: Arrival) -> bool:
        url = gateways[arrival.gateway]
        async with session.post(url, json=body, headers=headers, timeout=timeout) as r:
            await r.read()
            return r.status == 200

    return send


class Oracle:
    """Joins the queue a request is answered soonest at, knowing every provider's true queue.

    It is the only sender during its run, so its own outstanding requests per
    provider are the providers' true queues; it knows each service time,
    the scheduled degradation included.
    """

    def __init__(
        self,
        model: str,
        providers: Sequence[str],
        specs: Sequence[ProviderSpec],
        degrade: Degrade | None,
    ) -> None:
        self.body = {**BODY, "model": model}
        self.urls = [f"{base}/v1/chat/completions" for base in providers]
        self.capacities = [s.capacity for s in specs]
        self.service = [s.service_s for s in specs]
        self.degrade = degrade
        self.outstanding = [0] * len(specs)
        self.start = 0.0

    def services_now(self) -> list[float]:
        service = list(self.service)
        d = self.degrade
        if d is not None and time.perf_counter() - self.start >= d.at_s:
            service[d.index] *= d.factor
        return service

    async def send(self, session: aiohttp.ClientSession, _arrival: Arrival) -> bool:
        at = oracle_pick(self.outstanding, self.capacities, self.services_now())
        self.outstanding[at] += 1
        try:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with session.post(self.urls[at], json=self.body, timeout=timeout) as r:
                await r.read()
                return r.status == 200
        finally:
            self.outstanding[at] -= 1


class LiteLLMWorkers:
    """One LiteLLM Router process per gateway, spoken to over stdin and stdout."""

    def __init__(self, count: int, logs: Path) -> None:
        script = Path(__file__).with_name("litellm_worker.py")
        self.children: list[subprocess.Popen[bytes]] = [
            spawn(
                [str(LITELLM_PYTHON), "-P", str(script)],
                logs / f"litellm-worker-{i}.log",
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for i in range(count)
        ]
        self.failures: dict[str, int] = {}
        """The last run's failed requests by exception class."""

    @staticmethod
    def available() -> bool:
        return LITELLM_PYTHON.exists()

    async def _line(self, child: subprocess.Popen[bytes], prefix: bytes, timeout: float) -> bytes:
        assert child.stdout is not None
        stdout = child.stdout
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while True:
                line = await loop.run_in_executor(None, stdout.readline)
                if not line:
                    raise RuntimeError(f"a LiteLLM worker exited ({child.poll()})")
                if line.startswith(prefix):
                    return line[len(prefix) :]

    async def ready(self) -> None:
        await asyncio.gather(*(self._line(c, b"READY", WORKER_READY_S) for c in self.children))

    async def run(
        self,
        strategy: str,
        model: str,
        deployments: list[dict[str, Any]],
        trace: Sequence[Arrival],
        gateways: int,
        start_at: float,
    ) -> tuple[list[float | None], float]:
        """Each of the first ``gateways`` workers replays its share from ``start_at`` (epoch
        seconds); (latencies, elapsed)."""
        for g, child in enumerate(self.children[:gateways]):
            command = {
                "strategy": strategy,
                "model": model,
                "deployments": deployments,
                "arrivals": [a.at_s for a in trace if a.gateway == g],
                "start_at": start_at,
                "timeout_s": REQUEST_TIMEOUT_S,
            }
            assert child.stdin is not None
            child.stdin.write(json.dumps(command).encode() + b"\n")
            child.stdin.flush()
        wait = start_at - time.time() + (trace[-1].at_s if trace else 0) + 2 * REQUEST_TIMEOUT_S
        answers = await asyncio.gather(
            *(self._line(c, b"RESULT ", wait) for c in self.children[:gateways])
        )
        latencies: list[float | None] = []
        ended = start_at
        self.failures = {}
        for answer in answers:
            result = json.loads(answer)
            latencies += result["latencies"]
            for kind, count in result.get("failures", {}).items():
                self.failures[kind] = self.failures.get(kind, 0) + count
            ended = max(ended, float(result["ended_at"]))
        first = trace[0].at_s if trace else 0.0
        return latencies, ended - (start_at + first)

    def stop(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                with contextlib.suppress(OSError):
                    child.stdin.close()
        for child in self.children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
