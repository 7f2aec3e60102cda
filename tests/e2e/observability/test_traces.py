"""Traces from a real operator and real gateways, received by a real OTLP/HTTP receiver.

One poll-mode site (`DemoMesh`: an operator, its mock providers) and two
``grid gateway`` processes export to an `OtlpReceiver` in this test, which
decodes every body with ``opentelemetry-proto``:

* gateway F runs a copy of the operator's praxis.yaml in which the first
  candidate's cluster points at a closed port and the second at a recording
  upstream, so one request fails over exactly once;
* gateway P polls the operator and reports its ingests (feedback), and
  injects the demo's API credential on a request to the API model.

The test asserts the span tree of the failed-over request (SPEC-DECISIONS §17),
that ``traceparent`` reached the provider from the answering attempt's span,
the operator's spans (render round, provider checks, feedback ingest, status
writes), and then scans every exported byte for the test's secrets: the
client's own key, the provider credential, the site's private key, the SWIM
key, the prompt and the completion.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from grid.core.overlay import canonical_digest
from grid.demo.mesh import DemoMesh
from grid.demo.plan import API_MODEL, MODEL
from grid.demo.ports import free_port
from grid.testing.gateway import GatewayProcess, Upstream, spawn_gateway
from grid.testing.otlp import OtlpReceiver, ReceivedSpan, draw_tree
from grid.testing.poll import eventually

pytestmark = [pytest.mark.e2e]

TENANT = "globex"
"""The demo tenant whose client key (the demo runs ``clientAuth: apiKey``) the test sends."""
PROMPT = f"prompt-secret-{secrets.token_hex(12)}"
TREE_KEYS = (
    "gen_ai.request.model",
    "grid.tenant",
    "grid.overlay.revision",
    "grid.selection.group",
    "grid.selection.mode",
    "grid.cluster",
    "grid.attempt",
    "grid.outcome",
    "http.response.status_code",
)


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    otlp = OtlpReceiver()
    await otlp.start()
    yield otlp
    await otlp.stop()


@pytest_asyncio.fixture
async def mesh(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[DemoMesh]:
    # Every child process inherits these: the standard variables, nothing Grid-specific.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    # Every request, not the gateway's default share: the standard sampler variable.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    # Ask the instrumentations to copy every header: credentials must still not leak.
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", ".*")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST", ".*")
    demo = DemoMesh(tmp_path / "mesh", ["east"], gateways=False, signal_transport="poll")
    try:
        await demo.prepare()
        await demo.start()
        await demo.wait_ready()
        yield demo
    finally:
        await demo.stop()


def _gateway_config(
    mesh: DemoMesh, work: Path, recorder: str | None
) -> tuple[Path, str, str, dict[str, Any]]:
    """A copy of east's praxis.yaml on fresh ports, reading a frozen copy of the overlay.

    With ``recorder`` (an address), the copy's first candidate of the model is sent
    where nothing listens and its second to ``recorder``: both are read from the
    copy itself, since the live overlay's order moves with the providers' load."""
    site = mesh.plan.sites["east"]
    document = yaml.safe_load(site.praxis.read_text())
    public, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    document["listeners"][0]["address"] = public
    document["admin"]["address"] = admin
    work.mkdir(parents=True, exist_ok=True)
    overlay = work / "grid-overlay.json"
    shutil.copy(site.overlay_dir / "grid-overlay.json", overlay)
    filters = document["filter_chains"][0]["filters"]
    route = next(f for f in filters if f["filter"] == "intelligent_route")
    route["overlay_file"] = str(overlay)
    broken = recording = None
    if recorder is not None:
        broken, recording = _model_clusters(json.loads(overlay.read_text()))[:2]
        # First viable first, so the broken rank 0 is tried first and fails over once.
        _pin_deterministic(overlay, route)
    clusters = next(f for f in filters if f["filter"] == "load_balancer")["clusters"]
    for cluster in clusters:
        if cluster["name"] == broken:
            cluster["endpoints"] = [f"127.0.0.1:{free_port()}"]  # nothing listens there
        if cluster["name"] == recording:
            cluster["endpoints"] = [recorder]
    config = work / "praxis.yaml"
    config.write_text(yaml.safe_dump(document))
    return config, public, admin, json.loads(overlay.read_text())


def _pin_deterministic(overlay: Path, route: dict[str, Any]) -> None:
    """Re-sign the overlay copy (and the route filter) under ``selection_policy: deterministic``."""
    envelope = json.loads(overlay.read_text())
    body = envelope["overlay"]
    body["selection_policy"] = "deterministic"
    body.pop("selection_load_aware", None)
    digest = canonical_digest(body)
    envelope["revision"]["value"] = envelope["content_digest"]["value"] = digest
    overlay.write_text(json.dumps(envelope))
    route["selection_policy"] = "deterministic"
    route.pop("selection_load_aware", None)


def _two_model_clusters(overlay_dir: Path) -> tuple[str, str] | None:
    """The first two candidate clusters of the model, once the overlay names two."""
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        clusters = _model_clusters(json.loads((overlay_dir / "grid-overlay.json").read_text()))
        if len(clusters) >= 2:
            return clusters[0], clusters[1]
    return None


def _model_clusters(envelope: dict[str, Any]) -> list[str]:
    candidates = envelope["overlay"]["candidates"]
    return [c["cluster"] for c in candidates if c["name"] == MODEL]


async def _chat(http: aiohttp.ClientSession, gateway: GatewayProcess, model: str, key: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"Authorization": f"Bearer {key}"}
    async with http.post(gateway.url(), json=body, headers=headers) as response:
        text = await response.text()
        assert response.status == 200, text
        return text


def _secrets(mesh: DemoMesh, praxis: Path) -> dict[str, bytes]:
    assert mesh.pki is not None
    document = yaml.safe_load(praxis.read_text())
    inject = next(
        f for f in document["filter_chains"][0]["filters"] if f["filter"] == "credential_inject"
    )
    credential = Path(inject["credentials"][0]["file"]).read_bytes().strip()
    key_pem = Path(mesh.pki.sites["east"].key).read_bytes()
    key_body = b"".join(line for line in key_pem.splitlines() if b"-----" not in line)
    swim_key = (mesh.root / "pki" / "swim.key").read_bytes()
    return {
        "client key": mesh.api_keys[TENANT].encode(),
        "provider credential": credential,
        "site private key": key_body[:48],
        "swim key": swim_key,
        "swim key (hex)": swim_key.hex().encode(),
        "swim key (base64)": base64.b64encode(swim_key),
        "prompt": PROMPT.encode(),
    }


def _request_root(receiver: OtlpReceiver) -> ReceivedSpan | None:
    roots = [s for s in receiver.spans if s.service == "grid-gateway" and s.kind == "server"]
    return roots[0] if roots else None


async def test_a_failed_over_request_and_the_operator_leave_credential_free_traces(
    mesh: DemoMesh, receiver: OtlpReceiver, upstreams: Any, tmp_path: Path
) -> None:
    site = mesh.plan.sites["east"]
    recorder: Upstream = await upstreams("second")
    # /readyz holds once the first overlay is out; the second provider's check may land later.
    await eventually(lambda: _two_model_clusters(site.overlay_dir), "two candidates of the model")
    config, public, admin, envelope = _gateway_config(mesh, tmp_path / "f", recorder.address)
    first, second = _model_clusters(envelope)[:2]  # the copy the gateway really reads
    failover = await spawn_gateway(config, public, admin, "--otlp-endpoint", receiver.endpoint)
    assert mesh.pki is not None
    certs = mesh.pki.sites["east"]
    p_config, p_public, p_admin, _ = _gateway_config(mesh, tmp_path / "p", None)
    poller = await spawn_gateway(
        p_config, p_public, p_admin,
        "--operator", f"127.0.0.1:{site.signals_port}",
        "--cert", str(certs.cert), "--key", str(certs.key), "--ca", str(mesh.pki.ca),
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            key = mesh.api_keys[TENANT]
            answers = [await _chat(http, failover, MODEL, key)]
            root = await eventually(lambda: _request_root(receiver), "the request's span")
            answers.append(await _chat(http, poller, API_MODEL, key))
        print("\n" + draw_tree(receiver.spans, root, TREE_KEYS))
        assert root.attributes["http.response.status_code"] == 200
        assert root.attributes["url.path"] == "/v1/chat/completions"
        assert len(recorder.seen) == 1
        _assert_failed_over_once(receiver, root, first, second, envelope, recorder)
        await eventually(lambda: _operator_spans(receiver), "the operator's spans", timeout_s=30)
    finally:
        await failover.stop()
        await poller.stop()
    exported = b"".join(receiver.bodies)
    assert exported
    for what, secret in _secrets(mesh, config).items():
        assert secret not in exported, f"the {what} reached an exported span"
    # The mock provider's completion (it quotes the prompt) through the polling gateway.
    completion = json.loads(answers[1])["choices"][0]["message"]["content"]
    assert PROMPT in completion
    assert completion.encode() not in exported, "a completion reached an exported span"


def _assert_failed_over_once(
    receiver: OtlpReceiver,
    root: ReceivedSpan,
    first: str,
    second: str,
    envelope: dict[str, Any],
    recorder: Upstream,
) -> None:
    """§17's tree: the decision on the server span, one client span per attempt,
    the failover as an event, and the answering attempt's traceparent at the provider."""
    assert root.attributes["gen_ai.request.model"] == MODEL
    assert root.attributes["grid.tenant"] == TENANT
    assert root.attributes["grid.overlay.revision"] == envelope["revision"]["value"]
    assert root.attributes["grid.selection.group"] == 0
    assert root.attributes["grid.selection.mode"] == "deterministic"
    attempts = [s for s in receiver.children(root) if s.name == "grid.attempt"]
    assert [(s.kind, s.attributes["grid.cluster"]) for s in attempts] == [
        ("client", first),
        ("client", second),
    ]
    assert [s.attributes["grid.attempt"] for s in attempts] == [0, 1]
    assert [s.attributes["grid.outcome"] for s in attempts] == ["connect_failed", "ok"]
    assert attempts[1].attributes["http.response.status_code"] == 200
    assert [(n, a["grid.cluster"]) for n, a in root.events] == [("failover", first)]
    traceparent = recorder.seen[0]["traceparent"]
    _version, trace_id, parent_id, _flags = traceparent.split("-")
    assert (trace_id, parent_id) == (attempts[1].trace_id, attempts[1].span_id)


def _operator_spans(receiver: OtlpReceiver) -> bool:
    service = "grid-operator"
    rounds = [
        s
        for s in receiver.named("grid.render_round", service)
        if MODEL in s.attributes.get("grid.render.models", [])
    ]
    if not rounds:
        return False
    latest = rounds[-1]
    assert latest.attributes["grid.render.candidates"] > 0
    assert len(latest.attributes["grid.overlay.revision"]) == 64
    assert latest.attributes["grid.render.duration_ms"] >= 0
    checks = receiver.named("grid.provider.health_check", service)
    scrapes = receiver.named("grid.provider.scrape", service)
    ingests = [
        s
        for s in receiver.named("grid.feedback.ingest", service)
        if s.attributes.get("grid.outcome") == "ok"
    ]
    writes = receiver.named("grid.status_write", service)
    if not (checks and scrapes and ingests and writes):
        return False
    assert {s.attributes["grid.provider"] for s in checks} >= {"vllm-east-a", "vllm-east-b"}
    # The aiohttp client instrumentation adds the HTTP request under each check.
    assert any(c.kind == "client" for c in receiver.children(checks[-1]))
    assert {s.attributes["grid.kind"] for s in writes} >= {"GridNetwork"}
    return True
