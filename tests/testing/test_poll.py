"""`eventually` returns the first truthy value, awaits async checks, and fails naming the wait."""

from __future__ import annotations

import pytest

from grid.testing.poll import eventually


async def test_it_returns_the_first_truthy_value_of_a_plain_check() -> None:
    values = iter([None, 0, "", "ready", "later"])
    assert await eventually(lambda: next(values), "ready", interval_s=0) == "ready"


async def test_it_awaits_an_async_check() -> None:
    calls: list[int] = []

    async def check() -> int | None:
        calls.append(1)
        return len(calls) if len(calls) == 3 else None

    assert await eventually(check, "three calls", interval_s=0) == 3


async def test_at_the_deadline_it_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"the door opens: not within 0.05 s \(last seen: 0\)"):
        await eventually(lambda: 0, "the door opens", timeout_s=0.05)


async def test_an_exception_from_the_check_ends_the_wait_at_once() -> None:
    def check() -> bool:
        raise ValueError("gone for good")

    with pytest.raises(ValueError, match="gone for good"):
        await eventually(check, "never", timeout_s=60)


def test_eventually_blocking_returns_the_first_truthy_value_or_names_what_it_awaited() -> None:
    from grid.testing.poll import eventually_blocking

    values = iter([0, None, "ready"])
    assert eventually_blocking(lambda: next(values), "ready", interval_s=0) == "ready"
    with pytest.raises(AssertionError, match=r"never: not within 0\.05 s"):
        eventually_blocking(lambda: False, "never", timeout_s=0.05, interval_s=0.01)
