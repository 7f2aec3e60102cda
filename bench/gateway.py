"""Benchmark: ``grid gateway`` against direct, a trivial forwarder and LiteLLM's proxy.

Every path ends at the same mock provider (``grid mock-provider``, zero service
time), each in its own process, all on loopback and sharing the machine's cores
with the load generator, so no proxy can match direct; the trivial aiohttp
forwarder (``bench/forwarder.py``) is the floor any Python proxy pays. Measured
in the same run, interleaved round by round, at concurrency 16 with keep-alive:

* ``direct``: straight to the mock provider;
* ``forwarder``: through the trivial forwarder;
* ``gateway``: through ``grid gateway`` run from a rendered praxis.yaml in
  overlay-file mode, with routing, session affinity (``x-grid-session`` from a
  pool of 100) and bearer-credential injection from a mounted file;
* ``gateway_apikey``: the same gateway under ``clientAuth.mode: apiKey`` (§15),
  its clients presenting one of `CLIENT_KEYS` keys, each hashed, looked up among
  the keys file's digests and compared in constant time;
* ``gateway_traced``: the same gateway with traces on (``--otlp-endpoint``) as
  it runs by default, sampling `GATEWAY_SAMPLE_RATIO` of the requests, and
  exporting over OTLP/HTTP to a receiver in this process (`grid.testing.otlp`),
  so the SDK's span, batch and export work is paid;
* ``gateway_traced_all``: the same with ``OTEL_TRACES_SAMPLER=parentbased_always_on``,
  every request traced: the SDK's full cost, reported beside the default;
* ``gateway_workers_2``: the same gateway with ``--workers 2`` (the others run
  ``--workers 1``), against ``forwarder_2``, two forwarder processes sharing one
  port with ``SO_REUSEPORT`` (`benchkit.gateway_workers`);
* ``litellm``: through LiteLLM's proxy routed to the same mock, only when
  ``make bench-deps`` installed it in ``.bench/litellm``.

Non-streaming chat completions give throughput and p50 latency, per round; the
ratios are medians over rounds of figures measured back to back, which keeps
the drift of a shared machine out of them. Streaming ones give the time to
first byte. The last line is one JSON object with
``throughput_ratio_to_forwarder`` (target >= 0.85), ``added_p50_ms`` over direct
for the gateway and the forwarder, ``added_p50_ratio_to_forwarder`` (target <=
1.25), ``tracing_throughput_ratio`` (traced over untraced gateway, target >=
0.90), ``tracing_all_throughput_ratio`` (every request traced),
``client_auth_throughput_ratio`` (apiKey over none, target >= 0.95) and
``client_auth_added_p50_ms``, ``workers_2_throughput_ratio_to_1`` (2 gateway
workers over 1), ``workers_2_throughput_ratio_to_forwarder_2``,
``throughput_ratio_to_litellm`` when LiteLLM ran, and the added time to first
byte of streams. ``--quick`` stays under a minute.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.append(_HERE)  # last, for benchkit only

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402

from benchkit import gateway_workers  # noqa: E402
from benchkit.procs import LITELLM, REPO, spawn  # noqa: E402
from grid.adapters.tracing import GATEWAY_SAMPLE_RATIO  # noqa: E402
from grid.core.identity import key_line  # noqa: E402
from grid.core.overlay import Provenance, Scope, build_envelope, format_timestamp  # noqa: E402
from grid.core.overlay.consumer import RenderedConsumerConfig, render_consumer_config  # noqa: E402
from grid.core.overlay.ids import stable_id  # noqa: E402
from grid.core.resources.network_spec import ConsumerSpec  # noqa: E402
from grid.demo.ports import free_port  # noqa: E402
from grid.testing.otlp import OtlpReceiver  # noqa: E402

MODEL = "bench-model"
CONCURRENCY = 16
SESSIONS = 100
SCOPE = Scope("bench", "edge", "bench", "east")
LITELLM_WAIT_S = {True: 35.0, False: 120.0}
"""How long LiteLLM's proxy may take to start (quick, full); past it the run goes on without it."""
LITELLM_KEY = f"sk-bench-{secrets.token_hex(16)}"
"""LiteLLM refuses to start without a master key; the load generator presents it."""
CLIENT_KEYS = 100
"""Lines of the apiKey gateway's keys file: a team's worth of tenants' keys."""
CLIENT_KEY = f"grid-bench-{secrets.token_hex(16)}"
"""The key the apiKey gateway's clients present (the keys file's last line)."""
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello bench " * 8}]}


async def wait_http(
    url: str, timeout_s: float, auth: str, child: subprocess.Popen[bytes] | None = None
) -> None:
    """POST to ``url`` until it answers 200, or fail at the deadline or if ``child`` exits."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {auth}"}
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.post(
                    url, json=BODY, headers=headers, timeout=aiohttp.ClientTimeout(total=5)
                ) as r:
                    if r.status == 200:
                        return
            if child is not None and child.poll() is not None:
                raise RuntimeError(f"the process behind {url} exited with {child.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not up within {timeout_s} s")
            await asyncio.sleep(0.2)


def _keys_file(credentials: Path) -> dict[str, Any]:
    """A keys file of `CLIENT_KEYS` lines ending with `CLIENT_KEY`'s; its ``clientAuth``."""
    path = credentials / "bench-client-keys" / "keys.yaml"
    path.parent.mkdir(parents=True)
    others = [key_line(f"tenant-{i}", secrets.token_hex(16)) for i in range(CLIENT_KEYS - 1)]
    path.write_text("".join([*others, key_line("bench", CLIENT_KEY)]))
    ref = {"name": "bench-client-keys", "namespace": "bench", "key": "keys.yaml"}
    return {"mode": "apiKey", "secretRef": ref}


def gateway_config(
    work: Path, upstream: str, public: int, admin: int, api_key: bool = False
) -> Path:
    """praxis.yaml (overlay-file mode, one credentialed candidate) and its overlay and token;
    with ``api_key``, clients authenticate with a key of a keys file (§15)."""
    work.mkdir(parents=True, exist_ok=True)
    credential = {
        "strategy": "bearer_token",
        "secretRef": {"name": "bench-token", "namespace": "bench", "key": "token"},
    }
    candidate = {
        "kind": "inference_model",
        "name": MODEL,
        "site": "east",
        "cluster": "mock",
        "fresh": True,
        "stable_id": stable_id("inference_model", MODEL, "east", "mock"),
        "admission_state": "new_and_existing",
        "selection_tier": "same_site",
        "rank": 0,
        "credential": credential,
    }
    overlay = {
        "network": "bench",
        "local_site": "east",
        "candidates": [candidate],
        "generated_at": format_timestamp(datetime.now(UTC)),
    }
    envelope = build_envelope(
        overlay, SCOPE, Provenance("bench", "bench", None, None, datetime.now(UTC))
    )
    (work / "grid-overlay.json").write_text(json.dumps(envelope))
    token = work / "credentials" / "bench-token" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("sk-bench-token")
    client_auth = _keys_file(work / "credentials") if api_key else {"mode": "none"}
    config = ConsumerSpec.model_validate(
        {
            "enabled": True,
            "clientAuth": client_auth,
            "listenerHost": "127.0.0.1",
            "listenerPort": public,
            "adminAddress": f"127.0.0.1:{admin}",
            "credentialMountBase": str(work / "credentials"),
            "clusterEndpoints": [
                {"cluster": "mock", "address": upstream, "transport": {"mode": "plaintext"}}
            ],
        }
    )
    rendered = render_consumer_config(overlay, SCOPE, config, str(work / "grid-overlay.json"))
    assert isinstance(rendered, RenderedConsumerConfig)
    path = work / "praxis.yaml"
    path.write_text(rendered.text)
    return path


def litellm_config(work: Path, upstream: str) -> Path:
    """A LiteLLM proxy config routing MODEL to the mock as an OpenAI-compatible backend."""
    path = work / "litellm.yaml"
    path.write_text(
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: http://{upstream}/v1\n"
        "      api_key: sk-bench-token\n"
    )
    return path


def client_token(name: str) -> str:
    """What each target's clients present (the gateway strips and replaces it)."""
    return {"litellm": LITELLM_KEY, "gateway_apikey": CLIENT_KEY}.get(name, "client-token")


async def load(url: str, seconds: float, stream: bool, name: str) -> dict[str, Any]:
    """``CONCURRENCY`` keep-alive clients posting for ``seconds``; counts and timings."""
    latencies: list[float] = []
    ttfb: list[float] = []
    errors = 0
    body = {**BODY, "stream": True} if stream else BODY
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as http:
        deadline = time.perf_counter() + seconds

        async def worker(w: int) -> None:
            nonlocal errors
            n = 0
            while time.perf_counter() < deadline:
                headers = {"Authorization": f"Bearer {client_token(name)}"}
                if name in ("gateway", "gateway_apikey", "gateway_workers_2"):
                    headers["x-grid-session"] = f"s{(w * 7 + n) % SESSIONS}"
                n += 1
                began = time.perf_counter()
                try:
                    async with http.post(url, json=body, headers=headers) as r:
                        if stream:
                            await r.content.readany()
                            ttfb.append(time.perf_counter() - began)
                        await r.read()
                        if r.status != 200:
                            errors += 1
                            continue
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
        elapsed = time.perf_counter() - began
    return {"ok": len(latencies), "errors": errors, "elapsed": elapsed,
            "latencies": latencies, "ttfb": ttfb}  # fmt: skip


def _p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3) if values else float("nan")


async def _round(name: str, url: str, seconds: float) -> tuple[dict[str, float], int]:
    result = await load(url, seconds, False, name)
    row = {
        "rps": result["ok"] / result["elapsed"],
        "p50_ms": statistics.median(result["latencies"]) * 1000,
    }
    return row, result["errors"]


async def measure(targets: dict[str, str], rounds: int, seconds: float) -> dict[str, Any]:
    """Per-round figures for every target, the order rotating each round; then streams.

    The machine is shared, so load from outside drifts during a run; each round
    measures every target back to back, and the figures are medians over rounds.
    LiteLLM is measured after the others, each of its rounds right after a gateway
    round that its ratio is taken against, so the CPU LiteLLM keeps using after a
    round never lands in the direct, forwarder or gateway figures.
    """
    names = [n for n in targets if n != "litellm"]
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    errors = dict.fromkeys(targets, 0)
    for name, url in targets.items():  # warm every pool and code path first
        await load(url, 0.5, False, name)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            row, failed = await _round(name, targets[name], seconds)
            per_round[name].append(row)
            errors[name] += failed
    paired: list[dict[str, float]] = []
    if "litellm" in targets:
        for _ in range(max(1, rounds // 3)):
            row, failed = await _round("gateway", targets["gateway"], seconds)
            paired.append(row)
            errors["gateway"] += failed
            row, failed = await _round("litellm", targets["litellm"], seconds * 2)
            per_round["litellm"].append(row)
            errors["litellm"] += failed
    figures: dict[str, Any] = {}
    for name in targets:
        rows = per_round[name]
        figures[name] = {
            "rps": round(statistics.median(row["rps"] for row in rows), 1),
            "p50_ms": round(statistics.median(row["p50_ms"] for row in rows), 3),
            "errors": errors[name],
            "rounds": rows,
        }
    if paired:
        figures["gateway"]["paired_with_litellm"] = paired
    for name in names:
        result = await load(targets[name], max(0.75, seconds), True, name)
        figures[name]["stream_ttfb_p50_ms"] = _p50_ms(result["ttfb"])
        figures[name]["stream_errors"] = result["errors"]
    return figures


def _median_ratio(
    figures: dict[str, Any], a: str, b: str, key: str, rows_of_a: str = "rounds"
) -> float:
    """Median over rounds of ``a``'s figure divided by ``b``'s in the same round."""
    pairs = zip(figures[a][rows_of_a], figures[b]["rounds"], strict=True)
    return round(statistics.median(x[key] / y[key] for x, y in pairs), 3)


def _median_added_ratio(figures: dict[str, Any]) -> float | None:
    """Median over rounds of (gateway - direct) / (forwarder - direct) p50."""
    ratios = []
    rows = zip(
        figures["gateway"]["rounds"],
        figures["forwarder"]["rounds"],
        figures["direct"]["rounds"],
        strict=True,
    )
    for gw, fw, direct in rows:
        added_fw = fw["p50_ms"] - direct["p50_ms"]
        if added_fw > 0:
            ratios.append((gw["p50_ms"] - direct["p50_ms"]) / added_fw)
    return round(statistics.median(ratios), 3) if ratios else None


def summarize(figures: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The ratios the issue names, from the measured figures."""
    direct, forwarder, gateway = figures["direct"], figures["forwarder"], figures["gateway"]
    added_gw = gateway["p50_ms"] - direct["p50_ms"]
    added_fw = forwarder["p50_ms"] - direct["p50_ms"]
    ttfb_gw = gateway["stream_ttfb_p50_ms"] - direct["stream_ttfb_p50_ms"]
    ttfb_fw = forwarder["stream_ttfb_p50_ms"] - direct["stream_ttfb_p50_ms"]
    result: dict[str, Any] = {
        "bench": "gateway",
        "quick": quick,
        "concurrency": CONCURRENCY,
        "figures": figures,
        "throughput_ratio_to_forwarder": _median_ratio(figures, "gateway", "forwarder", "rps"),
        "throughput_ratio_to_direct": _median_ratio(figures, "gateway", "direct", "rps"),
        "forwarder_throughput_ratio_to_direct": _median_ratio(
            figures, "forwarder", "direct", "rps"
        ),
        "added_p50_ms": {"gateway": round(added_gw, 3), "forwarder": round(added_fw, 3)},
        "added_p50_ratio_to_forwarder": _median_added_ratio(figures),
        "stream_added_ttfb_p50_ms": {"gateway": round(ttfb_gw, 3), "forwarder": round(ttfb_fw, 3)},
        "litellm": "litellm" in figures,
    }
    if "gateway_traced" in figures:
        result["tracing_throughput_ratio"] = _median_ratio(
            figures, "gateway_traced", "gateway", "rps"
        )
        result["tracing_added_p50_ms"] = round(
            figures["gateway_traced"]["p50_ms"] - gateway["p50_ms"], 3
        )
        result["tracing_sample_ratio"] = GATEWAY_SAMPLE_RATIO
    if "gateway_apikey" in figures:
        result["client_auth_throughput_ratio"] = _median_ratio(
            figures, "gateway_apikey", "gateway", "rps"
        )
        result["client_auth_added_p50_ms"] = round(
            figures["gateway_apikey"]["p50_ms"] - gateway["p50_ms"], 3
        )
        result["client_auth_keys"] = CLIENT_KEYS
    if "gateway_traced_all" in figures:
        result["tracing_all_throughput_ratio"] = _median_ratio(
            figures, "gateway_traced_all", "gateway", "rps"
        )
    if "litellm" in figures:
        result["throughput_ratio_to_litellm"] = _median_ratio(
            figures, "gateway", "litellm", "rps", "paired_with_litellm"
        )
    result.update(gateway_workers.summary(figures, _median_ratio))
    for row in figures.values():
        row.pop("rounds", None)  # the per-round rows fed the medians above
        row.pop("paired_with_litellm", None)
    ratio = result["added_p50_ratio_to_forwarder"]
    result["targets_met"] = result["throughput_ratio_to_forwarder"] >= 0.85 and (
        ratio is not None and ratio <= 1.25
    )
    return result


async def main_async(quick: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="grid-bench-gateway-"))
    mock_port, fwd_port, gw_port, admin_port = (free_port() for _ in range(4))
    traced_port, traced_admin = free_port(), free_port()
    all_port, all_admin = free_port(), free_port()
    key_port, key_admin = free_port(), free_port()
    receiver = OtlpReceiver(keep_bodies=False)
    otlp = await receiver.start()
    upstream = f"127.0.0.1:{mock_port}"
    py = sys.executable
    traced_config = gateway_config(work / "traced", upstream, traced_port, traced_admin)
    all_config = gateway_config(work / "traced-all", upstream, all_port, all_admin)
    key_config = gateway_config(work / "apikey", upstream, key_port, key_admin, api_key=True)
    children = [
        spawn([py, "-m", "grid", "mock-provider", "--port", str(mock_port), "--model", MODEL,
               "--service-time-ms", "0", "--capacity", "4096"], work / "mock.log"),
        spawn([py, "-P", str(REPO / "bench" / "forwarder.py"), str(fwd_port), upstream],
              work / "forwarder.log"),
        spawn([py, "-m", "grid", "gateway", "--workers", "1", "--config",
               str(gateway_config(work, upstream, gw_port, admin_port))], work / "gateway.log"),
        spawn([py, "-m", "grid", "gateway", "--workers", "1", "--config", str(traced_config),
               "--otlp-endpoint", otlp], work / "gateway-traced.log"),
        spawn([py, "-m", "grid", "gateway", "--workers", "1", "--config", str(all_config),
               "--otlp-endpoint", otlp], work / "gateway-traced-all.log",
              {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}),
        spawn([py, "-m", "grid", "gateway", "--workers", "1", "--config", str(key_config)],
              work / "gateway-apikey.log"),
    ]  # fmt: skip
    targets = {
        "direct": f"http://{upstream}/v1/chat/completions",
        "forwarder": f"http://127.0.0.1:{fwd_port}/v1/chat/completions",
        "gateway": f"http://127.0.0.1:{gw_port}/v1/chat/completions",
        "gateway_apikey": f"http://127.0.0.1:{key_port}/v1/chat/completions",
        "gateway_traced": f"http://127.0.0.1:{traced_port}/v1/chat/completions",
        "gateway_traced_all": f"http://127.0.0.1:{all_port}/v1/chat/completions",
    }
    w2_port, w2_admin, fwd2_port = free_port(), free_port(), free_port()
    w2_config = gateway_config(work / "workers-2", upstream, w2_port, w2_admin)
    more, worker_targets = gateway_workers.spawn_targets(
        work, upstream, w2_config, w2_port, fwd2_port
    )
    children += more
    targets.update(worker_targets)
    lite: subprocess.Popen[bytes] | None = None
    skipped = ""
    if LITELLM.exists():
        lite_port = free_port()
        lite = spawn(
            [str(LITELLM), "--config", str(litellm_config(work, upstream)), "--host",
             "127.0.0.1", "--port", str(lite_port), "--num_workers", "1"],
            work / "litellm.log",
        )  # fmt: skip
        children.append(lite)
        targets["litellm"] = f"http://127.0.0.1:{lite_port}/v1/chat/completions"
    try:
        for name, url in list(targets.items()):
            child = lite if name == "litellm" else None
            try:
                await wait_http(
                    url, LITELLM_WAIT_S[quick] if child else 20.0, client_token(name), child
                )
            except (TimeoutError, RuntimeError):
                if child is None:
                    raise
                del targets[name]  # LiteLLM did not come up: compared without it
                skipped = "litellm did not start in time"
        figures = await measure(targets, rounds=6 if quick else 16, seconds=0.75 if quick else 2.0)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        await receiver.stop()
    result = summarize(figures, quick)
    result["otlp_bytes_exported"] = receiver.received_bytes
    if skipped:
        result["litellm_skipped"] = skipped
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, under a minute")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args.quick)), sort_keys=True))


if __name__ == "__main__":
    main()
