"""Ingest-feedback headers and the per-reporter evidence machine (seed 000, §7)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.resources.status import GridNetworkStatus
from grid.core.signals.feedback import (
    U64_MAX,
    Admitted,
    ChangedDuplicate,
    CounterDecreased,
    Duplicate,
    FeedbackBook,
    FeedbackRefusal,
    MalformedMetadata,
    Replay,
    Report,
    ReporterCapacity,
    UnsupportedMetadata,
    UnsupportedVersion,
    book_from_status,
    feedback_status,
    ingest_condition,
    parse_report,
    report_headers,
    status_patch,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:01Z"


def headers(**overrides: str | None) -> list[tuple[str, str]]:
    base = report_headers(Report("gw-1", "east-0", 7, 1, 0, True))
    for key, value in overrides.items():
        name = "x-grid-ingest-" + key
        if value is None:
            base.pop(name)
        else:
            base[name] = value
    return list(base.items())


def refused(items: list[tuple[str, str]]) -> FeedbackRefusal:
    with pytest.raises(FeedbackRefusal) as info:
        parse_report(items)
    return info.value


def test_a_complete_version_1_report_parses() -> None:
    assert parse_report(headers()) == Report("gw-1", "east-0", 7, 1, 0, True)


def test_header_names_are_case_insensitive_and_other_headers_are_ignored() -> None:
    items = [(k.upper(), v) for k, v in headers()] + [("Content-Length", "0")]
    assert parse_report(items).reporter == "gw-1"


@pytest.mark.parametrize(
    "name", ["version", "reporter", "replica", "epoch", "sequence", "rejected", "clean"]
)
def test_a_missing_header_is_malformed(name: str) -> None:
    assert isinstance(refused(headers(**{name: None})), MalformedMetadata)


@pytest.mark.parametrize(
    "name", ["version", "reporter", "replica", "epoch", "sequence", "rejected", "clean"]
)
def test_a_repeated_header_is_malformed(name: str) -> None:
    items = headers()
    items.append(next(item for item in items if item[0] == "x-grid-ingest-" + name))
    assert isinstance(refused(items), MalformedMetadata)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("epoch", "-1"),
        ("epoch", "0x10"),
        ("epoch", ""),
        ("epoch", " 1"),
        ("sequence", "1.0"),
        ("rejected", "18446744073709551616"),
        ("sequence", "1" * 21),
        ("version", "one"),
        ("version", "1" * 21),
        ("clean", "True"),
        ("clean", "1"),
        ("reporter", ""),
        ("reporter", "a" * 65),
        ("reporter", "gw/1"),
        ("replica", "East"),
        ("replica", "a" * 64),
        ("replica", "-a"),
    ],
)
def test_bad_values_are_malformed(name: str, value: str) -> None:
    assert isinstance(refused(headers(**{name: value})), MalformedMetadata)


def test_another_version_is_unsupported_even_with_headers_version_1_lacks() -> None:
    items = [*headers(version="2"), ("x-grid-ingest-future", "x")]
    assert isinstance(refused(items), UnsupportedVersion)


def test_an_unknown_ingest_header_is_unsupported_metadata_and_not_named() -> None:
    error = refused([*headers(), ("X-Grid-Ingest-Secret-Token", "hunter2")])
    assert isinstance(error, UnsupportedMetadata)
    assert "secret" not in error.message.lower() and "hunter2" not in error.message


def test_the_u64_maximum_is_refused_with_clean_true_only() -> None:
    for name in ("sequence", "rejected"):
        assert isinstance(refused(headers(**{name: str(U64_MAX)})), MalformedMetadata)
        report = parse_report(headers(**{name: str(U64_MAX), "clean": "false"}))
        assert getattr(report, name) == U64_MAX


def test_refusal_messages_never_echo_values() -> None:
    value = "9" * 21
    assert value not in refused(headers(epoch=value)).message


def report(seq: int, rejected: int = 0, clean: bool = True, epoch: int = 1) -> Report:
    return Report("gw-1", "east-0", epoch, seq, rejected, clean)


def admitted(book: FeedbackBook, r: Report, now: str = T0) -> FeedbackBook:
    outcome = book.admit(r, now)
    assert isinstance(outcome, Admitted)
    return outcome.book


def test_a_counter_rise_is_evidence_even_when_clean_says_true() -> None:
    book = admitted(FeedbackBook(), report(1))
    book = admitted(book, report(2, rejected=1, clean=True))
    assert book.with_evidence == 1


def test_a_newer_clean_report_with_the_same_counter_clears_only_that_reporter() -> None:
    book = admitted(FeedbackBook(), report(1, rejected=1))
    other = Report("gw-2", "east-1", 1, 1, 3, False)
    book = admitted(book, other)
    book = admitted(book, report(2, rejected=1, clean=True))
    assert [r.reporter for r in book.reporters if r.evidence] == ["gw-2"]


def test_an_exact_duplicate_does_not_renew_freshness() -> None:
    book = admitted(FeedbackBook(), report(1), T0)
    outcome = book.admit(report(1), T1)
    assert isinstance(outcome, Duplicate) and outcome.state.last_report_time == T0


def test_replays_changed_duplicates_and_decreasing_counters_are_refused() -> None:
    book = admitted(FeedbackBook(), report(5, rejected=2, clean=False, epoch=3), T0)
    with pytest.raises(Replay):
        book.admit(report(4, rejected=2, clean=False, epoch=3), T1)
    with pytest.raises(Replay):
        book.admit(report(9, rejected=2, clean=False, epoch=2), T1)
    with pytest.raises(ChangedDuplicate):
        book.admit(report(5, rejected=2, clean=True, epoch=3), T1)
    with pytest.raises(CounterDecreased):
        book.admit(report(6, rejected=1, clean=False, epoch=3), T1)


def test_a_new_epoch_starts_the_reporter_afresh() -> None:
    book = admitted(FeedbackBook(), report(9, rejected=4, clean=False, epoch=1))
    book = admitted(book, report(1, rejected=0, clean=True, epoch=2))
    assert book.with_evidence == 0 and book.reporters[0].sequence == 1


def test_a_new_identity_past_capacity_is_refused_but_known_ones_go_on() -> None:
    book = FeedbackBook(capacity=2)
    book = admitted(book, Report("a", "r", 1, 1, 0, True))
    book = admitted(book, Report("b", "r", 1, 1, 0, True))
    with pytest.raises(ReporterCapacity):
        book.admit(Report("c", "r", 1, 1, 0, True), T0)
    admitted(book, Report("a", "r", 1, 2, 1, True))


def test_the_condition_counts_reporters_with_evidence() -> None:
    assert ingest_condition(FeedbackBook()).reason == "Clean"
    book = admitted(FeedbackBook(), report(1, rejected=1))
    condition = ingest_condition(book)
    assert (condition.status, condition.reason) == ("False", "RejectedEvidence")
    assert condition.message.startswith("1 ")


def test_the_status_patch_carries_state_and_condition_and_keeps_other_conditions() -> None:
    status = GridNetworkStatus()
    status.set_condition("Other", "True", reason="Fine", now=T0)
    book = admitted(FeedbackBook(), report(1, rejected=U64_MAX, clean=False))
    patch = status_patch(status, book, T1, 3)
    types = [c["type"] for c in patch["conditions"]]
    assert types == ["Other", "GatewayIngest"]
    assert patch["gatewayFeedback"]["reportersWithEvidence"] == 1
    assert patch["gatewayFeedback"]["reporters"][0]["rejected"] == str(U64_MAX)


u64 = st.integers(min_value=0, max_value=U64_MAX)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b.c", "D_-9"]),
            st.sampled_from(["r", "r-1"]),
            u64,
            u64,
            u64,
            st.booleans(),
            st.booleans(),
        ),
        max_size=8,
    )
)
def test_the_persisted_form_round_trips(
    rows: list[tuple[str, str, int, int, int, bool, bool]],
) -> None:
    book = FeedbackBook()
    for reporter, replica, epoch, sequence, rejected, clean, _evidence in rows:
        try:
            outcome = book.admit(Report(reporter, replica, epoch, sequence, rejected, clean), T0)
        except FeedbackRefusal:
            continue
        if isinstance(outcome, Admitted):
            book = outcome.book
    again = book_from_status(
        GridNetworkStatus.model_validate(
            {"gatewayFeedback": feedback_status(book).model_dump(by_alias=True)}
        ).gateway_feedback
    )
    assert again == book


LATER = "2026-01-01T01:00:00Z"
"""An hour after T0: the default idle age."""


def test_a_full_book_gives_a_new_identity_the_slot_of_its_longest_idle_reporter() -> None:
    book = FeedbackBook(capacity=2)
    book = admitted(book, Report("old", "r", 1, 1, 0, True), T0)
    book = admitted(book, Report("new", "r", 1, 1, 0, True), T1)
    outcome = book.admit(Report("next", "r", 1, 1, 0, True), LATER)
    assert isinstance(outcome, Admitted) and outcome.evicted == "old"
    assert [r.reporter for r in outcome.book.reporters] == ["new", "next"]


def test_no_slot_is_taken_from_a_reporter_younger_than_the_idle_age() -> None:
    book = FeedbackBook(capacity=1, idle_s=3600)
    book = admitted(book, Report("a", "r", 1, 1, 0, True), T1)
    with pytest.raises(ReporterCapacity):
        book.admit(Report("b", "r", 1, 1, 0, True), LATER)


def test_a_state_without_a_report_time_counts_as_the_oldest() -> None:
    status = feedback_status(admitted(FeedbackBook(), Report("a", "r", 1, 1, 0, True)))
    status.reporters[0].last_report_time = None
    book = book_from_status(status, capacity=1)
    outcome = book.admit(Report("b", "r", 1, 1, 0, True), T1)
    assert isinstance(outcome, Admitted) and outcome.evicted == "a"


def test_an_evicted_reporter_returning_restores_its_evidence_from_its_counter() -> None:
    book = FeedbackBook(capacity=1, idle_s=60)
    book = admitted(book, Report("a", "r", 1, 5, 3, False), T0)
    book = admitted(book, Report("b", "r", 1, 1, 0, True), LATER)
    assert book.with_evidence == 0
    book = admitted(book, Report("a", "r", 1, 6, 3, True), "2026-01-01T02:00:00Z")
    assert book.with_evidence == 1 and [r.reporter for r in book.reporters] == ["a"]


def stamp(seconds: int) -> str:
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 900)), max_size=60))
def test_a_book_never_outgrows_its_capacity_and_only_idle_slots_move(
    reports: list[tuple[int, int]],
) -> None:
    book, clock, last = FeedbackBook(capacity=3, idle_s=600), 0, dict[str, int]()
    for identity, step in reports:
        clock += step
        name = f"gw-{identity}"
        current = book.get(name)
        report = Report(name, "r", 1, current.sequence + 1 if current else 1, 0, True)
        try:
            outcome = book.admit(report, stamp(clock))
        except ReporterCapacity:
            assert len(book.reporters) == 3
            assert all(clock - last[r.reporter] < 600 for r in book.reporters)
            continue
        assert isinstance(outcome, Admitted)
        if outcome.evicted is not None:
            assert clock - last[outcome.evicted] >= 600
            assert last[outcome.evicted] == min(last[r.reporter] for r in book.reporters)
        book, last[name] = outcome.book, clock
        assert len(book.reporters) <= 3
