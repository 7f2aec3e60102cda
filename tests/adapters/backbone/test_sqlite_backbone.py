"""The embedded SQLite backbone: durable, whole-batch, de-duplicating, audit-readable."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from grid.adapters.backbone import BackboneUnavailable, PublishBatch, StoredRecord
from grid.adapters.backbone.sqlite import BACKBONE_FILE, SqliteBackbone
from grid.proto_gen.grid.telemetry.v1.telemetry_pb2 import Event

from .conftest import make_batch


def _batch(batch_id: str, n: int, route: str = "events") -> PublishBatch:
    return make_batch(batch_id, n, route)


async def _all(backbone: SqliteBackbone) -> list[tuple[str, str, StoredRecord]]:
    return [item async for item in backbone.records()]


async def test_wal_mode_and_synchronous_full(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        assert await backbone.pragma("journal_mode") == "wal"
        assert await backbone.pragma("synchronous") == 2  # FULL
    finally:
        await backbone.close()


async def test_published_batches_survive_reopen_in_order(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    receipt = await backbone.publish(_batch("b1", 3))
    await backbone.publish(_batch("b2", 2, "inventory"))
    await backbone.close()
    assert (receipt.batch_id, receipt.accepted, receipt.duplicate) == ("b1", 3, False)

    reopened = await SqliteBackbone.open(tmp_path)
    try:
        rows = await _all(reopened)
    finally:
        await reopened.close()
    assert [(b, route, r.record_id) for b, route, r in rows] == [
        ("b1", "events", "b1-0"),
        ("b1", "events", "b1-1"),
        ("b1", "events", "b1-2"),
        ("b2", "inventory", "b2-0"),
        ("b2", "inventory", "b2-1"),
    ]
    assert Event.FromString(rows[1][2].encoded).payload == bytes([1]) * 16


async def test_records_pages_through_many_rows(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        for i in range(3):
            await backbone.publish(_batch(f"b{i}", 400))
        assert len(await _all(backbone)) == 1200
    finally:
        await backbone.close()


async def test_republishing_a_batch_id_stores_nothing_and_says_duplicate(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        await backbone.publish(_batch("b1", 2))
        again = await backbone.publish(_batch("b1", 2))
        assert again.duplicate and again.accepted == 2
        assert len(await _all(backbone)) == 2
    finally:
        await backbone.close()


async def test_a_failing_batch_is_stored_not_at_all(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        bad = PublishBatch("b1", "events", None, 1)  # type: ignore[arg-type]
        with pytest.raises(BackboneUnavailable):
            await backbone.publish(bad)
        assert await _all(backbone) == []
        assert (await backbone.publish(_batch("b2", 1))).accepted == 1
    finally:
        await backbone.close()


async def test_writes_happen_in_one_dedicated_thread_off_the_event_loop(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    seen: set[str] = set()
    original = backbone._write

    def spy(batch: PublishBatch):  # type: ignore[no-untyped-def]
        seen.add(threading.current_thread().name)
        return original(batch)

    backbone._write = spy  # type: ignore[method-assign]
    try:
        for i in range(5):
            await backbone.publish(_batch(f"b{i}", 1))
    finally:
        await backbone.close()
    assert len(seen) == 1 and threading.current_thread().name not in seen


async def test_publish_after_close_is_backbone_unavailable(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    await backbone.close()
    with pytest.raises(BackboneUnavailable):
        await backbone.publish(_batch("b1", 1))


async def test_an_unopenable_file_is_backbone_unavailable(tmp_path: Path) -> None:
    (tmp_path / BACKBONE_FILE).write_bytes(b"this is not a database" * 100)
    with pytest.raises(BackboneUnavailable):
        await SqliteBackbone.open(tmp_path)


async def test_another_process_reads_committed_records_while_the_writer_is_open(
    tmp_path: Path,
) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        await backbone.publish(_batch("b1", 2))
        with sqlite3.connect(tmp_path / BACKBONE_FILE) as reader:
            assert reader.execute("SELECT accepted FROM batches").fetchall() == [(2,)]
    finally:
        await backbone.close()


async def test_each_batch_is_one_row_holding_the_stamped_bytes(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    batch = _batch("b1", 3)
    try:
        await backbone.publish(batch)
    finally:
        await backbone.close()
    with sqlite3.connect(tmp_path / BACKBONE_FILE) as reader:
        rows = reader.execute("SELECT batch_id, route, accepted, stamped FROM batches").fetchall()
    assert rows == [("b1", "events", 3, batch.stamped)]


async def test_a_file_in_another_layout_is_refused_not_mixed(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / BACKBONE_FILE) as old:
        old.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, encoded BLOB)")
    with pytest.raises(BackboneUnavailable, match="layout"):
        await SqliteBackbone.open(tmp_path)


async def test_a_second_open_of_the_file_reads_the_first_ones_batches(tmp_path: Path) -> None:
    opened = [await SqliteBackbone.open(tmp_path) for _ in range(2)]
    try:
        await opened[0].publish(_batch("b1", 1))
        assert [r.record_id for _, _, r in await _all(opened[1])] == ["b1-0"]
    finally:
        for backbone in opened:
            await backbone.close()
