"""`grid gateway --operator ...` as a real process: it ranks by the signals it polls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from grid.cli import main
from grid.testing.gateway import (
    MODEL,
    SCOPE,
    GatewayProcess,
    TlsFiles,
    Upstream,
    candidate,
    envelope,
    overlay,
    render_praxis,
    write_json,
)
from grid.testing.poll import eventually
from grid.testing.signals_operator import SignalsOperator

pytestmark = pytest.mark.e2e

Upstreams = Callable[..., Awaitable[Upstream]]
Gateways = Callable[..., Awaitable[GatewayProcess]]


def _signals(sequence: int, **queues: float) -> dict[str, Any]:
    return {
        "schema_version": "1.0.0",
        "network": SCOPE.network,
        "site": "east",
        "epoch": 3,
        "sequence": sequence,
        "generated_at": "2026-01-01T00:01:00Z",
        "providers": [
            {
                "name": f"p-{cluster}",
                "cluster": cluster,
                "site": "east",
                "backend_kind": "local",
                "models": [MODEL],
                "observed_at": "2026-01-01T00:00:59Z",
                "signals": {"queue_depth": queue, "kv_cache_utilization": queue},
            }
            for cluster, queue in queues.items()
        ],
    }


async def _served_by(http: aiohttp.ClientSession, public: str) -> str:
    async with http.post(
        f"http://{public}/v1/chat/completions", json={"model": MODEL, "messages": []}
    ) as resp:
        assert resp.status == 200
        return str((await resp.json())["served_by"])


async def test_a_poll_mode_gateway_routes_to_the_least_loaded_cluster_of_its_group(
    upstreams: Upstreams, gateways: Gateways, tls_files: TlsFiles, tmp_path: Path
) -> None:
    a, b, c = await upstreams("a"), await upstreams("b"), await upstreams("c")
    operator = SignalsOperator(tls_files.server_context(), _signals(1, a=0.8, b=0.1, c=0.0))
    address = await operator.start()
    try:
        overlay_path = tmp_path / "grid-overlay.json"
        # c is in a farther tier: however idle, it never passes a and b.
        far = candidate("c", selection_tier="same_region")
        write_json(overlay_path, envelope(overlay(candidate("a"), candidate("b"), far)))
        rendered, public, admin = render_praxis(
            overlay(candidate("a"), candidate("b"), far), [a, b, c], tmp_path,
            overlay_file=overlay_path,
        )  # fmt: skip
        path = tmp_path / "praxis.yaml"
        path.write_text(rendered.text)
        d = tls_files.directory
        flags = ("--operator", address, "--cert", str(d / "tls.crt"),
                 "--key", str(d / "tls.key"), "--ca", str(d / "ca.crt"))  # fmt: skip
        await gateways(path, public, admin, *flags)
        async with aiohttp.ClientSession() as http:

            async def served(cluster: str) -> bool:
                return await _served_by(http, public) == cluster

            await eventually(lambda: served("b"), "routed to the idle cluster b")  # type: ignore[arg-type]
            operator.document = _signals(2, a=0.0, b=0.8, c=0.0)
            await eventually(lambda: served("a"), "routed to a once b is busy")  # type: ignore[arg-type]
            async with http.get(f"http://{admin}/snapshot") as resp:
                view = await resp.json()
        assert [c["cluster"] for c in view["candidates"]] == ["a", "b", "c"]
        assert view["signals"]["sequence"] == 2 and view["signals"]["epoch"] == 3
        assert all(operator.client_certs) and set(operator.scopes) == {"grid"}
        assert any(v is not None for v in operator.if_none_match)
        assert b.seen and not c.seen
    finally:
        await operator.stop()


def test_operator_without_the_site_certificate_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "praxis.yaml"
    config.write_text("{}")
    result = CliRunner().invoke(
        main, ["gateway", "--config", str(config), "--operator", "127.0.0.1:1"]
    )
    assert result.exit_code == 2 and "--cert, --key and --ca" in result.output
    result = CliRunner().invoke(main, ["gateway", "--config", str(config), "--cert", str(config)])
    assert result.exit_code == 2 and "add --operator" in result.output


def _with_requests(document: dict[str, Any], **requests: float) -> dict[str, Any]:
    for entry in document["providers"]:
        entry["requests"] = requests[entry["cluster"]]
    return document


async def test_least_loaded_adds_the_queue_other_gateways_put_on_a_provider(
    upstreams: Upstreams, gateways: Gateways, tls_files: TlsFiles, tmp_path: Path
) -> None:
    a, b = await upstreams("a"), await upstreams("b")
    # Equal scores, so the order stays a, b; only the reported requests differ.
    document = _with_requests(_signals(1, a=0.2, b=0.2), a=12, b=0)
    operator = SignalsOperator(tls_files.server_context(), document)
    address = await operator.start()
    try:
        least_loaded = {"selection_policy": "random", "selection_load_aware": True}
        group = [candidate(n, selection_group=0) for n in ("a", "b")]
        content = {**overlay(*group), **least_loaded}
        overlay_path = tmp_path / "grid-overlay.json"
        write_json(overlay_path, envelope(content))
        rendered, public, admin = render_praxis(
            content, [a, b], tmp_path, overlay_file=overlay_path
        )
        path = tmp_path / "praxis.yaml"
        path.write_text(rendered.text)
        d = tls_files.directory
        flags = ("--operator", address, "--cert", str(d / "tls.crt"),
                 "--key", str(d / "tls.key"), "--ca", str(d / "ca.crt"))  # fmt: skip
        await gateways(path, public, admin, *flags)
        async with aiohttp.ClientSession() as http:

            async def polled(sequence: int) -> bool:
                async with http.get(f"http://{admin}/snapshot") as resp:
                    return bool((await resp.json())["signals"]["sequence"] == sequence)

            await eventually(lambda: polled(1), "the first document held")  # type: ignore[arg-type]
            # One request at a time: the gateway's own in-flight count is 0 for both,
            # so only the others' queue on a sends every request to b.
            assert {await _served_by(http, public) for _ in range(8)} == {"b"}
            # The queue moves from a to b. Each report moves the others' queue towards
            # it (a 10 s average), so the traffic follows within a few reports.
            sequence = 1

            async def moved() -> bool:
                nonlocal sequence
                sequence += 1
                operator.document = _with_requests(_signals(sequence, a=0.2, b=0.2), a=0, b=12)
                await eventually(lambda: polled(sequence), f"document {sequence} held")  # type: ignore[arg-type]
                return {await _served_by(http, public) for _ in range(8)} == {"a"}

            await eventually(moved, "every request to a once b holds the queue", timeout_s=40)
            assert sequence > 2  # not the first report after the move: it was averaged
    finally:
        await operator.stop()
