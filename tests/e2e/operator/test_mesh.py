"""A real three-site mesh on loopback: convergence, load, trust, restarts, failure, no leaks.

Every test shares the module's `mesh` (east and central in us-east-1, west in
us-west-2; SWIM probes every 500 ms, suspicion 2 s, providers scraped every 1 s,
staleCandidateTtlSeconds 10). Tests run in file order, and the ones that stop
processes come last. Every wait is a poll with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from grid.core.crdt.origin import ItemSigner
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.snapshot import GridStateSnapshot, Lane
from grid.core.overlay import verify
from grid.core.swim.messages import BroadcastItem, Gossip
from grid.core.wire import codec
from grid.core.wire.frame import seal
from grid.demo.mesh import DemoMesh
from grid.demo.plan import MODEL, NAMESPACE, NETWORK
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SCRAPE_INTERVAL_S = 1.0
SUSPICION_TIMEOUT_S = 2.0
STALE_TTL_S = 10.0
CONVERGE_TIMEOUT_S = 20.0
OWN = {
    "east": {"vllm-east-a", "vllm-east-b", "bedrock-llama", "openai", "tools-east"},
    "west": {"vllm-west", "planner"},
    "central": {"vllm-central"},
}
EXPECTED_TIERS = {
    "east": {"central": "same_region", "west": "cross_region"},
    "west": {"east": "cross_region", "central": "cross_region"},
    "central": {"east": "same_region"},
}
"""Tiers each site must give the others' candidates (central's copy of west is mispinned)."""

LOAD_WORKERS = 16
"""Requests kept in flight at vllm-east-a: capacity 4, so 12 wait (queue ratio 12/16 = 0.75,
below the 0.85 ExistingOnly threshold: the reorder comes from the score alone)."""
LOAD_SHOWN_WAITING = 8
"""vllm:num_requests_waiting at or above this means /metrics shows the load."""
REORDER_BOUND_S = 2 * SCRAPE_INTERVAL_S
REORDER_SLACK_S = 0.5
"""Polling granularity and a busy 2-core machine."""
UNREACHABLE_BOUND_S = 6.0
"""Kill to Unreachable to overlay without the site: the demo's 1 s site probe interval,
a failed connect, one render round, and a busy 2-core machine."""


def _overlay_ok(look: Any, site: str) -> Any:
    """The site's overlay when it verifies and lists every expected peer candidate."""
    overlay = look.overlay(site)
    if overlay is None or overlay.config != overlay.envelope["overlay"]:
        return None
    if not verify(overlay.envelope, look.expected_scope(site)).accepted:
        return None
    listed = {cluster for _, cluster in overlay.clusters()}
    wanted = set(OWN[site])
    for peer in EXPECTED_TIERS[site]:
        wanted |= OWN[peer]
    return overlay if wanted <= listed else None


async def test_three_sites_converge_with_tiers(mesh: DemoMesh, look: Any) -> None:
    """Each overlay verifies, lists the others' providers, and tiers them by geography."""
    for site, peers in EXPECTED_TIERS.items():
        overlay = await eventually(
            lambda s=site: _overlay_ok(look, s), f"{site}'s overlay lists its peers", timeout_s=30.0
        )
        verdict = verify(overlay.envelope, look.expected_scope(site))
        assert verdict.verdict == "accept", verdict
        assert verdict.revision == overlay.revision
        assert verify(overlay.config).verdict == "accept_legacy"
        assert overlay.config["local_site"] == site and overlay.config["network"] == NETWORK
        ranks = [c["rank"] for c in overlay.candidates]
        assert ranks == list(range(len(ranks)))
        for candidate in overlay.candidates:
            if candidate["site"] == site:
                assert candidate["selection_tier"] == "same_site", candidate
            elif candidate["site"] in peers:
                assert candidate["selection_tier"] == peers[candidate["site"]], (site, candidate)
            assert candidate["cluster"] in OWN[candidate["site"]]
    # The other sites agree on what east publishes: same providers, same models.
    east_models = {
        (c["cluster"], c["name"]) for c in look.overlay("east").candidates if c["site"] == "east"
    }
    for site in ("west", "central"):
        seen = {(c["cluster"], c["name"]) for c in look.overlay(site).candidates}
        assert east_models <= seen


async def _site_phases(look: Any, store_site: str) -> dict[str, tuple[str, str]]:
    sites = await look.objects(store_site, "GridSite")
    return {
        name: ((o.get("status") or {}).get("phase", ""), (o.get("status") or {}).get("reason", ""))
        for name, o in sites.items()
    }


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


async def test_gossip_mesh_leaves_every_signals_port_closed(mesh: DemoMesh, look: Any) -> None:
    """Gossip is the default: no operator binds the mTLS signals listener (seed 000)."""
    await eventually(lambda: look.ready("east"), "east is ready", timeout_s=CONVERGE_TIMEOUT_S)
    for name, site in mesh.plan.sites.items():
        assert not _port_open(f"127.0.0.1:{site.signals_port}"), name
        assert mesh.describe()["sites"][name]["signals"] is None


async def test_wrong_fingerprint_never_active(mesh: DemoMesh, look: Any) -> None:
    """Central's mispinned GridSite west stays Connecting; every correct pin goes Active."""

    async def settled() -> Any:
        central = await _site_phases(look, "central")
        others = [await _site_phases(look, s) for s in ("east", "west")]
        correct = [central["east"], central["central"]] + [p for o in others for p in o.values()]
        ok = all(p == ("Active", "FingerprintVerified") for p in correct)
        return central if ok and central["west"] == ("Connecting", "FingerprintMismatch") else None

    await eventually(settled, "phases settle", timeout_s=CONVERGE_TIMEOUT_S, interval_s=0.25)
    # A site whose certificate was never verified gets no traffic from central.
    central_overlay = look.overlay("central")
    assert central_overlay is not None and central_overlay.find("vllm-west") is None
    # Several probe rounds (1 s each) later it has still never been Active.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert (await _site_phases(look, "central"))["west"][0] == "Connecting"
        await asyncio.sleep(0.25)
    # Central's operator log holds every phase change it made: west never went Active there,
    # while east did.
    changes = [
        json.loads(line)
        for line in (mesh.root / "logs" / "operator-central.log").read_text().splitlines()
        if '"site phase"' in line
    ]
    assert {c["to"] for c in changes if c.get("site") == "east"} >= {"Connecting", "Active"}
    assert "Connecting" in {c["to"] for c in changes if c.get("site") == "west"}
    assert "Active" not in {c["to"] for c in changes if c.get("site") == "west"}
    # The public surface says the same.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "grid",
        "get",
        "gridsites",
        "-o",
        "json",
        "--store",
        f"sqlite:{look.store_path('central')}",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    items = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
    assert items["west"]["status"]["phase"] == "Connecting"
    assert items["west"]["status"]["reason"] == "FingerprintMismatch"
    assert items["east"]["status"]["phase"] == "Active"


async def _load(url: str, stop: asyncio.Event) -> int:
    """Keep one chat completion in flight at ``url`` until ``stop``; returns how many ran."""
    done = 0
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            # A fresh prompt each time: no prefix-cache hits to flatter the loaded provider.
            body = {"model": MODEL, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=20)) as r:
                assert r.status == 200
                await r.read()
            done += 1
    return done


def _order(overlay: Any) -> tuple[int, int] | None:
    a, b = overlay.find("vllm-east-a"), overlay.find("vllm-east-b")
    return None if a is None or b is None else (a["rank"], b["rank"])


async def test_load_reorders_within_two_scrapes(mesh: DemoMesh, look: Any) -> None:
    """Queueing at vllm-east-a drops it below vllm-east-b within 2 scrape intervals.

    Measured from the first moment vllm-east-a's own /metrics shows the load
    (``vllm:num_requests_waiting`` >= 8) to the first moment east's
    grid-overlay.json ranks it below its sibling; both polled every 50 ms.
    """

    def idle_order() -> bool:
        overlay = look.overlay("east")
        order = overlay and _order(overlay)
        return bool(order) and order[0] < order[1]

    # vllm-east-b runs the bursty profile, so idle vllm-east-a outranks it but near a trough.
    await eventually(idle_order, "idle vllm-east-a ranks first", timeout_s=15.0, interval_s=0.1)
    assert await look.provider_gauge("vllm-east-a", "vllm:num_requests_waiting") == 0
    idle_queue_share = look.overlay("east").find("vllm-east-a")["score_breakdown"]["queue_depth"]
    assert idle_queue_share > 0
    url = f"http://127.0.0.1:{look.provider_port('vllm-east-a')}/v1/chat/completions"
    stop = asyncio.Event()
    workers = [asyncio.create_task(_load(url, stop)) for _ in range(LOAD_WORKERS)]
    shown: float | None = None
    reordered: float | None = None
    loaded: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 10.0
        while reordered is None and time.monotonic() < deadline:
            waiting = await look.provider_gauge("vllm-east-a", "vllm:num_requests_waiting")
            now = time.monotonic()
            if shown is None and waiting is not None and waiting >= LOAD_SHOWN_WAITING:
                shown = now
            overlay = look.overlay("east")
            order = overlay and _order(overlay)
            if order and order[0] > order[1]:
                reordered, loaded = now, overlay.find("vllm-east-a")
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        served = await asyncio.gather(*workers)
    assert shown is not None, "vllm-east-a's /metrics never showed the load"
    assert reordered is not None, "east never ranked the loaded vllm-east-a below vllm-east-b"
    lag = reordered - shown
    assert lag <= REORDER_BOUND_S + REORDER_SLACK_S, f"reordered {lag:.2f} s after /metrics"
    assert sum(served) > LOAD_WORKERS
    # The queue signal itself moved (12 of 16 waiting: its share falls to about a quarter).
    assert loaded["admission_state"] == "new_and_existing"
    assert loaded["score_breakdown"]["queue_depth"] < idle_queue_share / 2


def _durable(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What a restart must keep: identity and desired state (status and versions may move)."""
    kept = {}
    for name, obj in objs.items():
        body = obj.get("spec", obj.get("data"))
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        kept[name] = (obj["metadata"]["uid"], obj["metadata"].get("generation"), digest)
    return kept


async def _store_snapshot(look: Any, site: str) -> dict[str, Any]:
    kinds = ("GridNetwork", "GridSite", "InferenceProvider", "Secret")
    return {kind: _durable(await look.objects(site, kind)) for kind in kinds}


async def _phase_is(look: Any, phase: str) -> bool:
    return (await _site_phases(look, "east"))["central"][0] == phase


def _forged_for_west(mesh: DemoMesh) -> list[bytes]:
    """Sealed datagrams, one item each, forging west's lanes with the grid's SWIM key.

    The forger is as strong as an insider gets: it holds the SWIM key and east's
    CA-issued site key, but not west's.
    """
    assert mesh.pki is not None
    swim_key = mesh.pki.swim_key.read_bytes()
    east_key = load_pem_private_key(mesh.pki.sites["east"].key.read_bytes(), None)
    assert isinstance(east_key, ec.EllipticCurvePrivateKey)
    east = ItemSigner(east_key)
    evil = GridStateSnapshot.empty("west").put_provider(
        "evil", ProviderRecord(name="evil", cluster="evil", site="west", backend_kind="local")
    )
    items = [
        BroadcastItem(Lane.STATE, "west", 2**62, os.urandom(200)),
        east.sign_item(BroadcastItem(Lane.STATE, "west", 2**62 + 1, encode_lane(evil.state))),
        BroadcastItem(Lane.STATE, "west", 2**62 + 2, encode_lane(evil.state)),
    ]
    return [seal(swim_key, codec.encode_datagram(Gossip("mallory", items=(i,)))) for i in items]


async def test_forged_state_for_west_is_ignored_by_real_operators(
    mesh: DemoMesh, look: Any
) -> None:
    """A SWIM key holder who is not west cannot make west's candidates vanish (nor add any).

    Before origin signatures, one such item at revision 2^62 shadowed every later
    item of west, so peers evicted west's candidates after staleCandidateTtlSeconds
    and west never got back above the forged revision.
    """
    await eventually(lambda: _overlay_ok(look, "east"), "east lists west", timeout_s=20.0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for site in mesh.plan.sites.values():
            for packet in _forged_for_west(mesh):
                raw.sendto(packet, ("127.0.0.1", site.swim_port))

    async def dropped(site: str) -> float:
        text = await look.operator_metrics(site) or ""
        found = re.findall(r'grid_swim_items_dropped_total\{reason="(\w+)"\} (\S+)', text)
        counts = {reason: float(value) for reason, value in found}
        return counts.get("bad_signature", 0.0) + counts.get("unsigned", 0.0)

    for site in ("east", "west"):
        await eventually(
            lambda s=site: dropped(s), f"{site} counts the forged items", timeout_s=10.0
        )
    # Central never verified west's certificate (mispinned): west's items only wait there.
    central = await look.operator_metrics("central") or ""
    assert re.search(r"^grid_swim_items_pending [1-9]", central, re.MULTILINE), central
    assert look.overlay("central").find("evil") is None
    # Longer than the stale-candidate TTL: west's own items keep arriving at east.
    deadline = time.monotonic() + STALE_TTL_S + 2 * SCRAPE_INTERVAL_S
    while time.monotonic() < deadline:
        overlay = look.overlay("east")
        assert overlay is not None and overlay.find("vllm-west") is not None
        assert overlay.find("evil") is None
        await asyncio.sleep(0.25)
    west_log = (mesh.root / "logs" / "operator-west.log").read_text()
    assert "local state write" not in west_log


async def test_restart_keeps_grid_id_and_store(mesh: DemoMesh, look: Any) -> None:
    """A gracefully stopped and restarted operator keeps its gridId and its store."""
    grid_id = await look.grid_id("central")
    assert grid_id
    before = await _store_snapshot(look, "central")
    configmaps = set(await look.objects("central", "ConfigMap"))
    assert configmaps == {f"grid-overlay-{NETWORK}-edge-central", "praxis-consumer-config"}
    mesh.kill_operator("central", signal.SIGTERM)
    assert await mesh.wait_exit("operator-central", 15.0) == 0
    # A graceful stop leaves the SWIM mesh, so the peers record that it left.
    await eventually(
        lambda: _phase_is(look, "Left"), "east records central Left", timeout_s=10.0, interval_s=0.2
    )
    await mesh.start_operator("central")
    await eventually(
        lambda: look.ready("central"), "central ready again", timeout_s=30.0, interval_s=0.2
    )
    await eventually(
        lambda: _overlay_ok(look, "central"), "central renders its peers again", timeout_s=20.0
    )
    await eventually(
        lambda: _phase_is(look, "Active"), "central Active at east again", timeout_s=15.0
    )
    assert await look.grid_id("central") == grid_id
    assert await _store_snapshot(look, "central") == before
    assert set(await look.objects("central", "ConfigMap")) == configmaps

    # The sites agree on one gridId: each adopts the oldest one gossiped.
    async def one_grid_id() -> bool:
        return {await look.grid_id(s) for s in ("east", "west", "central")} == {grid_id}

    await eventually(
        one_grid_id, "every site holds the same gridId", timeout_s=10.0, interval_s=0.25
    )


async def test_killed_site_leaves_the_overlay_when_unreachable_then_back(
    mesh: DemoMesh, look: Any
) -> None:
    """SIGKILL west: east drops its candidates once west is Unreachable (§14), not at the TTL.

    Bound: the site probe (every 1 s here) fails at once on a refused connect,
    so west is Unreachable and out of east's overlay within
    `UNREACHABLE_BOUND_S`, well before staleCandidateTtlSeconds (10 s) would
    evict a record. A restart makes west Active again and its candidates return.
    """
    grid_id = await look.grid_id("west")
    await eventually(lambda: _overlay_ok(look, "east"), "east lists west", timeout_s=10.0)
    mesh.kill_operator("west", signal.SIGKILL)
    killed = time.monotonic()
    assert await mesh.wait_exit("operator-west", 5.0) == -signal.SIGKILL
    bound = UNREACHABLE_BOUND_S
    phase_when_gone: str | None = None
    gone: float | None = None
    while time.monotonic() - killed < bound:
        overlay = look.overlay("east")
        if overlay is not None and overlay.find("vllm-west") is None:
            gone = time.monotonic() - killed
            phase_when_gone = (await _site_phases(look, "east"))["west"][0]
            break
        await asyncio.sleep(0.1)
    assert gone is not None, f"east still lists vllm-west {bound:.0f} s after the kill"
    assert gone < STALE_TTL_S - 2 * SCRAPE_INTERVAL_S, f"evicted only at the TTL ({gone:.1f} s)"
    assert phase_when_gone in ("Unreachable", "Left"), phase_when_gone
    await eventually(
        lambda: (o := look.overlay("central")) is not None and o.find("vllm-west") is None,
        "central drops west too",
        timeout_s=3.0,
    )
    metrics = await eventually(
        lambda: _dead_counted(look),
        "east's SWIM counts a dead member",
        timeout_s=SUSPICION_TIMEOUT_S + 8.0,
    )
    assert metrics

    await mesh.start_operator("west")
    for site in ("east", "west"):
        await eventually(
            lambda s=site: (
                (o := look.overlay(s)) is not None
                and o.find("vllm-west") is not None
                and o.find("vllm-east-a") is not None
            ),
            f"{site} lists west's and east's providers again",
            timeout_s=30.0,
        )
    # Central's copy of west is mispinned: it never routes to the unverified site.
    central = look.overlay("central")
    assert central is not None and central.find("vllm-west") is None
    assert await look.grid_id("west") == grid_id
    await eventually(
        lambda: _west_active(look), "west is Active at east again", timeout_s=10.0, interval_s=0.25
    )


async def _dead_counted(look: Any) -> bool:
    metrics = await look.operator_metrics("east")
    dead = re.search(r'grid_swim_members\{state="dead"\} (\S+)', metrics or "")
    return dead is not None and float(dead.group(1)) >= 1.0


async def _west_active(look: Any) -> bool:
    return (await _site_phases(look, "east"))["west"][0] == "Active"


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("store.db"):
            yield path


async def _grid_get(kind: str, store: Path) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "grid",
        "get",
        kind,
        "-o",
        "json",
        "--store",
        f"sqlite:{store}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode(errors="replace")
    return out


async def test_token_never_leaks(mesh: DemoMesh, look: Any) -> None:
    """The openai-credentials token is in no overlay, ConfigMap, status, log or metric."""
    secret = (await look.objects("east", "Secret"))["openai-credentials"]
    token = base64.b64decode(secret["data"]["token"])
    needles = (token, base64.b64encode(token))

    def leaks(blob: bytes) -> bool:
        return any(n in blob for n in needles)

    # Positive control: the needle is findable where it legitimately lives.
    assert leaks(look.store_path("east").read_bytes()) or leaks(
        (look.store_path("east").parent / "store.db-wal").read_bytes()
        if (look.store_path("east").parent / "store.db-wal").exists()
        else b""
    )
    scanned = [p for p in _files(mesh.root)]
    assert any(p.name == "grid-overlay.json" for p in scanned)
    assert any(p.name == "praxis.yaml" for p in scanned), "the scan covers praxis.yaml"
    assert any(p.name.startswith("gateway-") and p.suffix == ".log" for p in scanned)
    assert any(p.suffix == ".log" and p.name.startswith("operator-") for p in scanned)
    for path in scanned:
        assert not leaks(path.read_bytes()), f"token bytes in {path.relative_to(mesh.root)}"
    for site in mesh.plan.sites:
        for kind in ("GridNetwork", "GridSite", "InferenceProvider", "ConfigMap"):
            blob = json.dumps(await look.objects(site, kind)).encode()
            assert not leaks(blob), f"token in {kind} objects of {site}'s store"
        assert not leaks(((await look.operator_metrics(site)) or "").encode())
    openai = (await look.objects("east", "InferenceProvider"))["openai"]
    assert openai["spec"]["auth"]["secretRef"]["name"] == "openai-credentials"
    credential = look.overlay("east").find("openai")["credential"]
    assert credential["secretRef"] == {
        "name": "openai-credentials",
        "namespace": NAMESPACE,
        "key": "token",
    }
    for kind in ("inferenceproviders", "configmaps", "secrets"):
        out = await _grid_get(kind, look.store_path("east"))
        assert not leaks(out), f"grid get {kind} prints the token"
    with contextlib.suppress(FileNotFoundError):
        assert not leaks((mesh.root / "demo.json").read_bytes())
