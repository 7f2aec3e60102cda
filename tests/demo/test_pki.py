"""The dev PKI produces certificates that complete a real mTLS handshake."""

import asyncio
import ssl
import stat
from pathlib import Path

from grid.demo.pki import write_dev_pki


async def test_site_certificates_complete_a_mutual_tls_handshake(tmp_path: Path) -> None:
    pki = write_dev_pki(tmp_path, ["east", "west"])
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    server_ctx.load_cert_chain(pki.sites["east"].cert, pki.sites["east"].key)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(pki.ca))
    client_ctx.load_cert_chain(pki.sites["west"].cert, pki.sites["west"].key)

    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_obj = writer.get_extra_info("ssl_object")
        seen.append(ssl_obj.getpeercert(binary_form=True))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        assert await reader.read() == b"ok"
        writer.close()
        await writer.wait_closed()
    from grid.core.trust import fingerprint_der

    assert fingerprint_der(seen[0]) == pki.sites["west"].fingerprint


def test_private_keys_are_owner_only(tmp_path: Path) -> None:
    pki = write_dev_pki(tmp_path, ["east"])
    for path in (pki.sites["east"].key, pki.swim_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(pki.swim_key.read_bytes()) == 32
