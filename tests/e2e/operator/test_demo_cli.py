"""``grid demo --duration N`` as a person runs it: exit 0, demo.json, no process left behind.

The command runs as a real child process. While it runs, the test records every
descendant process (pid and kernel start time, so a reused pid cannot pass for
a survivor); after it exits, none of them may still exist.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.core.overlay import verify
from grid.demo.plan import DEMO_BUDGETS, MODEL, NAMESPACE, NETWORK
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]

DURATION_S = 3
SITES = {"east", "west", "central"}
SITE_KEYS = {
    *("pid", "swim", "signals", "metrics", "store", "overlay_dir", "cert", "key"),
    *("gateway", "gateway_admin"),
}
ADDRESS = re.compile(r"^127\.0\.0\.1:\d{1,5}$")

Proc = tuple[int, str]
"""A process: pid and its start time in clock ticks since boot."""


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(ppid, state, start time) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], fields[19]


def _descendants(root: int) -> set[Proc]:
    """Every live descendant of ``root``."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            children.setdefault(stat[0], []).append((int(entry), stat[2]))
    found: set[Proc] = set()
    stack = [root]
    while stack:
        for pid, started in children.get(stack.pop(), []):
            found.add((pid, started))
            stack.append(pid)
    return found


def _alive(proc: Proc) -> bool:
    stat = _stat(proc[0])
    return stat is not None and stat[2] == proc[1] and stat[1] != "Z"


def _check_description(
    doc: dict[str, Any], pids: set[int], transport: str, prometheus: bool
) -> None:
    keys = {"sites", "ca", "gateway", "ui", "api_keys", "tools", "mcp", "agents", "a2a"}
    assert set(doc) == keys | ({"prometheus"} if prometheus else set())
    assert doc["mcp"] == f"http://{doc['gateway']}/mcp"
    assert list(doc["tools"]) == ["tools-east"], "the demo's MCP server (§16)"
    assert doc["a2a"] == f"http://{doc['gateway']}/a2a/planner"
    assert list(doc["agents"]) == ["planner"], "the demo's A2A agent (§16)"
    assert set(doc["api_keys"]) == set(DEMO_BUDGETS), "one client key per demo tenant"
    assert re.match(r"^http://127\.0\.0\.1:\d{1,5}/ui/$", doc["ui"]), doc["ui"]
    assert set(doc["sites"]) == SITES
    assert Path(doc["ca"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert ADDRESS.match(doc["gateway"])
    assert doc["gateway"] == doc["sites"]["east"]["gateway"]
    for name, site in doc["sites"].items():
        assert set(site) == SITE_KEYS, name
        assert isinstance(site["pid"], int) and site["pid"] in pids, name
        if transport == "gossip":
            assert site["signals"] is None  # gossip: the signals listener is not bound
        else:
            assert ADDRESS.match(site["signals"]), site
        assert ADDRESS.match(site["swim"]) and ADDRESS.match(site["metrics"]), site
        assert ADDRESS.match(site["gateway"]) and ADDRESS.match(site["gateway_admin"]), site
        assert Path(site["store"]).is_file()
        assert Path(site["overlay_dir"]).is_dir()
        assert Path(site["cert"]).read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert "PRIVATE KEY" in Path(site["key"]).read_text()


async def _chat_through(gateway: str, key: str) -> None:
    """A chat completion through the demo gateway, as the README's curl sends it (with
    globex's key); without a key the gateway answers 401 ``unauthenticated``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
    url = f"http://{gateway}/v1/chat/completions"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers={"x-grid-tenant": "globex"}) as resp:
            assert resp.status == 401, await resp.text()
            assert (await resp.json())["error"]["code"] == "unauthenticated"
        async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
    assert answer["model"] == MODEL and answer["usage"]["total_tokens"] > 0


async def _prometheus_scrapes_the_demo(url: str) -> None:
    """``--prometheus``: ready, with Grid's rules loaded, scraping every operator and gateway."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/api/v1/rules") as resp:
            groups = (await resp.json())["data"]["groups"]
        names = {r["name"] for g in groups for r in g["rules"]}
        assert {"GridSiteUnreachable", "GridBudgetExhausted"} <= names

        async def jobs() -> list[str]:
            async with http.get(f"{url}/api/v1/targets") as resp:
                active = (await resp.json())["data"]["activeTargets"]
            found = sorted(t["labels"]["job"] for t in active)
            return found if found == ["grid-gateway"] * 3 + ["grid-operator"] * 3 else []

        await eventually(jobs, "every operator and gateway is a target")  # type: ignore[arg-type]


@pytest.mark.parametrize(("transport", "prometheus"), [("gossip", False), ("poll", True)])
async def test_demo_runs_and_leaves_nothing_behind(
    tmp_path: Path, tools: Any, transport: str, prometheus: bool
) -> None:
    """Exit 0, the §9 demo.json, three verified overlays, no child left, no token leaked;
    with ``--prometheus`` a Prometheus that scrapes it all and stops with it."""
    root = tmp_path / "demo"
    with open(tmp_path / "demo.out", "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "grid",
            "demo",
            "--duration",
            # Prometheus discovers its targets a few seconds after it is ready.
            str(DURATION_S + (6 if prometheus else 0)),
            "--dir",
            str(root),
            "--signal-transport",
            transport,
            *(["--prometheus"] if prometheus else []),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    seen: set[Proc] = set()
    try:

        def written() -> bool:
            assert proc.returncode is None, f"grid demo exited early with {proc.returncode}"
            return (root / "demo.json").exists()

        await eventually(written, "demo.json written", timeout_s=60.0, interval_s=0.1)
        seen = _descendants(proc.pid)
        doc = json.loads((root / "demo.json").read_text())
        client_keys = [k.encode() for k in doc["api_keys"].values()]
        _check_description(doc, {pid for pid, _ in seen}, transport, prometheus)
        assert len(seen) >= 3 + 6 + 3 + prometheus, "operators, mock providers, gateways"
        if prometheus:
            await _prometheus_scrapes_the_demo(doc["prometheus"])
        await _chat_through(doc["gateway"], doc["api_keys"]["globex"])
        async with asyncio.timeout(60):
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(20):
                    await proc.wait()
        for pid, _ in {p for p in seen if _alive(p)}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = (tmp_path / "demo.out").read_bytes()
    assert code == 0, output.decode(errors="replace")[-2000:]
    survivors = {p for p in seen if _alive(p)}
    assert not survivors, f"processes left behind: {sorted(survivors)}"

    for name in SITES:
        overlay = tools.read_overlay(root / name)
        assert overlay is not None, name
        scope = {"network": NETWORK, "namespace": NAMESPACE, "local_site": name}
        assert verify(overlay.envelope, scope).verdict == "accept"
        assert (root / name / "praxis.yaml").is_file(), "the operator rendered praxis.yaml"
        scored = ["score" in c for c in overlay.candidates]
        assert all(scored) if transport == "gossip" else not any(scored), (name, transport)
    secrets = await tools.store_list(root / "east" / "store.db", "Secret")
    encoded = next(s for s in secrets if s["metadata"]["name"] == "openai-credentials")
    token = base64.b64decode(encoded["data"]["token"])
    needles = (token, base64.b64encode(token))
    assert any(n in p.read_bytes() for p in root.glob("east/store.db*") for n in needles), (
        "positive control: the scan finds the token where the store keeps it"
    )
    for path in [*root.rglob("*"), tmp_path / "demo.out"]:
        if path.is_file() and not path.name.startswith("store.db"):
            assert not any(n in path.read_bytes() for n in needles), path
    # The client keys are in demo.json only: no log, overlay, praxis.yaml or store holds one.
    for path in [*root.rglob("*"), tmp_path / "demo.out"]:
        if path.is_file() and path.name != "demo.json":
            assert not any(k in path.read_bytes() for k in client_keys), path
