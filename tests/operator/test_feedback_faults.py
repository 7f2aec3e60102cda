"""Store faults under the ingest endpoint, one test per fault, over real mTLS.

The store is a `FaultyStore` around the in-memory store: it answers 409s, fails
writes, stalls past the request budget or answers without showing the write.
The last test runs 16 reporters at once, with duplicates and replays mixed in,
and compares what was persisted with the reference model.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from prometheus_client import generate_latest

from grid.core.signals.connections import ListenerLimits
from grid.core.signals.feedback import Report
from grid.testing.feedback_model import FeedbackModel

from .conftest import Pki
from .feedback_harness import Harness, no_echo, serving


def sites(pki: Pki) -> dict[str, tuple[Path, Path]]:
    return {name: (s.cert, s.key) for name, s in pki.sites.items()}


def report(seq: int = 1, rejected: int = 0, clean: bool = True) -> Report:
    return Report("gw-1", "east-0", 1, seq, rejected, clean)


async def test_a_conflict_on_every_attempt_is_503_conflict_exhausted(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki)) as endpoint:
        endpoint.store.conflicts = 100
        answer = await endpoint.post(report())
        assert answer.status == 503 and answer.body is not None
        assert answer.body["code"] == "conflict_exhausted" and no_echo(answer.headers)
        assert endpoint.store.patch_calls == 3
        assert endpoint.event("conflict") == 3
        assert endpoint.event("conflict_exhausted") == 1
        assert "gatewayFeedback" not in await endpoint.status()


async def test_two_conflicts_then_success_is_204_with_two_conflicts_counted(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki)) as endpoint:
        endpoint.store.conflicts = 2
        answer = await endpoint.post(report(seq=7))
        assert answer.status == 204 and answer.headers["x-grid-ingest-sequence"] == "7"
        assert endpoint.event("conflict") == 2
        assert endpoint.event("conflict_exhausted") == 0
        (reporter,) = (await endpoint.status())["gatewayFeedback"]["reporters"]
        assert reporter["sequence"] == "7"


async def test_a_store_write_failure_is_503_write_failure_counted(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki)) as endpoint:
        endpoint.store.fail_writes = True
        answer = await endpoint.post(report())
        assert answer.status == 503 and answer.body is not None
        assert answer.body["code"] == "write_failure" and no_echo(answer.headers)
        assert "injected" not in answer.body["message"]
        assert endpoint.event("write_failure") == 1
        assert "gatewayFeedback" not in await endpoint.status()


async def test_a_store_answer_that_does_not_show_the_write_is_write_failure(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki)) as endpoint:
        endpoint.store.unverified = True
        answer = await endpoint.post(report())
        assert answer.status == 503 and answer.body is not None
        assert answer.body["code"] == "write_failure" and no_echo(answer.headers)
        assert endpoint.event("write_failure") == 1


async def test_a_store_slower_than_the_budget_is_504_with_nothing_echoed_or_half_written(
    pki: Pki,
) -> None:
    limits = ListenerLimits(request_budget_s=0.3)
    async with serving(pki.ca, sites(pki), limits=limits) as endpoint:
        endpoint.store.stall_s = 30.0
        answer = await endpoint.post(report(seq=1, rejected=1, clean=False))
        assert answer.status == 504 and answer.body is not None
        assert answer.body["code"] == "budget_exceeded" and no_echo(answer.headers)
        assert endpoint.store.patch_calls == 1
        # Neither the reporter state nor the condition was written, not even in part.
        status = await endpoint.status()
        assert "gatewayFeedback" not in status and "conditions" not in status
        # The writer is free again: the resend lands whole.
        endpoint.store.stall_s = 0.0
        again = await endpoint.post(report(seq=1, rejected=1, clean=False))
        assert again.status == 204
        status = await endpoint.status()
        assert status["gatewayFeedback"]["reportersWithEvidence"] == 1
        assert status["conditions"][0]["reason"] == "RejectedEvidence"


async def test_metric_labels_hold_no_reporter_ids_header_values_or_error_strings(
    pki: Pki,
) -> None:
    marker_id, marker_replica = "zz-marker-reporter", "zz-marker-replica"
    async with serving(pki.ca, sites(pki)) as endpoint:
        sent = Report(marker_id, marker_replica, 31337, 424242, 0, True)
        await endpoint.post(sent, who="west")  # unauthorized
        endpoint.store.conflicts = 5
        await endpoint.post(sent)  # conflict x3, conflict_exhausted
        endpoint.store.conflicts = 0
        endpoint.store.fail_writes = True
        await endpoint.post(sent)  # write_failure
        endpoint.store.fail_writes = False
        text = generate_latest(endpoint.registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("grid_gateway_feedback")]
    labels = {line.split("{", 1)[1].split("}", 1)[0] for line in lines if "{" in line}
    events = {"conflict", "conflict_exhausted", "overflow", "unauthorized", "write_failure"}
    assert labels == {f'event="{e}"' for e in events}
    for needle in (marker_id, marker_replica, "31337", "424242", "injected", "Conflict"):
        assert needle not in text


async def _reporter(
    endpoint: Harness, model: FeedbackModel, name: str, rng: random.Random
) -> list[tuple[str, str]]:
    """Send one reporter's script (sequential for it, concurrent with the others)."""
    outcomes = []
    epoch, seq, rejected, clean = 1, 0, 0, True
    sent: list[Report] = []
    for _step in range(12):
        roll = rng.random()
        if sent and roll < 0.2:
            r = sent[-1]  # exact duplicate
        elif len(sent) > 1 and roll < 0.35:
            r = sent[rng.randrange(len(sent) - 1)]  # replay of an older report
        elif sent and roll < 0.45:
            last = sent[-1]
            r = Report(name, last.replica, last.epoch, last.sequence, last.rejected, not last.clean)
        elif roll < 0.5:
            epoch, seq, rejected = epoch + 1, 0, 0
            r = Report(name, "r", epoch, seq, rejected, True)
        else:
            seq += 1
            rejected += rng.random() < 0.3
            clean = rng.random() < 0.7
            r = Report(name, "r", epoch, seq, rejected, clean)
        answer = await endpoint.post(r)
        code = "accepted" if answer.status == 204 else (answer.body or {}).get("code", "?")
        expected = model.apply(name, (r.epoch, r.sequence, r.rejected, r.clean, r.replica), "")
        outcomes.append((code, "accepted" if expected == "duplicate" else expected))
        if answer.status == 204:
            assert answer.headers["x-grid-ingest-sequence"] == str(r.sequence)
        sent.append(r)
    return outcomes


async def test_sixteen_reporters_at_once_persist_what_the_reference_model_holds(
    pki: Pki,
) -> None:
    rng = random.Random(11)
    seeds = [rng.randrange(1 << 30) for _ in range(16)]
    model = FeedbackModel()
    async with serving(pki.ca, sites(pki)) as endpoint:
        results = await asyncio.gather(
            *(
                _reporter(endpoint, model, f"gw-{i:02d}", random.Random(seed))
                for i, seed in enumerate(seeds)
            )
        )
        status = await endpoint.status()
    for outcomes in results:
        for got, expected in outcomes:
            assert got == expected, (seeds, outcomes)
    persisted = {
        r["reporter"]: (
            (int(r["epoch"]), int(r["sequence"]), int(r["rejected"]), r["clean"], r["replica"]),
            r["evidence"],
        )
        for r in status["gatewayFeedback"]["reporters"]
    }
    expected = {k: (v.fields, v.evidence) for k, v in model.reporters.items()}
    assert persisted == expected
    assert status["gatewayFeedback"]["reportersWithEvidence"] == model.with_evidence()
    condition = status["conditions"][0]
    assert (condition["status"] == "True") == (model.with_evidence() == 0)


async def test_reports_waiting_behind_a_slow_write_share_the_next_one(pki: Pki) -> None:
    async with serving(pki.ca, sites(pki)) as endpoint:
        endpoint.store.stall_s = 0.3
        reports = [Report(f"gw-{i}", "r", 1, 1, i % 2, True) for i in range(8)]
        replay = Report("gw-0", "r", 0, 1, 0, True)  # older epoch than gw-0's, once queued
        answers = await asyncio.gather(*(endpoint.post(r) for r in [*reports, replay]))
        statuses = [a.status for a in answers]
        assert statuses[:8] == [204] * 8
        assert statuses[8] in (204, 409)  # admitted first, or refused as a replay after gw-0
        assert endpoint.store.patch_calls < 8, "queued reports were published together"
        status = await endpoint.status()
        assert len(status["gatewayFeedback"]["reporters"]) == 8
        assert status["gatewayFeedback"]["reportersWithEvidence"] == 4


async def test_a_report_whose_budget_runs_out_in_the_queue_is_never_published(
    pki: Pki,
) -> None:
    limits = ListenerLimits(request_budget_s=0.3)
    async with serving(pki.ca, sites(pki), limits=limits) as endpoint:
        endpoint.store.stall_s = 30.0
        stalled, queued = await asyncio.gather(
            endpoint.post(Report("gw-a", "r", 1, 1, 0, True)),
            endpoint.post(Report("gw-b", "r", 1, 1, 0, True)),
        )
        assert (stalled.status, queued.status) == (504, 504)
        assert no_echo(stalled.headers) and no_echo(queued.headers)
        endpoint.store.stall_s = 0.0
        assert (await endpoint.post(Report("gw-c", "r", 1, 1, 0, True))).status == 204
        reporters = (await endpoint.status())["gatewayFeedback"]["reporters"]
        assert [r["reporter"] for r in reporters] == ["gw-c"]
