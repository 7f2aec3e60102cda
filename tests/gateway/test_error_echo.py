"""Issue 26.8: a provider echoing the injected credential in an error hands it to no client."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import aiohttp
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from grid.gateway.redaction import MASK, Masker
from grid.testing.edge_rig import TOKEN, chat, edge_rig


async def echo(request: web.Request) -> web.StreamResponse:
    auth = request.headers["Authorization"]
    token = auth.removeprefix("Bearer ").encode()
    body = json.dumps({"error": f"busy; you sent {auth}", "b64": base64.b64encode(token).decode()})
    return web.Response(
        status=503, text=body, content_type="application/json", headers={"x-echo": auth}
    )


async def echo_gzip(request: web.Request) -> web.StreamResponse:
    data = gzip.compress(f"denied: {request.headers['Authorization']}".encode())
    return web.Response(status=401, body=data, headers={"Content-Encoding": "gzip"})


async def echo_long(request: web.Request) -> web.StreamResponse:
    # The credential straddles the relay limit: only its start fits.
    return web.Response(status=500, body=b"x" * (64 * 1024 - 8) + TOKEN.encode() * 3)


async def _post(public: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as http,
        http.post(f"http://{public}/v1/chat/completions", json=chat(), headers=headers) as r,
    ):
        return r.status, await r.read(), dict(r.headers)


def _leaks(data: bytes) -> bool:
    forms = Masker.of(TOKEN).forms
    return any(f in data for f in forms) or TOKEN[:8].encode() in data


async def test_a_503_echoing_the_credential_is_relayed_masked(tmp_path: Path) -> None:
    async with edge_rig(tmp_path, echo) as rig:
        status, body, headers = await _post(rig.public)
    assert rig.provider.seen[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert status == 503
    assert MASK in body and not _leaks(body)
    assert "x-echo" not in {k.lower() for k in headers}
    assert json.loads(body)["error"] == "busy; you sent Bearer [redacted]"


async def test_a_compressed_echo_is_decoded_and_masked(tmp_path: Path) -> None:
    async with edge_rig(tmp_path, echo_gzip) as rig:
        status, body, headers = await _post(rig.public, **{"Accept-Encoding": "gzip"})
    assert status == 401 and "content-encoding" not in {k.lower() for k in headers}
    assert body == b"denied: Bearer [redacted]"


async def test_a_long_echo_is_cut_and_loses_a_trailing_start_of_the_credential(
    tmp_path: Path,
) -> None:
    async with edge_rig(tmp_path, echo_long) as rig:
        status, body, _ = await _post(rig.public)
    assert status == 500 and not _leaks(body[-len(TOKEN) - len(MASK) :])
    assert len(body) <= 64 * 1024 + len(MASK)


@given(st.binary(max_size=64), st.binary(max_size=64), st.integers(0, 200))
def test_no_cut_leaves_a_prefix_of_the_secret_at_the_end(
    before: bytes, after: bytes, cut: int
) -> None:
    data = (before + TOKEN.encode() + after)[:cut]
    masked = Masker.of(TOKEN).body(data, cut=True)
    assert TOKEN.encode() not in masked
    assert not any(masked.endswith(TOKEN.encode()[:n]) for n in range(4, len(TOKEN)))
