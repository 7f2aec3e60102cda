"""SWIM benchmark: dissemination in simulation, and Grid vs. memberlist on loopback.

Part 1, simulation (`grid.testing.simulator`, virtual time, no loss): a mesh of
n members already knowing each other; one member publishes one small lane item
and we count probe rounds until every member delivered it, against ⌈log₂ n⌉
(n = 16 … 1,024; ``--quick`` stops at 256). Push-pull is off, so only
gossip spreads it (piggybacked on probes and on gossip ticks every 200 ms).

Part 2, loopback (real sockets on 127.0.0.1, encrypted; n = 8 and 32, or the
sizes given with ``--nodes N[,N...]``, e.g. ``--nodes 128``;
`benchkit.swim_loopback`, `benchkit.swim_clusters`): each Grid member is a
separate Python process running a `SwimNode` alone (`benchkit.swim_child`, the
same node the operator runs, without the operator around it: a demo
operator's RSS was 146 MiB on this machine, so 128 of them would take some
18 GiB of its 24 GiB, shared with other work, and their stores, scrapes and
servers would load its two cores well beyond SWIM), and each memberlist
member a separate ``serf agent`` process (Debian's ``serf``, HashiCorp
memberlist with its LAN profile). Both use memberlist's LAN timing:
probe interval 1 s, probe timeout 0.5 s, 3 indirect probes, gossip to 3 members
every 200 ms, suspicion multiplier 4 with K = 2 confirmations (Grid:
``suspicion_timeout_s = 4·max(1, log10 n)`` s, the same minimum memberlist
computes; maximum 6 times that in both), retransmit multiplier 4,
push-pull every 30 s; Grid's member admission keeps its defaults (a member
heard of through gossip counts once it answers a challenge, 2 attempts of
0.5 s, then its address cools for 30 s). Each mesh starts its first member
alone (the seed every other joins through), then the others in batches of 16,
each batch waited for (started and, for serf, reporting itself) before the
next. Measured for each:

- join convergence: from the moment the last member was started until every
  member lists all others alive (Grid: the members' own events, timestamped by
  them; memberlist: each agent's ``EventMemberJoin`` log lines, logged where
  serf counts ``serf.member.join``, read through a pipe and timestamped on
  arrival: its statsd counters, sent over UDP, once fell short of n at
  n = 128 on a loaded machine while every agent listed all members alive);
  ``null`` when not complete within the plan's join deadline (10 s with
  ``--quick``, 120 s without, for n ≤ 32; proportional to n beyond);
- bytes/s per member: bytes sent (UDP datagrams plus TCP push-pull, sealed
  payload bytes without IP/UDP/TCP headers) over a quiet window, averaged over
  members (Grid: its transport counters; memberlist: its own
  ``memberlist.udp.sent`` and ``memberlist.tcp.sent`` statsd counters, which
  count the encrypted payload the same way);
- CPU% per member: utime + stime from ``/proc/PID/stat`` over the same window
  (percent of one core), and the whole machine's busy share of all its cores
  over that window (``/proc/stat``, ``host_cpu_busy_percent``: other work on
  the machine counts too);
- RSS per member: ``VmRSS`` from ``/proc/PID/status`` at the end of the
  window, the mean over members, in MiB;
- failure detection: SIGKILL one member; time until every survivor marks it
  dead (Grid: the survivors' "dead" events; memberlist: ``EventMemberFailed``),
  ``null`` if not within 180 s. Dead marks made before the kill are counted
  (``false_dead_marks``), and for Grid the members dropped after unanswered
  challenges and the announcements refused meanwhile (``unanswered_challenges``,
  ``refused_announcements``, summed over members).

Without ``--quick`` the meshes run one after the other, with a 10 s settle
after joining and a window of one periodic push-pull interval at n (30 s up to
32 members, 90 s at 128, as memberlist scales it; a shorter window would catch
a varying share of each member's push-pulls), three trials each (figures are medians, the
trials are listed too). With ``--quick`` the Grid and memberlist
meshes of one size are joined one after the other, then measured side by side
(2 s settle, 3 s window, both victims killed together); one trial. Every
member process is killed when the bench ends, also on an error, Ctrl-C or
SIGTERM, and each has ``PR_SET_PDEATHSIG`` set in case the bench is killed.
Targets (issue 30, stated at n = 128; ``met`` shows them for every n): Grid's
detection time at most 1.0 x memberlist's, its bytes/s and CPU% per member at
most 0.6 x memberlist's.

Part 3, origin signatures (no network): the cost per broadcast item of what
a site adds for origin authentication, signing its item and a receiver
verifying it (`grid.core.crdt.origin`), for an ECDSA P-256 and an Ed25519
site key, against the AES-256-GCM seal of the same bytes measured in the same
run (the cost every item already pays inside its GRID frame). The item is a
state lane of four provider records; figures are microseconds per item, the
median of several timed batches. ``--signing-only`` runs just this part.

Both meshes encrypt (Grid: AES-256-GCM GRID frames; serf: ``encrypt_key``,
memberlist's AES-GCM). The memberlist part needs ``serf``; run as root, the
bench installs it with apt-get when missing, otherwise it prints that the
anchor is skipped. The last line of output is one JSON object.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory comes first on sys.path, where
# bench/operator.py would shadow the standard library's `operator` module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

sys.path.append(_HERE)  # last, for benchkit only

import argparse  # noqa: E402
import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from benchkit import swim_loopback as lb  # noqa: E402
from benchkit.swim_clusters import BATCH, kill_children, log, serf_binary  # noqa: E402
from grid.core.crdt.origin import item_signature_valid, item_signing_input  # noqa: E402
from grid.core.crdt.payload import encode_lane  # noqa: E402
from grid.core.crdt.record import ProviderRecord, RecordSignals  # noqa: E402
from grid.core.crdt.snapshot import GridStateSnapshot  # noqa: E402
from grid.core.swim.config import SwimConfig  # noqa: E402
from grid.core.swim.messages import BroadcastItem, Lane  # noqa: E402
from grid.core.wire.frame import seal  # noqa: E402
from grid.testing.origin import SitePki  # noqa: E402
from grid.testing.simulator import SimNode, Simulator  # noqa: E402

# Issue 30's targets for the loopback part: Grid's figure over memberlist's at most this.
DETECTION_TARGET = 1.0
BYTES_TARGET = 0.6
CPU_TARGET = 0.6


# -- part 1: dissemination in simulation -------------------------------------------


def dissemination_rounds(n: int, seed: int) -> float:
    """Probe rounds until all `n` members delivered one item published by one of them."""
    config = SwimConfig(probe_interval_s=1.0, probe_timeout_s=0.5, push_pull_interval_s=0)
    sim = Simulator(seed, config=config)
    got: set[str] = set()
    item = BroadcastItem(Lane.METADATA, "site-0000", 1, b"x" * 32)

    def on_deliver(node: SimNode, delivered: BroadcastItem) -> None:
        if delivered == item:
            got.add(node.id)

    nodes = [sim.add_node(on_deliver=on_deliver) for _ in range(n)]
    sim.bootstrap(nodes)
    sim.run_for(3.0)  # let each member's own join announcement drain
    sim.apply(nodes[0], nodes[0].machine.publish(item, sim.now))
    start = sim.now
    done = sim.run_until(lambda: len(got) == n - 1, timeout_s=120.0, check_every_s=0.02)
    if done is None:
        raise RuntimeError(f"item did not reach all {n} members (seed {seed})")
    return (done - start) / config.probe_interval_s


def simulate(sizes: list[int], seeds: int) -> list[dict[str, Any]]:
    """Median rounds per n over `seeds` runs, with the ratio to ⌈log₂ n⌉."""
    rows = []
    for n in sizes:
        runs = [dissemination_rounds(n, seed) for seed in range(1, seeds + 1)]
        rounds = statistics.median(runs)
        log2n = math.ceil(math.log2(n))
        rows.append(
            {"n": n, "rounds": round(rounds, 2), "log2_n": log2n, "ratio": round(rounds / log2n, 3)}
        )
        log(f"sim n={n:5d} rounds={rounds:6.2f} ceil(log2 n)={log2n:2d} runs={runs}")
    return rows


# -- part 3: origin signatures ------------------------------------------------------


def _state_item() -> BroadcastItem:
    snap = GridStateSnapshot.empty("west")
    for i in range(4):
        record = ProviderRecord(
            name=f"vllm-{i}", cluster=f"vllm-{i}", site="west", backend_kind="local",
            models=("llama-3.1-8b-instruct",), healthy=True, observed_at=1.7e9,
            signals=RecordSignals(queue_depth=0.25, kv_cache_utilization=0.5),
        )  # fmt: skip
        snap = snap.put_provider(f"vllm-{i}", record)
    return BroadcastItem(Lane.STATE, "west", snap.revision(Lane.STATE), encode_lane(snap.state))


def _per_item_us(step: Any, batches: int, per_batch: int) -> float:
    times = []
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(per_batch):
            step()
        times.append((time.perf_counter() - began) / per_batch * 1e6)
    return round(statistics.median(times), 2)


def signing_cost(quick: bool) -> dict[str, Any]:
    """Sign and verify one state item per key kind, against an AES-GCM seal of its bytes."""
    item = _state_item()
    data = item_signing_input(item)
    key = os.urandom(32)
    batches, per_batch = (5, 100) if quick else (9, 1000)
    rows: dict[str, Any] = {}
    seal_us = _per_item_us(lambda: seal(key, data), batches, per_batch)
    for kind in ("ec-p256", "ed25519"):
        signer = SitePki.create(["west"], key_kind=kind).signer("west")  # type: ignore[arg-type]
        signed = signer.sign_item(item)
        public = signer.public_key
        assert item_signature_valid(public, signed)
        sign_us = _per_item_us(lambda s=signer: s.sign_item(item), batches, per_batch)
        verify_us = _per_item_us(
            lambda p=public, i=signed: item_signature_valid(p, i), batches, per_batch
        )
        rows[kind] = {
            "sign_us": sign_us,
            "verify_us": verify_us,
            "sign_verify_us": round(sign_us + verify_us, 2),
            "signature_bytes": len(signed.signature),
            "ratio_to_seal": round((sign_us + verify_us) / seal_us, 1),
        }
    return {"item_payload_bytes": len(item.payload), "aes_gcm_seal_us": seal_us, **rows}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="finish in under 60 s")
    parser.add_argument(
        "--signing-only", action="store_true", help="run only part 3 (origin signatures)"
    )
    parser.add_argument(
        "--nodes",
        type=lb.parse_nodes,
        default=list(lb.DEFAULT_NODES),
        metavar="N[,N...]",
        help="loopback mesh sizes (default: %(default)s)",
    )
    return parser.parse_args()


def loopback_summary(rows: dict[str, Any], plan: lb.Plan, binary: str | None) -> dict[str, Any]:
    """The loopback part of the JSON line: figures per n, method, targets and verdicts."""
    out: dict[str, Any] = {
        "loopback": rows,
        "anchor": lb.serf_version(binary) if binary else None,
        "method": {
            "processes": "one OS process per member (Grid: a SwimNode alone, "
            "benchkit/swim_child.py, not a full operator; memberlist: serf agent)",
            "start": f"seed alone, then batches of {BATCH}, each waited for",
            "bytes": "sealed UDP+TCP payload bytes sent; Grid transport counters, "
            "memberlist udp.sent/tcp.sent statsd counters",
            "cpu": "/proc/PID/stat utime+stime over the quiet window",
            "rss": "/proc/PID/status VmRSS at the end of the quiet window, mean, MiB",
            "host_cpu": "/proc/stat busy share of all cores over the quiet window",
            **dataclasses.asdict(plan),
            "window_s_per_n": {n: lb.window_s(plan, int(n)) for n in rows},
            "join_deadline": f"join_deadline_s x max(1, n/{lb.JOIN_DEADLINE_REFERENCE_N})",
            "cores": os.cpu_count(),
            "figures": "median over trials",
        },
        "targets": {
            "detection_ratio_max": DETECTION_TARGET,
            "bytes_ratio_max": BYTES_TARGET,
            "cpu_ratio_max": CPU_TARGET,
        },
    }
    if binary is not None:
        out["met"] = {
            n: {
                "detection": lb.within(row["ratios"]["detection"], DETECTION_TARGET),
                "bytes": lb.within(row["ratios"]["bytes_per_s"], BYTES_TARGET),
                "cpu": lb.within(row["ratios"]["cpu_percent"], CPU_TARGET),
            }
            for n, row in rows.items()
        }
    return out


def main() -> None:
    args = parse_args()
    began = time.monotonic()
    signing = signing_cost(args.quick)
    log(f"origin signatures: {json.dumps(signing)}")
    if args.signing_only:
        print(json.dumps({"bench": "swim", "quick": args.quick, "signing": signing}))
        return
    sizes = [16, 32, 64, 128, 256] if args.quick else [16, 32, 64, 128, 256, 512, 1024]
    sim = simulate(sizes, seeds=1 if args.quick else 3)
    log(f"simulation done in {time.monotonic() - began:.1f} s")
    binary = serf_binary()
    if binary is None:
        log("serf is not installed and could not be installed: skipping the memberlist anchor")
    plan = lb.QUICK if args.quick else lb.FULL
    try:
        rows = asyncio.run(lb.loopback(args.nodes, binary, plan))
    finally:
        kill_children()  # whatever an error or Ctrl-C left running
    summary: dict[str, Any] = {
        "bench": "swim",
        "quick": args.quick,
        "dissemination": sim,
        **loopback_summary(rows, plan, binary),
        "signing": signing,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    print(json.dumps(summary))


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the meshes' stop and kill_children


if __name__ == "__main__":
    random.seed()
    signal.signal(signal.SIGTERM, _terminate)
    main()
