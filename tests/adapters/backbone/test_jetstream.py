"""The JetStream backbone: durable whole batches, de-duplication, unavailability."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.js import api

from grid.adapters.backbone import BackboneUnavailable, PublishBatch, StoredRecord, stored_records
from grid.adapters.backbone.jetstream import JetStreamBackbone
from grid.errors import ProtocolError
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event
from grid.testing.nats_server import NatsServer
from grid.testing.poll import eventually

from .conftest import make_batch

pytestmark = pytest.mark.nats


async def _backbone(url: str, isolation: str, **kwargs: float) -> JetStreamBackbone:
    return await JetStreamBackbone.connect(
        url, stream=f"T_{isolation}", subject_prefix=f"t{isolation.lower()}", **kwargs
    )


def _batch(batch_id: str, n: int, route: str = "events", size: int = 16) -> PublishBatch:
    return make_batch(batch_id, n, route, size)


async def _all(backbone: JetStreamBackbone) -> list[tuple[str, str, StoredRecord]]:
    return [item async for item in backbone.records()]


async def test_published_batches_read_back_whole_and_in_order(
    nats_url: str, isolation: str
) -> None:
    backbone = await _backbone(nats_url, isolation)
    try:
        assert await _all(backbone) == []
        first = await backbone.publish(_batch("b1", 3))
        second = await backbone.publish(_batch("b2", 2, route="inventory"))
        assert (first.batch_id, first.accepted, first.duplicate) == ("b1", 3, False)
        assert (second.accepted, second.duplicate) == (2, False)
        got = await _all(backbone)
    finally:
        await backbone.close()
    assert [(b, r, rec.record_id) for b, r, rec in got] == [
        ("b1", "events", "b1-0"),
        ("b1", "events", "b1-1"),
        ("b1", "events", "b1-2"),
        ("b2", "inventory", "b2-0"),
        ("b2", "inventory", "b2-1"),
    ]
    assert Event.FromString(got[1][2].encoded).payload == bytes([1]) * 16


async def test_republished_batch_id_is_a_duplicate_stored_once(
    nats_url: str, isolation: str
) -> None:
    backbone = await _backbone(nats_url, isolation)
    try:
        await backbone.publish(_batch("same", 2))
        again = await backbone.publish(_batch("same", 2))
        got = await _all(backbone)
    finally:
        await backbone.close()
    assert again.duplicate is True
    assert again.accepted == 2
    assert len(got) == 2


async def test_batch_larger_than_max_payload_is_stored_in_parts_and_read_whole(
    nats_url: str, isolation: str
) -> None:
    backbone = await _backbone(nats_url, isolation)
    try:
        big = _batch("big", 40, size=64 * 1024)  # about 2.5 MiB against 1 MiB max_payload
        receipt = await backbone.publish(big)
        again = await backbone.publish(big)
        await backbone.publish(_batch("after", 1))
        got = await _all(backbone)
    finally:
        await backbone.close()
    assert receipt.accepted == 40 and not receipt.duplicate
    assert again.duplicate
    assert [rec for b, _, rec in got if b == "big"] == list(big.records)
    assert [b for b, _, _ in got].count("after") == 1


async def test_incomplete_multi_part_batch_is_never_read(nats_url: str, isolation: str) -> None:
    backbone = await _backbone(nats_url, isolation)
    try:
        # What a gateway killed between two parts leaves behind: part 0 of 2 only.
        js = backbone._nc.jetstream()
        frame = _batch("torn", 2).stamped
        headers = {"Nats-Msg-Id": "torn/0", "Grid-Batch-Part": "0/2"}
        await js.publish(f"t{isolation.lower()}.events", frame[:10], headers=headers)
        await backbone.publish(_batch("whole", 1))
        got = await _all(backbone)
    finally:
        await backbone.close()
    assert [b for b, _, _ in got] == ["whole"]


async def test_connect_to_nothing_is_backbone_unavailable() -> None:
    with pytest.raises(BackboneUnavailable) as info:
        await JetStreamBackbone.connect("nats://agent:s3cret@127.0.0.1:1", connect_timeout_s=0.5)
    assert "s3cret" not in str(info.value)


async def test_server_down_gives_fast_unavailable_then_recovers_with_data_kept(
    nats_server: NatsServer, nats_url: str, isolation: str
) -> None:
    backbone = await _backbone(nats_url, isolation, publish_timeout_s=1.0)
    try:
        await backbone.publish(_batch("before", 2))
        nats_server.kill()
        started = time.monotonic()
        refused = 0
        while time.monotonic() - started < 3.0 and refused < 3:
            with pytest.raises(BackboneUnavailable):
                await backbone.publish(_batch(f"down{refused}", 1))
            refused += 1
        assert refused == 3
        assert time.monotonic() - started < 3.5
        nats_server.start()

        async def published() -> bool:
            try:
                await backbone.publish(_batch("after", 1))
            except BackboneUnavailable:
                return False
            return True

        await eventually(published, "publish recovers", timeout_s=10, interval_s=0.05)
        got = await _all(backbone)
    finally:
        await backbone.close()
    batches = [b for b, _, _ in got]
    assert batches.count("before") == 2
    assert batches.count("after") == 1


def test_stored_batch_decodes_into_its_records() -> None:
    batch = _batch("b", 3, size=300)
    assert [r.record_id for r in stored_records("events", batch.stamped)] == ["b-0", "b-1", "b-2"]
    assert stored_records("events", b"") == []


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_stored_batch_decoder_returns_records_or_protocol_error(data: bytes) -> None:
    try:
        stored_records("events", data)
    except ProtocolError as exc:
        assert exc.code == "bad_frame"


async def test_existing_stream_keeps_operator_limits_and_memory_storage_is_refused(
    nats_url: str, isolation: str
) -> None:
    first = await _backbone(nats_url, isolation)
    try:
        js = first._nc.jetstream()
        info = await js.stream_info(f"T_{isolation}")
        await js.update_stream(info.config.evolve(max_age=3600.0))
        memory = api.StreamConfig(
            name=f"M_{isolation}",
            subjects=[f"m{isolation.lower()}.x"],
            storage=api.StorageType.MEMORY,
        )
        await js.add_stream(memory)
    finally:
        await first.close()
    again = await _backbone(nats_url, isolation)
    try:
        info = await again._nc.jetstream().stream_info(f"T_{isolation}")
        assert info.config.max_age == 3600.0
        assert info.config.storage == api.StorageType.FILE
    finally:
        await again.close()
    with pytest.raises(BackboneUnavailable, match="file storage is required"):
        await JetStreamBackbone.connect(
            nats_url, stream=f"M_{isolation}", subject_prefix=f"m{isolation.lower()}"
        )


@pytest.mark.parametrize("part", ["x/2", "2/2", "0/0", "0/100000"])
async def test_a_forged_part_header_is_a_protocol_error_for_readers(
    nats_url: str, isolation: str, part: str
) -> None:
    backbone = await _backbone(nats_url, isolation)
    try:
        js = backbone._nc.jetstream()
        headers = {"Nats-Msg-Id": "forged/0", "Grid-Batch-Part": part}
        await js.publish(f"t{isolation.lower()}.events", b"GRB1\x00", headers=headers)
        with pytest.raises(ProtocolError) as info:
            await _all(backbone)
    finally:
        await backbone.close()
    assert info.value.code == "bad_frame"
