"""The agent controller: discovery, health and phases of AgentToolProviders and
AgentToAgentProviders (SPEC-DECISIONS §16).

For every agent resource this site hosts, one task discovers it on its own
``healthCheck.interval`` and ``timeout`` (`grid.operator.schedule.run_every`, with
jitter): MCP ``tools/list`` for a tool provider, the well-known agent card for an
agent (`grid.adapters.agent_discovery`). A discovery that succeeds is a passing
health check; one that fails, or is refused for its size or shape, is a failing
one. The phase moves along InferenceProvider's table with the same decision
(`grid.core.resources.lifecycle.next_provider_phase`), and status is written only
when the phase, reason, message or discovered tools/card changed.

A provider is offered to the grid (`offers`) while it is Available or Degraded and
its credential resolves: one failed discovery degrades it without dropping it; a
second makes it Unavailable, and its tools leave the ``tools`` OR-Set until a
discovery passes again. The credential comes from ``auth.secretRef`` as a
provider's would be injected (``bearer_token``: ``Authorization: Bearer``;
``api_key``: ``x-api-key``); its bytes go only into that request's header.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from grid.adapters.agent_discovery import (
    DiscoveryError,
    McpSession,
    read_agent_card,
)
from grid.adapters.probe_sessions import PROBE_KEEPALIVE_S, probe_session
from grid.adapters.provider_tls import provider_ssl_context, secret_bytes
from grid.adapters.store.objects import merge_patch
from grid.adapters.store.port import ResourceStore
from grid.core.crdt.offer import AgentOffer, OfferKind
from grid.core.resources import AgentProvider, AgentToolProvider
from grid.core.resources.agent_spec import AgentCardSpec, ToolSpec
from grid.core.resources.duration import parse_duration
from grid.core.resources.lifecycle import ProviderObservation, next_provider_phase
from grid.core.resources.phases import ProviderPhase
from grid.errors import GridError
from grid.operator.schedule import Job, run_every

log = logging.getLogger(__name__)

STOP_TRIES = 10
"""Seconds `AgentController.stop` waits for its loops, cancelling stragglers again."""


def _raise_if_stopping() -> None:
    """Raise `CancelledError` when this task is being cancelled: an error caught while
    stopping (a library's timeout or reset standing in for the cancellation) must not
    keep the check's loop going."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


# The SDK logs a refused answer with its bytes; outside bytes never reach Grid's logs.
logging.getLogger("mcp").setLevel(logging.CRITICAL)

OFFERED_PHASES = frozenset({ProviderPhase.AVAILABLE, ProviderPhase.DEGRADED})
"""Phases in which a provider's tools or agent are offered to the grid."""

Found = list[ToolSpec] | AgentCardSpec
Discover = Callable[[AgentProvider, Mapping[str, str], ssl.SSLContext | None], Awaitable[Found]]
"""Discovers one provider (raises `DiscoveryError`; the caller bounds the time)."""


@dataclass
class AgentState:
    """What the controller remembers about one agent resource between discoveries."""

    provider: AgentProvider
    failures: int = 0
    found: Found | None = None
    """What the last successful discovery found."""
    reason: str = "Pending"
    message: str | None = None
    credential_ok: bool = True
    tls: ssl.SSLContext | None = None
    session: aiohttp.ClientSession | None = field(default=None, repr=False)
    """The kept-alive session of the agent card reads, opened by the first one."""
    mcp: McpSession | None = field(default=None, repr=False)
    """The kept MCP session of the tool discoveries, opened by the first one."""
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def close(self) -> None:
        """Close the kept connections (the provider is gone, or its spec changed)."""
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self.mcp is not None:
            await self.mcp.close()
            self.mcp = None


class AgentController:
    """Runs one discovery loop per hosted agent resource and reports what it offers."""

    def __init__(
        self,
        store: ResourceStore,
        on_change: Callable[[], None],
        *,
        discover: Discover | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._discover = discover or self._http_discover
        self._rng = rng or random.Random()
        self._states: dict[tuple[str, str], AgentState] = {}

    def sync(self, providers: list[AgentProvider]) -> None:
        """One loop per provider, on its latest spec; stopped providers stop offering."""
        wanted = {(p.kind, p.name): p for p in providers}
        changed = False
        for key in list(self._states):
            if key not in wanted:
                self._stop(key)
                changed = True
        for key, provider in wanted.items():
            state = self._states.get(key)
            if state is not None and state.provider.spec == provider.spec:
                continue
            if state is not None:
                self._stop(key)
            self._states[key] = AgentState(provider)
            self._states[key].task = asyncio.create_task(self._loop(key), name=f"agent-{key[1]}")
        if changed:
            self._on_change()

    def _stop(self, key: tuple[str, str]) -> None:
        state = self._states.pop(key)
        if state.task is not None:
            state.task.cancel()

    async def stop(self) -> None:
        """Stop every loop (each closes its provider's connections).

        A loop whose cancellation a client library took for an error of its own
        is cancelled again, once a second, for at most `STOP_TRIES` seconds.
        """
        tasks = {s.task for s in self._states.values() if s.task is not None}
        for key in list(self._states):
            self._stop(key)
        for _ in range(STOP_TRIES):
            if not tasks:
                break
            _done, tasks = await asyncio.wait(tasks, timeout=1.0)
            for task in tasks:
                task.cancel()
        if tasks:
            log.warning("agent checks did not stop", extra={"count": len(tasks)})

    def states(self) -> list[AgentState]:
        """Every hosted provider's state, by kind and name."""
        return [self._states[k] for k in sorted(self._states)]

    def offers(self, kind: OfferKind) -> set[AgentOffer]:
        """What this site offers in the ``tools`` or ``agents`` OR-Set now."""
        out: set[AgentOffer] = set()
        for state in self._states.values():
            provider = state.provider
            if (kind == "tools") != isinstance(provider, AgentToolProvider):
                continue
            if state.provider.phase not in OFFERED_PHASES or not state.credential_ok:
                continue
            policy = provider.spec.access_policy
            access = tuple(sorted(policy.site_selector.match_labels.items())) if policy else ()
            if isinstance(provider, AgentToolProvider):
                tools = provider.spec.tools or (
                    state.found if isinstance(state.found, list) else []
                )
                out.update(AgentOffer("tools", provider.name, t.name, access) for t in tools)
            else:
                out.add(AgentOffer("agents", provider.name, provider.name, access))
        return out

    async def _loop(self, key: tuple[str, str]) -> None:
        state = self._states[key]
        check = state.provider.spec.health_check
        job = Job("health", parse_duration(check.interval), parse_duration(check.timeout))
        try:
            await run_every(job, lambda: self._run(key, job.timeout_s), self._rng)
        finally:
            await state.close()

    async def _run(self, key: tuple[str, str], timeout_s: float) -> None:
        state = self._states.get(key)
        if state is None:
            return
        try:
            headers = await self._credential(state)
            ok, reason, message = True, "Discovered", None
            before = state.found
            if state.credential_ok:
                try:
                    async with asyncio.timeout(timeout_s):
                        state.found = await self._discover(state.provider, headers, state.tls)
                except DiscoveryError as exc:
                    ok, reason, message = False, exc.reason, exc.message
                except TimeoutError:
                    _raise_if_stopping()
                    ok, reason, message = False, "Timeout", "discovery did not finish in time"
            else:
                ok, reason, message = False, "SecretUnresolved", "the auth Secret or key is missing"
            state.failures = 0 if ok else state.failures + 1
            await self._judge(state, ok, reason, message, state.found != before)
        except (GridError, OSError) as exc:
            _raise_if_stopping()
            # A failed check or status write (a timeout, a reset): the next run tries again.
            code = exc.code if isinstance(exc, GridError) else type(exc).__name__
            log.warning("agent check failed", extra={"provider": key[1], "code": code})

    async def _credential(self, state: AgentState) -> dict[str, str]:
        """The auth header of this provider, and its TLS context (built once)."""
        spec = state.provider.spec
        if spec.health_check.tls is not None and state.tls is None:
            state.tls = await provider_ssl_context(self._store, spec.health_check.tls)
        auth = spec.auth
        ref = auth.secret_ref if auth is not None and not auth.manual else None
        if auth is None or ref is None or auth.strategy not in ("BearerToken", "ApiKey"):
            return {}
        try:
            value = await secret_bytes(self._store, ref.name, ref.namespace, ref.key or "token")
        except GridError:
            state.credential_ok = False
            return {}
        state.credential_ok = True
        token = value.decode("utf-8", "replace").strip()
        if auth.strategy == "BearerToken":
            return {"Authorization": f"Bearer {token}"}
        return {"x-api-key": token}

    async def _judge(
        self, state: AgentState, ok: bool, reason: str, message: str | None, found_changed: bool
    ) -> None:
        provider = state.provider
        state.reason, state.message = reason, message
        before = provider.phase
        phase = next_provider_phase(before, ProviderObservation(ok, None, state.failures))
        status: dict[str, Any] = {
            "phase": phase.value,
            "reason": reason,
            "message": message,
            "observedGeneration": provider.metadata.generation,
        }
        if ok and isinstance(state.found, list):
            status["tools"] = [t.model_dump(by_alias=True, exclude_none=True) for t in state.found]
        elif ok and isinstance(state.found, AgentCardSpec):
            status["agentCard"] = state.found.model_dump(by_alias=True, exclude_none=True)
        current = (
            provider.status.model_dump(by_alias=True, exclude_none=True) if provider.status else {}
        )
        if any(current.get(k) != v for k, v in status.items()):
            await self._store.patch_status(provider.kind, provider.name, status)
            state.provider = provider.model_validate(
                {
                    **provider.model_dump(by_alias=True, exclude_none=True),
                    "status": merge_patch(current, status),
                }
            )
        if phase is not before or found_changed:
            log.info("agent phase", extra={"provider": provider.name, "to": phase.value})
            self._on_change()

    async def _http_discover(
        self, provider: AgentProvider, headers: Mapping[str, str], tls: ssl.SSLContext | None
    ) -> Found:
        """Discover over the provider's kept session or connections. An MCP session holds
        the credential headers it was opened with, in memory only, and is renewed when
        they change; an agent card read sends them with its request only."""
        state = self._states.get((provider.kind, provider.name))
        if state is None:
            raise DiscoveryError("Unreachable", "the provider is no longer hosted")
        if isinstance(provider, AgentToolProvider):
            if state.mcp is None:
                state.mcp = McpSession(provider.spec.endpoint, tls, keepalive_s=PROBE_KEEPALIVE_S)
            return await state.mcp.list_tools(headers)
        if state.session is None:
            state.session = probe_session()
        return await read_agent_card(state.session, provider.spec.endpoint, headers, tls)
