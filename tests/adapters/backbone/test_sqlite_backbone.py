"""The embedded SQLite backbone: durable, whole-batch, de-duplicating, audit-readable."""

from __future__ import annotations

import asyncio
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
    original = backbone._write_group

    def spy(batches: list[PublishBatch]):  # type: ignore[no-untyped-def]
        seen.add(threading.current_thread().name)
        return original(batches)

    backbone._write_group = spy  # type: ignore[method-assign]
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


async def test_concurrent_batches_commit_together_and_each_gets_its_own_receipt(
    tmp_path: Path,
) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    groups: list[int] = []
    original = backbone._write_group

    def spy(batches: list[PublishBatch]):  # type: ignore[no-untyped-def]
        groups.append(len(batches))
        return original(batches)

    backbone._write_group = spy  # type: ignore[method-assign]
    try:
        await backbone.publish(_batch("b0", 1))
        # Hold the writer thread busy (once it is done with b0) while ten publishers
        # queue up behind it.
        entered, gate = threading.Event(), threading.Event()

        def hold() -> None:
            entered.set()
            gate.wait()

        busy = asyncio.ensure_future(backbone._db.run(hold))
        assert await asyncio.to_thread(entered.wait, 10)
        publishing = [
            asyncio.ensure_future(backbone.publish(_batch(f"b{i}", i))) for i in range(10)
        ]
        await asyncio.sleep(0)
        gate.set()
        await busy
        receipts = await asyncio.gather(*publishing)
        rows = await _all(backbone)
    finally:
        await backbone.close()
    # The ten that waited share one transaction.
    assert groups == [1, 10]
    assert [(r.batch_id, r.accepted, r.duplicate) for r in receipts] == [
        ("b0", 1, True),
        *((f"b{i}", i, False) for i in range(1, 10)),
    ]
    assert len(rows) == 1 + sum(range(1, 10))


async def test_a_bad_batch_in_a_group_fails_alone(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    bad = PublishBatch("bad", "events", None, 1)  # type: ignore[arg-type]
    try:
        outcomes = await asyncio.gather(
            backbone.publish(_batch("b1", 1)),
            backbone.publish(_batch("b2", 2)),
            backbone.publish(bad),
            backbone.publish(_batch("b3", 3)),
            return_exceptions=True,
        )
        rows = await _all(backbone)
    finally:
        await backbone.close()
    assert isinstance(outcomes[2], BackboneUnavailable)
    assert [o.accepted for o in outcomes if not isinstance(o, BaseException)] == [1, 2, 3]
    assert sorted({batch_id for batch_id, _, _ in rows}) == ["b1", "b2", "b3"]


async def test_a_publisher_that_gives_up_does_not_disturb_the_others(tmp_path: Path) -> None:
    backbone = await SqliteBackbone.open(tmp_path)
    try:
        first = asyncio.create_task(backbone.publish(_batch("b1", 1)))
        quitter = asyncio.create_task(backbone.publish(_batch("b2", 2)))
        stayer = asyncio.create_task(backbone.publish(_batch("b3", 3)))
        await asyncio.sleep(0)
        quitter.cancel()
        assert (await first).accepted == 1 and (await stayer).accepted == 3
        with pytest.raises(asyncio.CancelledError):
            await quitter
        rows = await _all(backbone)
    finally:
        await backbone.close()
    # The quitter's batch may or may not be stored; it was never acknowledged.
    assert {"b1", "b3"} <= {batch_id for batch_id, _, _ in rows}
