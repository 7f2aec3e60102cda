"""Benchmark: an MCP ``tools/call`` through ``grid gateway`` against the same call direct.

One MCP server (the ``mcp`` SDK's, `grid.demo.agent_servers.demo_tools`) and one
``grid gateway`` run in their own processes on loopback; the gateway's praxis.yaml
routes the ``calculator`` tool (an ``mcp_tool`` candidate) to that server. Two
clients built with the official SDK, one talking to the server, one to the
gateway's ``/mcp``, each call ``calculator`` one call after another; rounds
alternate between them so a shared machine's drift hits both. The last line is
one JSON object: each path's p50 and p99 per call in ms and calls per second,
``added_p50_ms`` and ``p50_ratio`` (gateway over direct, medians over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from grid.core.overlay.ids import stable_id
from grid.demo.ports import free_port
from grid.testing.gateway import Upstream, overlay, render_praxis, spawn_gateway
from grid.testing.poll import eventually


def _candidate() -> dict[str, Any]:
    return {
        "kind": "mcp_tool",
        "name": "calculator",
        "site": "east",
        "cluster": "tools-east",
        "fresh": True,
        "stable_id": stable_id("mcp_tool", "calculator", "east", "tools-east"),
        "admission_state": "new_and_existing",
        "selection_tier": "same_site",
        "rank": 0,
    }


async def _listening(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return resp.status < 500
    except aiohttp.ClientError:
        return False


async def _round(client: Any, calls: int) -> list[float]:
    took = []
    for i in range(calls):
        started = time.perf_counter()
        answer = await client.call_tool("calculator", {"expression": f"{i}+1"})
        took.append(time.perf_counter() - started)
        assert not answer.is_error, answer
    return took


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        "calls_per_s": len(ordered) / sum(ordered),
    }


async def run(rounds: int, calls: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    argv = ["-m", "grid.demo.agent_servers", "--site", "east", "--port", str(port)]
    server = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            direct = f"http://127.0.0.1:{port}/mcp"
            await eventually(lambda: _listening(direct), "the MCP server", timeout_s=30)
            upstream = Upstream("tools-east")
            upstream.port = port
            rendered, public, admin = render_praxis(overlay(_candidate()), [upstream], Path(tmp))
            config = Path(tmp) / "praxis.yaml"
            config.write_text(rendered.text)
            gateway = await spawn_gateway(config, public, admin)
            try:
                return await _measure(Client, streamable_http_client, direct, public, rounds, calls)
            finally:
                await gateway.stop()
        finally:
            server.terminate()
            server.wait(10)


async def _measure(
    client_type: Any, transport: Any, direct: str, public: str, rounds: int, calls: int
) -> dict[str, Any]:
    paths = {"direct": direct, "gateway": f"http://{public}/mcp"}
    samples: dict[str, list[float]] = {name: [] for name in paths}
    p50s: dict[str, list[float]] = {name: [] for name in paths}
    async with (
        client_type(transport(paths["direct"]), cache=None) as straight,
        client_type(transport(paths["gateway"]), cache=None) as through,
    ):
        clients = {"direct": straight, "gateway": through}
        for name in paths:
            await _round(clients[name], max(1, calls // 10))  # warm up
        for _ in range(rounds):
            for name in paths:
                took = await _round(clients[name], calls)
                samples[name] += took
                p50s[name].append(statistics.median(took))
    added = [g - d for g, d in zip(p50s["gateway"], p50s["direct"], strict=True)]
    ratios = [g / d for g, d in zip(p50s["gateway"], p50s["direct"], strict=True)]
    return {
        "direct": _summary(samples["direct"]),
        "gateway": _summary(samples["gateway"]),
        "added_p50_ms": statistics.median(added) * 1e3,
        "p50_ratio": statistics.median(ratios),
        "rounds": rounds,
        "calls_per_round": calls,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print a table line per path and the JSON line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (< 30 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    calls = args.calls or (100 if args.quick else 300)
    result = asyncio.run(run(rounds, calls))
    for name in ("direct", "gateway"):
        row = result[name]
        print(
            f"{name:8} p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms  "
            f"{row['calls_per_s']:.0f} calls/s"
        )
    print(json.dumps(result, sort_keys=True))
    return result


if __name__ == "__main__":
    main()
