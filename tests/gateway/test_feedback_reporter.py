"""The gateway's feedback reporter against a scripted transport, in virtual time."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

import pytest

from grid.core.signals.feedback import U64_MAX, Report, parse_report
from grid.gateway.feedback import (
    Delivery,
    FeedbackReporter,
    ReporterSettings,
    default_reporter_id,
)

Answer = tuple[int, Mapping[str, str]] | None


class Scripted:
    """A transport answering from a script; the last answer repeats."""

    def __init__(self, *answers: Answer | str) -> None:
        self.answers = list(answers)
        self.sent: list[Report] = []

    async def post(self, headers: Mapping[str, str]) -> Answer:
        report = parse_report(headers.items())
        self.sent.append(report)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "echo":
            return 204, {
                "X-Grid-Ingest-Epoch": str(report.epoch),
                "X-Grid-Ingest-Sequence": str(report.sequence),
            }
        assert not isinstance(answer, str)
        return answer


class Sleeps:
    """A virtual sleep that records each delay."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def reporter(transport: Scripted, **kwargs: object) -> FeedbackReporter:
    return FeedbackReporter(
        transport,
        reporter_id="gw-1",
        replica="east-0",
        epoch=100,
        rng=random.Random(3),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_a_report_echoed_exactly_is_acknowledged() -> None:
    transport = Scripted("echo")
    r = reporter(transport)
    sent = r.record(accepted=False)
    assert await r.send_once() is Delivery.ACKED
    assert r.pending is None and r.acknowledged == sent
    assert sent == Report("gw-1", "east-0", 100, 1, 1, False)


@pytest.mark.parametrize(
    "answer",
    [
        None,
        (404, {}),
        (405, {}),
        (500, {}),
        (503, {}),
        (504, {}),
        (204, {}),
        (204, {"x-grid-ingest-epoch": "100", "x-grid-ingest-sequence": "2"}),
        (204, {"x-grid-ingest-epoch": "99", "x-grid-ingest-sequence": "1"}),
        (200, {"x-grid-ingest-epoch": "100", "x-grid-ingest-sequence": "1"}),
    ],
    ids=[
        "unreachable",
        "404",
        "405",
        "500",
        "503",
        "504",
        "no-echo",
        "wrong-seq",
        "wrong-epoch",
        "200",
    ],
)
async def test_anything_but_an_exact_echo_keeps_the_evidence_pending(answer: Answer) -> None:
    r = reporter(Scripted(answer))
    sent = r.record(accepted=False)
    assert await r.send_once() is Delivery.RETRY
    assert r.pending == sent and r.acknowledged is None and r.failures == 1


async def test_retries_back_off_exponentially_with_jitter_up_to_the_cap() -> None:
    settings = ReporterSettings(initial_backoff_s=0.5, max_backoff_s=4.0)
    transport = Scripted(*([None] * 8), "echo")
    sleeps = Sleeps()
    r = reporter(transport, settings=settings, sleep=sleeps)
    r.record(accepted=False)
    task = asyncio.create_task(r.run())
    while r.pending is not None:
        await asyncio.sleep(0)
    task.cancel()
    assert len(transport.sent) == 9 and len(set(transport.sent)) == 1
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert len(sleeps.delays) == 8
    for delay, ceiling in zip(sleeps.delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(sleeps.delays)) > 1, "jitter spreads the delays"
    assert r.failures == 0


async def test_new_evidence_while_pending_supersedes_without_losing_the_counter() -> None:
    r = reporter(Scripted(None))
    r.record(accepted=False)
    await r.send_once()
    r.record(accepted=True)
    newest = r.record(accepted=False)
    assert r.pending == newest and newest.rejected == 2 and newest.sequence == 3
    assert not newest.clean


async def test_an_ack_of_an_older_report_does_not_clear_a_newer_one() -> None:
    gate = asyncio.Event()

    class Slow(Scripted):
        async def post(self, headers: Mapping[str, str]) -> Answer:
            await gate.wait()
            return await super().post(headers)

    r = reporter(Slow("echo"))
    r.record(accepted=True)
    sending = asyncio.create_task(r.send_once())
    await asyncio.sleep(0)
    newer = r.record(accepted=False)
    gate.set()
    assert await sending is Delivery.ACKED
    assert r.pending == newer


async def test_a_409_starts_a_new_epoch_that_carries_the_evidence() -> None:
    transport = Scripted((409, {}), "echo")
    r = reporter(transport)
    r.record(accepted=False)
    r.record(accepted=False)
    assert await r.send_once() is Delivery.NEW_EPOCH
    assert r.pending == Report("gw-1", "east-0", 101, 1, 2, False)
    assert await r.send_once() is Delivery.ACKED


async def test_the_reserved_maximum_never_carries_a_clean_report() -> None:
    r = reporter(Scripted("echo"))
    r.rejected = U64_MAX
    sent = r.record(accepted=True)
    assert not sent.clean and sent.rejected == U64_MAX


def test_the_default_reporter_id_is_a_valid_identity() -> None:
    identity = default_reporter_id()
    assert 1 <= len(identity) <= 64
    parse_report(
        {
            "x-grid-ingest-version": "1",
            "x-grid-ingest-reporter": identity,
            "x-grid-ingest-replica": "r",
            "x-grid-ingest-epoch": "1",
            "x-grid-ingest-sequence": "1",
            "x-grid-ingest-rejected": "0",
            "x-grid-ingest-clean": "true",
        }.items()
    )
