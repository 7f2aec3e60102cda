"""SWIM and replica counters on ``/metrics``, read at scrape time.

The transport (`TransportCounters`) and the replica (`ReplicaCounters`) count
in plain integers on their hot paths; this collector turns them into
Prometheus counters only when ``/metrics`` is scraped, so counting costs no
lock and no label lookup. Every label set is closed (CONVENTIONS 8): drop
reasons are `DROP_REASONS`, transports, outcomes and directions are the
constants below, and each is exported at 0 from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from grid.adapters.udp import DROP_REASONS, TransportCounters
from grid.core.crdt.replica import ReplicaCounters

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
