"""Tuning of the SWIM membership machine.

Three fields come from `GridNetwork.spec.swim` (SPEC-DECISIONS §2) with the
spec's defaults: `gossip_nodes`, `probe_interval_s` and `suspicion_timeout_s`.
The rest are documented extras in the manner of memberlist's config: each says
what it means, its unit, and what you trade when you move it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grid.errors import ValidationError

PROBE_TIMEOUT_S = 1.0
"""The default direct-probe timeout in seconds (`SwimConfig.probe_timeout_s`)."""


@dataclass(frozen=True, slots=True)
class SwimConfig:
    """Every knob of the SWIM + Lifeguard machine, with the spec's defaults."""

    gossip_nodes: int = 3
    """`spec.swim.gossipNodes`: the fan-out of gossip. Every `gossip_interval_s`
    while news waits in the piggyback queue, it goes to this many random members
    (memberlist's GossipNodes); it is also the number of helpers asked to probe
    a member indirectly (ping-req) after a direct probe times out (memberlist's
    IndirectChecks, also 3 by default). Higher values spread news faster and
    tolerate more packet loss before a false suspicion, at the cost of more
    datagrams per gossip tick and per failed direct probe."""

    probe_interval_s: float = 5.0
    """`spec.swim.probeInterval`, seconds: time between probe rounds, each of
    which probes one member. Lifeguard multiplies it by (LHM + 1). Shorter
    intervals detect failures sooner but cost proportionally more packets."""

    suspicion_timeout_s: float = 10.0
    """`spec.swim.suspicionTimeout`, seconds: the shortest time a suspect member
    is given to refute before it is declared dead, reached once K
    (`suspicion_confirmations`) independent confirmations arrived. This is
    memberlist's minimum suspicion timeout, which memberlist derives as
    SuspicionMult * max(1, log10(n)) * ProbeInterval; Grid takes it as given.
    Longer values lower false deaths under loss or load; shorter values declare
    real failures sooner."""

    probe_timeout_s: float = PROBE_TIMEOUT_S
    """Seconds to wait for a direct ack before asking helpers (ping-req); also
    scaled by (LHM + 1). Set near the 99th percentile round-trip time: too low
    causes needless indirect probes, too high leaves little of the probe interval
    for the indirect probes to finish."""

    suspicion_confirmations: int = 2
    """K, the number of independent suspicion confirmations (suspicions of the
    same member from other accusers) that shrink the suspicion timeout from its
    maximum to `suspicion_timeout_s` (Lifeguard). memberlist uses
    SuspicionMult - 2, which is 2 at its default multiplier of 4. With fewer than
    K other members to confirm, the timer starts at the minimum. Higher values
    demand more agreement before a fast verdict; lower values detect sooner."""

    gossip_interval_s: float = 0.2
    """Seconds between gossip ticks (memberlist's GossipInterval, 200 ms on a
    LAN). On each tick with news in the piggyback queue, a piggyback-only
    datagram goes to `gossip_nodes` random members; an empty queue sends
    nothing. 0 disables the tick, leaving gossip to ride on probe traffic only.
    Shorter intervals spread suspicions, deaths and items faster (failure
    detection then waits on probe and suspicion time, not on spread) at the
    cost of burstier traffic while news is pending."""

    gossip_to_dead_s: float = 30.0
    """Seconds after a member is declared dead during which gossip ticks may
    still pick it (memberlist's GossipToTheDeadTime, 30 s on a LAN), so that a
    member wrongly declared dead learns it and refutes. 0 gossips to live
    members only."""

    suspicion_max_timeout_mult: float = 6.0
    """The suspicion timeout starts at this multiple of `suspicion_timeout_s`
    and shrinks toward it as confirmations arrive (Lifeguard). Higher values
    give a lone, possibly unhealthy accuser's suspicion more time to be refuted;
    lower values bound detection time more tightly."""

    awareness_max_multiplier: int = 8
    """Lifeguard local health: the multiplier (LHM + 1) never exceeds this, so
    the LHM stays in [0, awareness_max_multiplier - 1]. Higher values let a
    struggling node slow its probing (and its accusations) further."""

    retransmit_mult: int = 4
    """λ: each piggybacked update is sent about λ·⌈log10(n + 1)⌉ times by every
    member that queues it. Higher values make dissemination more robust to loss
    and raise bandwidth; lower values risk members missing an update until the
    next push-pull."""

    push_pull_interval_s: float = 30.0
    """Seconds between TCP anti-entropy exchanges with one random live member;
    0 disables the periodic exchange (the join exchange still happens). Shorter
    intervals repair missed gossip and heal partitions sooner but each exchange
    carries the whole member table and item set."""

    oversize_push_pull_interval_s: float = 1.0
    """Least seconds between two push-pull rounds that spread an item too large
    for a datagram (`grid.core.swim.oversize`): such an item is exchanged with
    up to `gossip_nodes` members at once instead of waiting for the periodic
    push-pull. 0 leaves such items to the periodic push-pull. Shorter intervals
    spread a large, often-changing lane (say, a site's state with its spend)
    sooner at the cost of more exchanges."""

    push_pull_scale_threshold: int = 32
    """Above this many members the push-pull interval grows with the cluster:
    it is multiplied by 1 + ⌈log2(n) - log2(threshold)⌉ (memberlist's scaling),
    so the total anti-entropy traffic grows about as n·log n, not n². Lower
    thresholds save bandwidth in mid-sized clusters and slow repair there."""

    datagram_budget_bytes: int = 1400
    """Largest plaintext datagram (SPEC-DECISIONS §3). Piggybacked updates and
    items are added while they fit; what never fits travels by push-pull."""

    dead_retention_s: float = 60.0
    """Seconds a dead or left member stays in the table as a tombstone, so that
    stale Alive gossip cannot resurrect it and push-pull can tell others. Longer
    retention guards better against resurrection and costs table space."""

    nack_timeout_fraction: float = 0.8
    """A ping-req helper sends a nack when the target has not acked within this
    fraction of its probe timeout, early enough for the requester to count it.
    Too close to 1 and nacks arrive after the requester stopped waiting."""

    member_table_max: int = 1024
    """Records the member table holds, tombstones included, the local member
    excluded. A newcomer beyond it takes the place of the oldest tombstone, or
    is refused and counted (``refused["table_full"]``). It bounds the memory and
    the probe cycle a flood of announcements could claim; 1,024 is also what one
    push-pull message carries (`CodecLimits.members_max`). Raise both together
    for larger meshes."""

    unproven_max: int = 128
    """Announced members held while they prove themselves (a direct answer to a
    challenge, or the verifier's word), one per address. Beyond it an announced
    member is refused and counted (``refused["unproven_full"]``) and is heard
    of again later. More room admits a mass join sooner; less bounds what a
    flood of fake names can hold."""

    unproven_probe_rate_per_s: float = 20.0
    """Challenge pings per second to addresses of unproven members (a token
    bucket, `unproven_probe_burst` deep). Each challenge is one datagram of
    about 130 bytes carrying only our own Alive, so this bounds the traffic
    anyone holding the SWIM key can spray at addresses by announcing fake
    members there (one address draws at most `proof_attempts` per
    `unproven_retry_s`). Higher admits a long join wave faster; lower
    reflects less."""

    unproven_probe_burst: int = 128
    """The depth of the challenge token bucket: how many challenges may go out
    at once after a quiet spell. A mesh that starts at once has every member
    challenge every other within one burst (128 members join everywhere in
    well under a second in simulation; at a depth of 32, about 11 s).
    Shallower caps the burst one flood can draw, at most `unproven_max`
    applicants times `proof_attempts` datagrams in any case."""

    proof_attempts: int = 2
    """Challenges sent to one unproven member, each waiting `probe_timeout_s`,
    before it is dropped (counted as ``unanswered``). More survives loss on the
    challenge path; fewer sends less to addresses that never answer."""

    unproven_retry_s: float = 30.0
    """Seconds an address whose challenges all went unanswered is not challenged
    again (announcements of it are refused as ``cooling_down``). A member that was
    unreachable when first announced waits up to this long, unless a seed's
    push-pull reply lists it; a flood aimed at one address draws at most
    `proof_attempts` datagrams per this interval from each member it reaches."""

    def __post_init__(self) -> None:
        if self.gossip_nodes < 0:
            raise ValidationError("must be >= 0", path="spec.swim.gossipNodes")
        if self.probe_interval_s <= 0:
            raise ValidationError("must be positive", path="spec.swim.probeInterval")
        if self.suspicion_timeout_s <= 0:
            raise ValidationError("must be positive", path="spec.swim.suspicionTimeout")
        if not 0 < self.probe_timeout_s <= self.probe_interval_s:
            raise ValidationError("must be in (0, probe_interval_s]", path="probe_timeout_s")
        if self.suspicion_confirmations < 0:
            raise ValidationError("must be >= 0", path="suspicion_confirmations")
        if self.gossip_interval_s < 0:
            raise ValidationError("must be >= 0", path="gossip_interval_s")
        if self.gossip_to_dead_s < 0:
            raise ValidationError("must be >= 0", path="gossip_to_dead_s")
        if self.suspicion_max_timeout_mult < 1:
            raise ValidationError("must be >= 1", path="suspicion_max_timeout_mult")
        if self.awareness_max_multiplier < 1:
            raise ValidationError("must be >= 1", path="awareness_max_multiplier")
        if self.retransmit_mult < 1:
            raise ValidationError("must be >= 1", path="retransmit_mult")
        if self.push_pull_interval_s < 0:
            raise ValidationError("must be >= 0", path="push_pull_interval_s")
        if self.oversize_push_pull_interval_s < 0:
            raise ValidationError("must be >= 0", path="oversize_push_pull_interval_s")
        if self.push_pull_scale_threshold < 1:
            raise ValidationError("must be >= 1", path="push_pull_scale_threshold")
        if self.datagram_budget_bytes < 128:
            raise ValidationError("must be >= 128", path="datagram_budget_bytes")
        if not 0 < self.nack_timeout_fraction < 1:
            raise ValidationError("must be in (0, 1)", path="nack_timeout_fraction")
        for name in ("member_table_max", "unproven_probe_burst", "proof_attempts"):
            if getattr(self, name) < 1:
                raise ValidationError("must be >= 1", path=name)
        if self.unproven_max < 0:
            raise ValidationError("must be >= 0", path="unproven_max")
        if self.unproven_probe_rate_per_s <= 0:
            raise ValidationError("must be positive", path="unproven_probe_rate_per_s")
        if self.unproven_retry_s < 0:
            raise ValidationError("must be >= 0", path="unproven_retry_s")

    @classmethod
    def from_spec(
        cls,
        *,
        gossip_nodes: int = 3,
        probe_interval_s: float = 5.0,
        suspicion_timeout_s: float = 10.0,
    ) -> SwimConfig:
        """Build from `GridNetwork.spec.swim` values (durations already in seconds).

        The probe timeout is the default, shortened to half the probe interval when
        the interval is short: a direct probe must time out within its round, with
        time left for the indirect probes.
        """
        return cls(
            gossip_nodes=gossip_nodes,
            probe_interval_s=probe_interval_s,
            suspicion_timeout_s=suspicion_timeout_s,
            probe_timeout_s=min(PROBE_TIMEOUT_S, probe_interval_s / 2),
        )

    @property
    def suspicion_max_s(self) -> float:
        """The suspicion timeout with no confirmations (its starting value)."""
        return self.suspicion_timeout_s * self.suspicion_max_timeout_mult

    def push_pull_interval(self, members: int) -> float:
        """The periodic push-pull interval for `members` known members."""
        if members <= self.push_pull_scale_threshold:
            return self.push_pull_interval_s
        scale = math.ceil(math.log2(members) - math.log2(self.push_pull_scale_threshold))
        return self.push_pull_interval_s * (1 + scale)

    def retransmit_limit(self, members: int) -> int:
        """How many times each node sends one update, for `members` known members."""
        return self.retransmit_mult * max(1, math.ceil(math.log10(members + 1)))

    def oversize_rounds(self, members: int) -> int:
        """Push-pull rounds each holder gives an oversize item: ⌈log10(n + 1)⌉."""
        return max(1, math.ceil(math.log10(members + 1)))
