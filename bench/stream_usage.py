"""Benchmark: CPU per relayed MB of the gateway's stream usage parser (`StreamUsage`).

A provider writes Server-Sent Events of one payload size (1 byte, 10 bytes,
just under 1 MiB: the longest event still inspected) in 64 KiB writes, as a
socket would hand them over, with the usage chunk at the end; the parser
forwards them and strips the usage chunk. A second pass feeds the 1 MiB events
in 1,500-byte pieces (one segment each). Each figure is the best-of-3 process
CPU seconds per MB relayed; the parser is linear, so the figures do not grow
with the stream's length (``--quick`` relays 4 MB a case, the full run 32 MB).

The last line is one JSON object: ``cpu_s_per_mb`` per case and
``linear_ratio`` (CPU per MB at 1-byte events for the long stream over the
short one; about 1 when linear, it grew with the length before).
"""

from __future__ import annotations

import argparse
import json
import time

from grid.core.metering.usage import EVENT_MAX_BYTES, StreamUsage

MB = 1_000_000
USAGE = (
    b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\ndata: [DONE]\n\n'
)


def stream_of(payload: int, total: int) -> bytes:
    event = b"data: " + b"x" * payload + b"\n\n"
    return event * max(1, total // len(event)) + USAGE


def cpu_per_mb(stream: bytes, write: int, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        parser = StreamUsage(strip=True)
        started = time.process_time()
        sent = 0
        for at in range(0, len(stream), write):
            sent += len(parser.feed(stream[at : at + write]))
        sent += len(parser.finish())
        best = min(best, time.process_time() - started)
        assert sent == len(stream) - len(USAGE) + len(b"data: [DONE]\n\n")
        assert parser.usage is not None
    return best / (len(stream) / MB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 MB a case (under 60 s)")
    args = parser.parse_args()
    total = 4 * MB if args.quick else 32 * MB
    big = EVENT_MAX_BYTES - 64
    figures = {
        "1_byte_events": cpu_per_mb(stream_of(1, total), 64 * 1024),
        "10_byte_events": cpu_per_mb(stream_of(10, total), 64 * 1024),
        "1_mib_events": cpu_per_mb(stream_of(big, total), 64 * 1024),
        "1_mib_events_1500_byte_writes": cpu_per_mb(stream_of(big, total), 1500),
    }
    short = cpu_per_mb(stream_of(1, total // 4), 64 * 1024)
    for name, value in figures.items():
        print(f"{name:32} {value * 1000:8.2f} ms CPU per MB")
    result = {
        "relayed_mb_per_case": total / MB,
        "cpu_s_per_mb": {k: round(v, 5) for k, v in figures.items()},
        "linear_ratio": round(figures["1_byte_events"] / short, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
