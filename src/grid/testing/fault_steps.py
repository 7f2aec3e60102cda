"""The campaign's faults, one function each, run in order by `run_faults`.

Every step injects its fault with traffic on, measures the time to detect it
(None when nothing outside the process shows it), holds it, heals it, and
hands the result to `Campaign.check` for the invariants.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

import aiohttp

from grid.testing.fault_campaign import Campaign, FaultResult
from grid.testing.poll import eventually


async def _detect(check: Callable[[], Awaitable[bool]], within_s: float) -> float | None:
    """Seconds until ``check`` holds, or None when it did not within ``within_s``."""
    start = time.monotonic()
    try:
        await eventually(check, "detected", timeout_s=within_s, interval_s=0.1)  # type: ignore[arg-type]
    except AssertionError:
        return None
    return round(time.monotonic() - start, 2)


async def partition(c: Campaign) -> FaultResult:
    """One site cut from the other two, then healed."""
    isolated = c.sites[1]
    n = len(c.sites)

    async def cut() -> bool:
        alive = await c.fm.alive(c.http)
        return all(v == (0 if s == isolated else n - 2) for s, v in alive.items())

    async with c.traffic():
        c.fm.partition(isolated)
        detect = await _detect(cut, c.timing.membership_bound_s)
        await c.change(isolated)  # made on the cut-off side
        await c.change(c.sites[0])  # and on the majority side
        await asyncio.sleep(c.timing.hold_s)  # the fault's duration, not a wait for a state
    c.fm.heal()
    result = FaultResult(f"partition {isolated} from the rest", detect, None)
    await c.check(result, time.monotonic())
    return result


async def loss(c: Campaign, rate: float) -> FaultResult:
    """Every datagram between sites dropped with probability ``rate`` for a window."""
    flapped = None
    async with c.traffic():
        c.fm.core.set_loss(rate)
        await c.change(c.sites[2])
        flapped = await _detect(_not(c._full), c.timing.loss_window_s)
    c.fm.core.set_loss(0.0)
    result = FaultResult(f"packet loss {rate:.0%}", flapped, None)
    if flapped is None:
        result.notes.append(f"no member flapped in {c.timing.loss_window_s:g} s")
    await c.check(result, time.monotonic())
    return result


async def kill_operator(c: Campaign) -> FaultResult:
    """SIGKILL an operator right after an overlay change reached its store (mid-render)."""
    site = c.sites[0]
    async with c.traffic():
        await c.change(site)
        c.fm.mesh.kill_operator(site)
        await c.fm.mesh.wait_exit(f"operator-{site}")
        detect = await _detect(_not(c._full), c.timing.membership_bound_s)
        await c.fm.mesh.start_operator(site)
    result = FaultResult(f"SIGKILL operator {site} mid-render", detect, None)
    await c.check(result, time.monotonic())
    return result


async def kill_gateway(c: Campaign) -> FaultResult:
    """SIGKILL a gateway while its requests wait on stopped providers (mid-request)."""
    site = c.sites[2]
    with c.fm.providers_stopped():
        pending = [asyncio.create_task(c._request(site, timeout_s=30)) for _ in range(3)]
        try:
            await eventually(lambda: _in_flight(c, site), "requests in flight", timeout_s=10)  # type: ignore[arg-type]
        except AssertionError:
            done = [t.result() for t in pending if t.done()]
            raise AssertionError(
                f"no request in flight at {site}'s gateway; ended: {done}"
            ) from None
        start = time.monotonic()
        c.fm.kill_gateway(site)
        outcomes = await asyncio.gather(*pending)
        detect = round(time.monotonic() - start, 2)
    await c.fm.mesh.start_gateway(site)
    await eventually(lambda: _gateway_ready(c, site), "gateway back", timeout_s=30)  # type: ignore[arg-type]
    result = FaultResult(f"SIGKILL gateway {site} mid-request", detect, None)
    result.notes.append(f"in-flight outcomes {outcomes}")
    result.invariants["unanswered_not_charged"] = 200 not in outcomes
    async with c.traffic():
        await c.change(site)
    await c.check(result, time.monotonic())
    return result


async def store_fails(c: Campaign) -> FaultResult:
    """A site's store refuses every write for a window (held under an exclusive lock)."""
    site = c.sites[1]
    op = c.fm.mesh.children[f"operator-{site}"]
    restarts = op.restarts
    before = await _write_trouble(c, site)

    async def seen() -> bool:
        trouble = await _write_trouble(c, site)
        return await _not_ready(c, site, restarts) or (trouble or 0.0) > (before or 0.0)

    async with c.traffic():
        await c.fm.lock_store(site)
        try:
            start = time.monotonic()
            await c.change(c.sites[0])
            detect = await _detect(seen, c.timing.store_window_s)
            remaining = c.timing.store_window_s - (time.monotonic() - start)
            await asyncio.sleep(max(0.0, remaining))  # the fault's duration
        finally:
            c.fm.unlock_store(site)
    result = FaultResult(f"store of {site} fails {c.timing.store_window_s:g} s", detect, None)
    if op.restarts > restarts:
        result.notes.append(f"operator {site} exited {op.restarts - restarts}x and was restarted")
    if detect is None:
        result.notes.append(
            "no outside sign of the failing store (readyz stayed 200, no write or round "
            "failure counted)"
        )
    await c.check(result, time.monotonic())
    return result


async def clock_skew(c: Campaign, offset_s: int) -> FaultResult:
    """One site's operator runs with its wall clock ``offset_s`` off, then is put right."""
    site = c.sites[2]
    await c.fm.restart_operator(site, clock_offset_s=offset_s)
    await c._converged()
    async with c.traffic():
        await c.change(site)
        flapped = await _detect(_not(c._full), c.timing.skew_window_s)
    result = FaultResult(f"clock skew {offset_s:+d} s on {site}", flapped, None)
    await c.check(result, time.monotonic())
    return result


def _not(check: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
    async def negated() -> bool:
        return not await check()

    return negated


async def _in_flight(c: Campaign, site: str) -> bool:
    return await c.fm.in_flight(c.http, site) >= 1


async def _gateway_ready(c: Campaign, site: str) -> bool:
    port = c.fm.mesh.plan.sites[site].gateway_admin_port
    try:
        async with c.http.get(f"http://127.0.0.1:{port}/ready") as resp:
            return resp.status == 200
    except (aiohttp.ClientError, OSError):
        return False


TROUBLE = re.compile(
    r"^grid_operator_(?:write_retries|write_failures|round_failures)_total\{[^}]*\} ([0-9.e+]+)$",
    re.M,
)
"""The operator's counters of store writes tried again or given up, and failed rounds."""


async def _write_trouble(c: Campaign, site: str) -> float | None:
    """The sum of the operator's write and round failure counters (None: unreachable)."""
    port = c.fm.mesh.plan.sites[site].metrics_port
    try:
        async with c.http.get(
            f"http://127.0.0.1:{port}/metrics", timeout=aiohttp.ClientTimeout(total=1)
        ) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    return sum(float(v) for v in TROUBLE.findall(text))


async def _not_ready(c: Campaign, site: str, restarts: int) -> bool:
    if c.fm.mesh.children[f"operator-{site}"].restarts > restarts:
        return True
    port = c.fm.mesh.plan.sites[site].metrics_port
    try:
        async with c.http.get(
            f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=1)
        ) as resp:
            return resp.status != 200
    except (aiohttp.ClientError, OSError, TimeoutError):
        return True


async def run_faults(
    c: Campaign, progress: Callable[[FaultResult], None] = lambda _: None
) -> list[FaultResult]:
    """Every fault in order; each result is appended to ``c.results`` as it completes."""
    steps: list[tuple[str, Callable[[], Awaitable[FaultResult]]]] = [
        ("partition", lambda: partition(c)),
        ("packet loss 20%", lambda: loss(c, 0.2)),
        ("packet loss 50%", lambda: loss(c, 0.5)),
        ("SIGKILL operator", lambda: kill_operator(c)),
        ("SIGKILL gateway", lambda: kill_gateway(c)),
        ("store fails", lambda: store_fails(c)),
        ("clock skew +30 s", lambda: clock_skew(c, 30)),
        ("clock skew -30 s", lambda: clock_skew(c, -30)),
    ]
    for name, step in steps:
        try:
            result = await step()
        except AssertionError as exc:  # a step that could not finish is a failed row
            result = FaultResult(name, None, None, {"completed": False}, [str(exc)[:300]])
        c.results.append(result)
        progress(result)
    return c.results
