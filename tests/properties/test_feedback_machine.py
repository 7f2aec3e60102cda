"""The evidence machine against the reference model, driven by Hypothesis' stateful testing.

Each step sends one report from one of a few reporters. Steps are biased
towards the interesting neighbours of what was last admitted (the same report,
the next sequence, an older one, a counter step up or down, a new epoch), so
duplicates, replays and changed duplicates happen often, not by luck.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from grid.core.signals.feedback import (
    U64_MAX,
    Admitted,
    Duplicate,
    FeedbackBook,
    FeedbackRefusal,
    Report,
    ingest_condition,
)
from grid.testing.feedback_model import FeedbackModel

REPORTERS = ("gw-a", "gw-b", "gw-c", "gw-d")
CAPACITY = 3


class FeedbackMachine(RuleBasedStateMachine):
    """The real `FeedbackBook` and the model, fed the same reports."""

    def __init__(self) -> None:
        super().__init__()
        self.book = FeedbackBook(capacity=CAPACITY)
        self.model = FeedbackModel(capacity=CAPACITY)
        self.last: dict[str, Report] = {}
        self.clock = 0

    def _send(self, report: Report) -> None:
        self.clock += 1
        now = f"2026-01-01T00:00:{self.clock % 60:02d}Z"
        fields = (report.epoch, report.sequence, report.rejected, report.clean, report.replica)
        expected = self.model.apply(report.reporter, fields, now)
        try:
            outcome = self.book.admit(report, now)
        except FeedbackRefusal as refusal:
            assert refusal.code == expected, (report, refusal.code, expected)
            return
        if isinstance(outcome, Duplicate):
            assert expected == "duplicate", (report, expected)
            return
        assert isinstance(outcome, Admitted)
        assert expected == "accepted", (report, expected)
        self.book = outcome.book
        self.last[report.reporter] = report

    @rule(
        reporter=st.sampled_from(REPORTERS),
        epoch=st.integers(0, 3),
        sequence=st.integers(0, 6) | st.just(U64_MAX),
        rejected=st.integers(0, 6) | st.just(U64_MAX),
        clean=st.booleans(),
    )
    def fresh_report(
        self, reporter: str, epoch: int, sequence: int, rejected: int, clean: bool
    ) -> None:
        if clean and U64_MAX in (sequence, rejected):
            clean = False  # parse_report refuses this before the machine sees it
        self._send(Report(reporter, "r", epoch, sequence, rejected, clean))

    @rule(
        reporter=st.sampled_from(REPORTERS),
        step=st.sampled_from(["same", "next", "older", "up", "down", "epoch", "flip", "replica"]),
        clean=st.booleans(),
    )
    def neighbour(self, reporter: str, step: str, clean: bool) -> None:
        base = self.last.get(reporter)
        if base is None:
            base = Report(reporter, "r", 1, 1, 0, True)
        e, s, r, c, rep = base.epoch, base.sequence, base.rejected, base.clean, base.replica
        if step == "next":
            s, c = s + 1, clean
        elif step == "older":
            s = max(0, s - 1)
        elif step == "up":
            s, r, c = s + 1, r + 1, clean
        elif step == "down":
            s, r = s + 1, max(0, r - 1)
        elif step == "epoch":
            e, s, r, c = e + 1, 0, 0, clean
        elif step == "flip":
            c = not c
        elif step == "replica":
            rep = "r-2" if rep == "r" else "r"
        self._send(Report(reporter, rep, e, min(s, U64_MAX), min(r, U64_MAX), c))

    @invariant()
    def same_state(self) -> None:
        real = {
            s.reporter: (
                (s.epoch, s.sequence, s.rejected, s.clean, s.replica),
                s.evidence,
                s.last_report_time,
            )
            for s in self.book.reporters
        }
        model = {k: (v.fields, v.evidence, v.fresh_at) for k, v in self.model.reporters.items()}
        assert real == model
        assert self.book.with_evidence == self.model.with_evidence()
        condition = ingest_condition(self.book)
        assert (condition.status == "True") == (self.model.with_evidence() == 0)


TestFeedbackMachine = FeedbackMachine.TestCase
