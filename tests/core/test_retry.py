"""The write retry policy: which failures are tried again, and the back-off law."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.retry import Backoff, Failure, WriteReason, classify
from grid.testing.faulty_store import FAULTS, RETRY_AFTER_S, fault_error

EXPECTED = {
    "403": (WriteReason.FORBIDDEN, False),
    "404": (WriteReason.NOT_FOUND, False),
    "409": (WriteReason.CONFLICT, True),
    "410": (WriteReason.GONE, False),
    "422": (WriteReason.INVALID, False),
    "429": (WriteReason.THROTTLED, True),
    "500": (WriteReason.SERVER_ERROR, True),
    "503": (WriteReason.UNAVAILABLE, True),
    "timeout": (WriteReason.TIMEOUT, True),
    "reset": (WriteReason.RESET, True),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_failure_has_its_reason_and_only_passing_ones_are_retried(fault: str) -> None:
    failure = classify(fault_error(fault))
    assert (failure.reason, failure.transient) == EXPECTED[fault]


def test_a_429_carries_its_retry_after() -> None:
    assert classify(fault_error("429")).retry_after_s == RETRY_AFTER_S


@given(
    attempt=st.integers(0, 40),
    unit=st.floats(0, 1, exclude_max=True),
    retry_after=st.none() | st.floats(0, 100),
)
def test_a_delay_is_jittered_under_its_cap_and_never_sooner_than_retry_after(
    attempt: int, unit: float, retry_after: float | None
) -> None:
    policy = Backoff(base_s=0.05, cap_s=2.0)
    ceiling = min(policy.cap_s, policy.base_s * 2**attempt)
    delay = policy.delay_s(attempt, unit, retry_after)
    assert delay >= (retry_after or 0.0)
    if retry_after is None or retry_after <= ceiling / 2:
        assert ceiling / 2 <= delay <= ceiling


@given(failures=st.integers(1, 200), unit=st.floats(0, 1, exclude_max=True))
def test_a_failed_round_waits_at_most_its_cap(failures: int, unit: float) -> None:
    policy = Backoff()
    assert 0 < policy.round_delay_s(failures, unit, None) <= policy.round_cap_s


def test_a_write_is_given_up_when_out_of_tries_permanent_or_asked_to_wait_past_the_cap() -> None:
    policy = Backoff(attempts=3, cap_s=2.0)
    throttled = Failure(WriteReason.THROTTLED, retry_after_s=0.5)
    assert policy.next_delay_s(0, throttled, 0.0) == 0.5
    assert policy.next_delay_s(2, throttled, 0.0) is None
    assert policy.next_delay_s(0, Failure(WriteReason.FORBIDDEN), 0.0) is None
    assert policy.next_delay_s(0, Failure(WriteReason.THROTTLED, retry_after_s=30), 0.0) is None
