"""One Grid member of bench/swim.py's loopback part: a `SwimNode` alone, in its own process.

Run as ``python -P bench/benchkit/swim_child.py NAME CONFIG_JSON [SEED]`` by
`benchkit.swim_clusters.GridCluster`; it imports only what the node needs, so
its RSS is the SWIM node's (the operator runs the same `SwimNode` with much
more around it). The cluster key arrives as one hex line on stdin; events
(``alive``/``dead``/...) and, on a ``stats`` line, the bytes sent so far and three
admission counters (challenged members dropped unanswered, announcements refused,
members admitted on a late answer)
go out as JSON lines on stdout. The child dies with its parent (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits, however the parent ends."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


if __name__ == "__main__":
    die_with_parent()  # first: the imports below take a while

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from grid.adapters.swim_node import SwimNode  # noqa: E402
from grid.core.swim.config import SwimConfig  # noqa: E402
from grid.core.swim.effects import Notify  # noqa: E402
from grid.core.wire.keyring import Keyring  # noqa: E402


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def child_main(node_id: str, config_json: str, seed: str | None) -> None:
    """Run one SwimNode; report events and stats as JSON lines on stdout."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    key = bytes.fromhex((await reader.readline()).decode().strip())
    config = SwimConfig(**json.loads(config_json))
    seeds = [seed] if seed else []
    node = await SwimNode.start(node_id, "127.0.0.1:0", Keyring(key), config=config, seeds=seeds)
    emit({"ready": node.address, "t": time.monotonic()})

    async def events() -> None:
        while True:
            event = await node.events.get()
            if isinstance(event, Notify):
                emit({"ev": event.kind.value, "m": event.member, "t": time.monotonic()})

    pump = asyncio.create_task(events())
    while line := await reader.readline():
        if line.strip() == b"stats":
            admission = node.counters.members
            refused = sum(admission.refused.values())
            emit({"sent": node.counters.bytes_sent, "t": time.monotonic(),
                  "unanswered": admission.unanswered, "refused": refused,
                  "late": admission.answered_late})  # fmt: skip
    pump.cancel()
    await node.stop()


if __name__ == "__main__":
    name, config_text, *rest = sys.argv[1:]
    asyncio.run(child_main(name, config_text, rest[0] if rest else None))
