"""The fault campaign: faults one after another on a `FaultMesh`, invariants after each.

Each fault is injected, detected (the first moment the mesh shows it, or None
when nothing outside shows it), held, healed, and then the campaign waits for
the invariants, each within its bound:

- ``membership``: every operator sees every other site alive again;
- ``overlays``: every overlay change made so far (one new InferenceProvider per
  fault, some made at the faulted site while it was cut off) is listed by
  every site's overlay: none was lost;
- ``budgets``: every site's ``budgetStatus`` for the tenant equals, to the
  cent, what the client was answered 200 for (summed per gateway, each site's
  slot floored): no cent lost or doubled; ``no_double_charge`` records that no
  site ever showed more than that, at any observation;
- ``feedback``: the report each site last acknowledged to the campaign's own
  reporter is persisted in that site's store.

Traffic (the tenant's chat requests, round-robin over the gateways) runs only
while a fault is on; the checks run on a quiet mesh, so their truth is exact.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import aiohttp

from grid.adapters.tls_probe import client_context
from grid.demo import plan as p
from grid.gateway.feedback import Delivery, FeedbackReporter, HttpIngestTransport
from grid.testing.fault_mesh import PRICE_IN, PRICE_OUT, FaultMesh, exact_cents
from grid.testing.poll import eventually

TENANT = "globex"
PROMPT = "context " * 4000


@dataclass(frozen=True)
class Timing:
    """How long faults last; the short form (`make test`) and the long form (bench)."""

    hold_s: float = 1.0
    """How long a detected fault stays on before it is healed."""
    loss_window_s: float = 3.0
    store_window_s: float = 4.0
    skew_window_s: float = 2.0
    membership_bound_s: float = 45.0
    """A healed partition rejoins by push-pull (every 30 s) at the latest."""
    settle_bound_s: float = 30.0
    """Overlays and feedback after membership converged."""
    budget_bound_s: float = 10.0
    """Every site's spend after membership converged. The spend slot rides in the state
    lane, which outgrows a datagram once the faults have added providers; it spreads by
    prompt push-pull rounds (`grid.core.swim.oversize`), one per second at most.
    Measured: at most 0.7 s in the short campaign (before those rounds, 13-45 s)."""


SHORT = Timing()
LONG = Timing(hold_s=10.0, loss_window_s=20.0, store_window_s=30.0, skew_window_s=15.0)


@dataclass
class FaultResult:
    """One row of the campaign's table."""

    fault: str
    detect_s: float | None
    converge_s: float | None
    invariants: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    waited_s: dict[str, float] = field(default_factory=dict)
    """How long each invariant took to hold, in check order."""

    @property
    def held(self) -> bool:
        """Whether every invariant held after this fault."""
        return bool(self.invariants) and all(self.invariants.values())


class Campaign:
    """Runs the faults on a started `FaultMesh` and keeps the truth to check against."""

    def __init__(self, fm: FaultMesh, http: aiohttp.ClientSession, timing: Timing = SHORT) -> None:
        self.fm = fm
        self.http = http
        self.timing = timing
        self.rng = random.Random(fm.seed)
        self.sites = fm.sites
        self.answered = {s: Decimal(0) for s in self.sites}
        """Exact cents of what each gateway answered 200."""
        self.unsure = {s: Decimal(0) for s in self.sites}
        """Exact cents of the requests that ended without an answer (a client timeout or
        a reset): the gateway may have served and charged them, or not."""
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.max_seen = 0
        self.last_cost = Decimal(1)
        """One answer's cost (every answer has the same prompt), for unanswered requests."""
        self.changes: list[tuple[str, str]] = []
        self.acked: dict[str, int] = {}
        self.reporters: dict[str, FeedbackReporter] = {}
        self._transports: list[HttpIngestTransport] = []
        self.results: list[FaultResult] = []

    # -- bookkeeping ---------------------------------------------------------------

    async def open(self) -> None:
        """Reporters for every site, and the mesh at rest with full membership."""
        pki = self.fm.mesh.pki
        assert pki is not None
        for site in self.sites:
            certs = pki.sites[site]
            address = f"127.0.0.1:{self.fm.mesh.plan.sites[site].signals_port}"
            transport = HttpIngestTransport(
                address, client_context(pki.ca, certs.cert, certs.key), 5.0
            )
            self._transports.append(transport)
            self.reporters[site] = FeedbackReporter(
                transport, reporter_id=f"faults-{site}", replica="campaign", epoch=1,
                rng=random.Random(self.rng.random()),
            )  # fmt: skip
        await self._converged()

    async def close(self) -> None:
        """Close the reporters' connections."""
        for transport in self._transports:
            await transport.close()

    def expected_cents(self) -> int:
        """Every site's slot of what was answered 200, floored, summed."""
        return sum(_floor(c) for c in self.answered.values())

    def ceiling_cents(self) -> int:
        """The most the sites may show: answered 200, plus every request left unanswered."""
        return sum(_floor(self.answered[s] + self.unsure[s]) for s in self.sites)

    async def _request(self, site: str, timeout_s: float = 5.0) -> int | None:
        address = self.fm.mesh.gateway_address(site)
        body = {"model": p.MODEL, "messages": [{"role": "user", "content": PROMPT}]}
        try:
            async with self.http.post(
                f"http://{address}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {self.fm.mesh.api_keys[TENANT]}"},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                if resp.status != 200:
                    self.outcomes[str(resp.status)] += 1
                    return resp.status
                usage = (await resp.json())["usage"]
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError) as exc:
            self.outcomes[type(exc).__name__] += 1
            self.unsure[site] += self.last_cost
            return None
        except asyncio.CancelledError:  # the traffic stopped mid-request
            self.outcomes["cancelled"] += 1
            self.unsure[site] += self.last_cost
            raise
        self.outcomes["200"] += 1
        self.last_cost = exact_cents(usage["prompt_tokens"], usage["completion_tokens"])
        self.answered[site] += self.last_cost
        return 200

    @contextlib.asynccontextmanager
    async def traffic(self) -> AsyncIterator[None]:
        """The tenant's requests, round-robin over the gateways, for the block."""

        async def loop() -> None:
            for site in itertools.cycle(self.sites):
                await self._request(site)
                await asyncio.sleep(0.05)

        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def change(self, site: str) -> None:
        """One overlay change: a new provider at ``site`` (served by its first mock)."""
        name = f"fault-{len(self.changes)}-{site}"
        mock = self.fm.mesh.plan.sites[site].providers[0]
        doc = p.provider_doc(p.ProviderPlan(name, site, mock.port, "steady"), interval="1s")
        doc["spec"]["cost"] = {
            "perMillionInputTokens": float(PRICE_IN),
            "perMillionOutputTokens": float(PRICE_OUT),
        }
        await self.fm.create(site, doc)
        self.changes.append((site, name))

    async def report(self, site: str) -> Delivery:
        """One feedback report from the campaign's reporter at ``site``."""
        reporter = self.reporters[site]
        if reporter.pending is None:
            reporter.record(accepted=True)
        delivery = await reporter.send_once()
        if delivery is Delivery.ACKED and reporter.acknowledged is not None:
            self.acked[site] = reporter.acknowledged.sequence
        return delivery

    # -- probes -----------------------------------------------------------------------

    async def _full(self) -> bool:
        alive = await self.fm.alive(self.http)
        return all(v == len(self.sites) - 1 for v in alive.values())

    async def _converged(self, bound_s: float | None = None) -> float:
        start = time.monotonic()
        await eventually(
            self._full, "membership converged", timeout_s=bound_s or self.timing.membership_bound_s,  # type: ignore[arg-type]
            interval_s=0.1,
        )  # fmt: skip
        return time.monotonic() - start

    def _overlays_complete(self) -> bool | list[str]:
        missing = []
        for site in self.sites:
            listed = _listed(self.fm.mesh.plan.sites[site].overlay_dir / "grid-overlay.json")
            missing += [f"{site} lacks {c}" for c in self.changes if c not in listed]
        return missing or True

    async def _spend(self) -> dict[str, int | None]:
        seen: dict[str, int | None] = {}
        for site in self.sites:
            try:
                items = (await self.fm.network_status(site)).get("budgetStatus") or []
            except Exception:  # a store being written or locked reads on a later poll
                seen[site] = None
                continue
            item = next((i for i in items if i.get("tenantId") == TENANT), None)
            seen[site] = None if item is None else round(Decimal(repr(item["spendUsd"])) * 100)
            self.max_seen = max(self.max_seen, seen[site] or 0)
        return seen

    async def _feedback_kept(self) -> bool | dict[str, Any]:
        lost = {}
        for site, sequence in self.acked.items():
            status = await self.fm.network_status(site)
            reporters = (status.get("gatewayFeedback") or {}).get("reporters") or []
            mine = [r for r in reporters if f"faults-{site}" in r.values()]
            if not mine or int(mine[0]["sequence"]) < sequence:
                lost[site] = {"acked": sequence, "persisted": mine}
        return lost or True

    # -- invariants ---------------------------------------------------------------------

    async def check(self, result: FaultResult, healed_at: float) -> None:
        """Wait for each invariant within its bound; record what held and when."""
        bound = self.timing.settle_bound_s
        checks: list[tuple[str, Callable[[], Awaitable[Any]], float]] = [
            ("membership", self._full, self.timing.membership_bound_s),
            ("overlays", _awaitable(self._overlays_complete), bound),
            ("budgets", self._budgets_agree, self.timing.budget_bound_s),
        ]
        for site in self.sites:
            with contextlib.suppress(Exception):
                await eventually(lambda s=site: self._acked_now(s), "feedback acked", timeout_s=10)  # type: ignore[arg-type]
        checks.append(("feedback", self._feedback_kept, bound))
        for name, check, timeout in checks:
            began = time.monotonic()
            try:
                await eventually(check, name, timeout_s=timeout, interval_s=0.2)
                result.invariants[name] = True
                result.waited_s[name] = round(time.monotonic() - began, 2)
            except AssertionError as exc:
                result.invariants[name] = False
                result.notes.append(str(exc)[:300])
        ceiling = self.ceiling_cents()
        result.invariants["no_double_charge"] = self.max_seen <= ceiling
        if not result.invariants["no_double_charge"]:
            result.notes.append(f"max seen {self.max_seen} > {ceiling} cents")
        if not result.invariants["budgets"]:
            result.notes.append(
                f"spend {await self._spend()}; answered 200 {self.expected_cents()} cents, "
                f"at most {ceiling}; outcomes {dict(self.outcomes)}"
            )
        if result.held:
            result.converge_s = round(time.monotonic() - healed_at, 2)

    async def _acked_now(self, site: str) -> bool:
        return await self.report(site) is Delivery.ACKED

    async def _budgets_agree(self) -> bool:
        """Every site shows the same spend, no less than answered, no more than possible.

        Early in a campaign on a slow machine every site's slot may still floor to 0
        cents; the campaign's caller checks that the spend reached a cent by its end,
        so these checks are not all vacuous."""
        low, high = self.expected_cents(), self.ceiling_cents()
        seen = set((await self._spend()).values())
        if len(seen) != 1:
            return False
        (value,) = seen
        if value is None:
            return low == 0 and high == 0  # nothing spent yet: no status item either
        return low <= value <= high


def _floor(cents: Decimal) -> int:
    return int(cents.to_integral_value(rounding=ROUND_FLOOR))


def _awaitable(check: Callable[[], Any]) -> Callable[[], Awaitable[Any]]:
    async def wrapped() -> Any:
        return check()

    return wrapped


def _listed(path: Any) -> set[tuple[str, str]]:
    import json

    try:
        envelope = json.loads(path.read_text())
    except (OSError, ValueError):
        return set()
    candidates = (envelope.get("overlay") or {}).get("candidates") or []
    return {(c.get("site"), c.get("cluster")) for c in candidates}
