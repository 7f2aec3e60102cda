"""Fixtures for backbone adapter tests: one local ``nats-server -js`` per test session.

The server listens on 127.0.0.1 with a free port and a temporary file store; the
fixture object can stop, kill and restart it on the same port and store, which
is how tests take the backbone away mid-stream. Each test gets fresh stream and
bucket names, so tests sharing the server do not see each other's data.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from grid.adapters.backbone import PublishBatch
from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.testing.nats_server import NatsServer


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A running nats-server with JetStream; restarted if a test left it stopped."""
    server = NatsServer(tmp_path_factory.mktemp("nats") / "store")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> Iterator[str]:
    """The server URL; the server is running at the start and end of every test."""
    if not nats_server.running:
        nats_server.start()
    yield nats_server.url
    if not nats_server.running:
        nats_server.start()


@pytest.fixture
def isolation() -> str:
    """A token unique to the test, for stream, subject and bucket names."""
    return uuid.uuid4().hex[:12].upper()


def make_batch(batch_id: str, n: int, route: str = "events", size: int = 16) -> PublishBatch:
    """A stamped batch of ``n`` records ``{batch_id}-{i}``, as the gateway publishes it.

    Event ``i`` carries a payload of ``size`` bytes of value ``i % 251``.
    """
    batch: pb.EventBatch | pb.InventoryBatch
    if route == "events":
        batch = pb.EventBatch(protocol_version=1, schema_version=1)
        for i in range(n):
            batch.events.add(record_id=f"{batch_id}-{i}", type="t", payload=bytes([i % 251]) * size)
    else:
        batch = pb.InventoryBatch(protocol_version=1, schema_version=1)
        for i in range(n):
            batch.records.add(record_id=f"{batch_id}-{i}", type="t")
    return PublishBatch(batch_id, route, batch.SerializeToString(), n)  # type: ignore[arg-type]
