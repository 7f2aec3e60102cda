"""`WatchPoll`: one poll for a store's watchers, and no read while the files are unchanged."""

from __future__ import annotations

from pathlib import Path

from grid.adapters.store.watch_poll import SETTLED_S, Heads, WatchPoll, file_signature
from grid.errors import GridError
from grid.testing.poll import eventually


class Files:
    """A store's heads and file signature, as a test sets them."""

    def __init__(self) -> None:
        self.newest: dict[str, int] = {}
        self.compacted = 0
        self.mtime_s = 100.0
        self.size = 4096
        self.wall_s = 200.0
        self.fail = False
        self.woken: list[str] = []

    async def read(self, kinds: tuple[str, ...]) -> Heads:
        if self.fail:
            raise GridError("disk I/O error", code="store_unavailable")
        return (
            {k: self.newest.get(k, 0) for k in kinds},
            max(self.newest.values(), default=0),
            (self.compacted),
        )

    def signature(self) -> tuple[int, ...]:
        return (self.size, 1, int(self.mtime_s * 1e9))

    def poll(self) -> WatchPoll:
        return WatchPoll(
            0.001, self.read, self.woken.append, signature=self.signature, wall=lambda: self.wall_s
        )


async def test_a_kind_with_news_is_woken_and_the_others_are_not() -> None:
    files = Files()
    poll = files.poll()
    with poll.waiting("GridSite", 5), poll.waiting("Secret", 3):
        files.newest = {"GridSite": 6, "Secret": 3}
        files.size += 1
        await eventually(lambda: "GridSite" in files.woken, "the site's watchers woken")
        assert "Secret" not in files.woken
    await poll.close()


async def test_an_unchanged_settled_file_is_not_read_and_a_change_is() -> None:
    files = Files()
    poll = files.poll()
    with poll.waiting("GridSite", 5):
        await eventually(lambda: poll.ticks >= 20, "20 ticks")
        assert poll.reads == 1  # the first look; the file was written long before it
        files.newest = {"GridSite": 9}
        files.mtime_s = files.wall_s - 1.0
        await eventually(lambda: files.woken == ["GridSite"], "a write by another process")
        assert poll.reads == 2
    await poll.close()


async def test_a_file_written_just_before_the_look_is_read_again_until_it_settles() -> None:
    """The kernel's coarse clock can give a second write the first one's time: a
    signature taken within `SETTLED_S` of the file's time proves nothing."""
    files = Files()
    files.mtime_s = files.wall_s - SETTLED_S / 2
    poll = files.poll()
    with poll.waiting("GridSite", 5):
        await eventually(lambda: poll.reads >= 10, "ten reads of an unsettled file")
        # A write in the same clock tick: the same size, inode and time.
        files.newest = {"GridSite": 6}
        await eventually(lambda: "GridSite" in files.woken, "the write is found")
        files.wall_s += 1.0  # the file's time is now well in the past: settled
        await eventually(lambda: poll.ticks >= poll.reads + 10, "polls without reads")
    await poll.close()


async def test_a_trim_past_a_watcher_wakes_it_and_a_failed_read_wakes_every_kind() -> None:
    files = Files()
    poll = files.poll()
    with poll.waiting("GridSite", 5), poll.waiting("Secret", 8):
        files.compacted, files.size = 6, files.size + 1
        await eventually(lambda: files.woken == ["GridSite"], "the trimmed-past watcher")
        files.woken.clear()
        files.fail, files.size = True, files.size + 1
        await eventually(lambda: {"GridSite", "Secret"} <= set(files.woken), "every kind woken")
    await poll.close()


async def test_the_task_runs_only_while_someone_waits() -> None:
    files = Files()
    poll = files.poll()
    with poll.waiting("GridSite", 5):
        await eventually(lambda: poll.ticks >= 2, "ticks")
    await eventually(lambda: poll._task is not None and poll._task.done(), "the task ended")
    with poll.waiting("Secret", 1):
        ticks = poll.ticks
        await eventually(lambda: poll.ticks > ticks, "a new waiter starts it again")
    await poll.close()


def test_a_file_signature_names_size_inode_and_time_and_none_when_missing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    assert file_signature(path) is None
    path.write_bytes(b"x")
    first = file_signature(path)
    assert first is not None and first[0] == 1 and len(first) == 3
    path.write_bytes(b"xy")
    assert file_signature(path) != first
    assert file_signature(path, tmp_path / "store.db-wal") is None
