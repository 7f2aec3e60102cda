"""The load estimate: queues, the peak-sensitive latency average, and what it does to choices."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.routing.load import LoadBook, LoadSettings
from grid.core.routing.selection import RANDOM, ModelPlan, SelectionPolicy, select
from grid.errors import ValidationError
from grid.testing.selection_sim import SimMember


def test_a_slower_answer_moves_the_average_at_once_and_faster_ones_decay_it() -> None:
    book = LoadBook(LoadSettings(decay_s=2.0))
    book.answered("a", book.start("a", 0.0), 0.5)
    assert book.latency("a") == 0.5
    book.answered("a", book.start("a", 1.0), 3.0)  # 2 s: slower, taken whole
    assert book.latency("a") == 2.0
    book.answered("a", book.start("a", 4.0), 5.0)  # 1 s, one time constant later
    assert book.latency("a") == pytest.approx(1.0 + (2.0 - 1.0) * math.exp(-1.0))


def test_the_estimate_is_the_time_of_one_more_request() -> None:
    book = LoadBook()
    assert book.estimate("a") == 1.0  # nothing known: the queue alone
    book.answered("a", book.start("a", 0.0), 0.4)
    book.end("a")
    book.answered("b", book.start("b", 0.0), 1.2)
    book.start("a", 2.0)
    book.start("a", 2.0)
    book.take_report({"a": 3})  # one more than this gateway's own two
    assert book.estimate("a") == pytest.approx((2 + 1 + 1) * 0.4)
    assert book.estimate("b") == pytest.approx((1 + 1) * 1.2)
    assert book.latency("new") == pytest.approx((0.4 + 1.2) / 2)  # the mean of the known
    book.forget({"b"})
    assert book.latency("a") == pytest.approx(1.2)  # forgotten: costed at the mean of b


def test_the_others_queue_is_an_average_of_the_reports() -> None:
    book = LoadBook(LoadSettings(report_decay_s=10.0))
    book.take_report({"a": 12, "b": 0}, now=100.0)  # the first report is taken whole
    assert (book.queue("a"), book.queue("b")) == (12, 0)
    book.take_report({"a": 0, "b": 12}, now=101.0)  # one second later: a tenth of the way
    keep = math.exp(-1 / 10)
    assert book.queue("a") == pytest.approx(12 * keep)
    assert book.queue("b") == pytest.approx(12 * (1 - keep))
    for second in range(102, 160):
        book.take_report({"a": 0, "b": 12}, now=float(second))
    assert book.queue("a") < 0.1 and book.queue("b") > 11.9  # a lasting queue comes through
    book.take_report({"b": 3}, now=160.0)
    assert book.queue("a") == 0  # no report: nothing added
    whole = LoadBook(LoadSettings(report_decay_s=0.0))
    whole.take_report({"a": 12}, now=0.0)
    whole.take_report({"a": 2}, now=0.5)
    assert whole.queue("a") == 2


@given(
    st.lists(st.tuples(st.floats(0, 30), st.floats(0, 50)), min_size=1, max_size=30),
    st.floats(0, 600),
)
def test_the_average_of_the_reports_stays_within_them(
    reports: list[tuple[float, float]], decay_s: float
) -> None:
    book = LoadBook(LoadSettings(report_decay_s=decay_s))
    now, seen = 0.0, []
    for gap, queued in reports:
        now += gap
        book.take_report({"a": queued}, now)
        seen.append(queued)
        assert min(seen) - 1e-9 <= book.queue("a") <= max(seen) + 1e-9


def test_below_the_floor_the_queue_decides_not_a_slow_first_answer() -> None:
    book = LoadBook()
    for i in range(8):  # b answers in a millisecond, again and again
        book.answered("b", book.start("b", float(i)), i + 0.001)
        book.end("b")
    book.answered("a", book.start("a", 9.0), 9.02)  # a's first answer set up a connection
    book.end("a")
    book.take_report({"b": 12})
    assert book.estimate("a") < book.estimate("b")
    assert LoadBook(LoadSettings(floor_s=0.0)).estimate("x") == 1.0
    unfloored = LoadBook(LoadSettings(floor_s=0.0))
    unfloored.answered("b", unfloored.start("b", 0.0), 0.001)
    unfloored.answered("a", unfloored.start("a", 0.0), 0.02)
    unfloored.take_report({"b": 12})
    assert unfloored.estimate("a") > unfloored.estimate("b")  # what the floor prevents


@given(
    st.lists(
        st.tuples(st.floats(0, 100), st.floats(0, 30)),  # (gap before the attempt, wait)
        min_size=1,
        max_size=40,
    ),
    st.floats(0.01, 60),
)
def test_the_average_stays_within_the_samples_and_never_below_the_last(
    samples: list[tuple[float, float]], decay_s: float
) -> None:
    book = LoadBook(LoadSettings(decay_s=decay_s))
    now = 0.0
    waits = []
    for gap, wait in samples:
        now += gap
        book.answered("a", book.start("a", now), now + wait)
        book.end("a")
        now += wait
        waits.append(wait)
        assert min(waits) - 1e-9 <= book.latency("a") <= max(waits) + 1e-9
        assert book.latency("a") >= wait - 1e-9  # the peak: never under the latest answer
    assert book.in_flight == {}


@pytest.mark.parametrize("decay_s", [0.0, -1.0, 4000.0])
def test_bad_settings_are_refused(decay_s: float) -> None:
    with pytest.raises(ValidationError):
        LoadSettings(decay_s=decay_s)
    with pytest.raises(ValidationError):
        LoadSettings(floor_s=decay_s - 1 if decay_s <= 0 else 61.0)


def _slow_share(estimate: str, seed: int) -> float:
    """Share of arrivals sent to the provider that answers 3x slower, in a virtual-time
    simulation of one gateway choosing between two single-server providers."""
    members = [SimMember("fast"), SimMember("slow")]
    plan = ModelPlan(members, SelectionPolicy(RANDOM, load_aware=True))
    service = {"fast": 0.1, "slow": 0.3}
    book, rng = LoadBook(), random.Random(seed)
    free_at = {"fast": 0.0, "slow": 0.0}
    pending: list[tuple[float, str, float]] = []  # (answer time, provider, start)
    now, sent = 0.0, {"fast": 0, "slow": 0}
    for _ in range(4000):
        now += rng.expovariate(0.8 * (1 / 0.1 + 1 / 0.3))
        for done in [p for p in pending if p[0] <= now]:
            pending.remove(done)
            book.answered(done[1], done[2], done[0])
            book.end(done[1])

        def load(c: SimMember) -> float:
            return book.estimate(c.stable_id) if estimate == "latency" else book.queue(c.stable_id)

        (chosen,) = select(plan, None, 1, rng, (), load)
        name = chosen.stable_id
        sent[name] += 1
        start = book.start(name, now)
        free_at[name] = max(free_at[name], now) + rng.expovariate(1 / service[name])
        pending.append((free_at[name], name, start))
    return sent["slow"] / 4000


def test_latency_sends_less_to_a_slow_provider_than_counting_the_queue_alone() -> None:
    seed = 20261206
    print(f"seed {seed}")
    by_latency, by_queue = _slow_share("latency", seed), _slow_share("queue", seed)
    # Serving in proportion to speed gives the slow one a quarter; counting the queue
    # alone overshoots it, the latency-weighted estimate comes closer.
    assert by_latency < by_queue
    assert abs(by_latency - 0.25) < abs(by_queue - 0.25)
