"""SWIM and replica counters on ``/metrics``, read at scrape time.

The transport (`TransportCounters`) and the replica (`ReplicaCounters`) count
in plain integers on their hot paths; this collector turns them into
Prometheus counters only when ``/metrics`` is scraped, so counting costs no
lock and no label lookup. Every label set is closed (CONVENTIONS 8): drop
reasons are `DROP_REASONS`, member refusals `REFUSAL_REASONS` and admission
routes `ADMISSION_ROUTES` (`grid.core.swim.admission`), transports, outcomes
and directions are the constants below, and each is exported at 0 from the
start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from grid.adapters.udp import DROP_REASONS, TransportCounters
from grid.core.crdt.replica import ReplicaCounters
from grid.core.swim.admission import ADMISSION_ROUTES, REFUSAL_REASONS, AdmissionCounters

Source = Callable[[], tuple[TransportCounters | None, ReplicaCounters | None]]
"""Where the live counters are (the node may not have started yet)."""

TRANSPORTS = ("datagram", "stream")
EXCHANGE_OUTCOMES = ("started", "completed", "failed", "served")
DIRECTIONS = ("sent", "received")


class SwimCollector(Collector):
    """Exports one node's SWIM transport and replica counters."""

    def __init__(self, source: Source) -> None:
        self._source = source

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The counters as they stand (zeros before the node started)."""
        transport, replica = self._source()
        t = transport or TransportCounters()
        drops = CounterMetricFamily(
            "grid_swim_frames_dropped",
            "SWIM frames dropped before decoding, by transport and reason.",
            labels=["transport", "reason"],
        )
        for name, view in (("datagram", t.datagrams_dropped), ("stream", t.streams_dropped)):
            for reason in DROP_REASONS:
                drops.add_metric([name, reason], view.get(reason, 0))
        yield drops
        discards = CounterMetricFamily(
            "grid_swim_private_key_pems_discarded",
            "Received cert-lane PEMs carrying a private key, discarded unstored.",
        )
        discards.add_metric([], replica.private_key_discards if replica else 0)
        yield discards
        exchanges = CounterMetricFamily(
            "grid_swim_push_pull_exchanges",
            "TCP push-pull anti-entropy exchanges, by outcome.",
            labels=["outcome"],
        )
        for outcome, value in zip(
            EXCHANGE_OUTCOMES,
            (
                t.push_pulls_started,
                t.push_pulls_completed,
                t.push_pulls_failed,
                t.push_pulls_served,
            ),
            strict=True,
        ):
            exchanges.add_metric([outcome], value)
        yield exchanges
        traffic = CounterMetricFamily(
            "grid_swim_push_pull_bytes",
            "Push-pull stream bytes on the wire (length prefix and sealed frame), by direction.",
            labels=["direction"],
        )
        traffic.add_metric(["sent"], t.stream_bytes_sent)
        traffic.add_metric(["received"], t.stream_bytes_received)
        yield traffic
        datagrams = CounterMetricFamily(
            "grid_swim_datagram_bytes",
            "SWIM datagram bytes on the wire (sealed frames), by direction.",
            labels=["direction"],
        )
        datagrams.add_metric(["sent"], t.datagram_bytes_sent)
        datagrams.add_metric(["received"], t.datagram_bytes_received)
        yield datagrams
        yield from _admission(t.members)


def _admission(members: AdmissionCounters) -> Iterator[CounterMetricFamily]:
    """Member admission: who got in, how, and what the caps refused."""
    refused = CounterMetricFamily(
        "grid_swim_members_refused",
        "Announced SWIM members refused, by reason (table_full is the member table's cap).",
        labels=["reason"],
    )
    for reason in REFUSAL_REASONS:
        refused.add_metric([reason], members.refused[reason])
    yield refused
    admitted = CounterMetricFamily(
        "grid_swim_members_admitted",
        "Announced SWIM members admitted, by route (answered a challenge, or vouched for).",
        labels=["route"],
    )
    for route, value in zip(ADMISSION_ROUTES, (members.answered, members.vouched), strict=True):
        admitted.add_metric([route], value)
    yield admitted
    challenges = CounterMetricFamily(
        "grid_swim_member_challenges",
        "Challenge datagrams sent to the addresses of unproven SWIM members.",
    )
    challenges.add_metric([], members.challenges)
    yield challenges
    unanswered = CounterMetricFamily(
        "grid_swim_members_unanswered",
        "Announced SWIM members dropped after every challenge went unanswered.",
    )
    unanswered.add_metric([], members.unanswered)
    yield unanswered
    late = CounterMetricFamily(
        "grid_swim_members_answered_late",
        "Announced SWIM members admitted on an answer that came after its challenge timed out.",
    )
    late.add_metric([], members.answered_late)
    yield late
