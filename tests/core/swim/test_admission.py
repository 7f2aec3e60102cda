"""Members are admitted, not announced: challenges, the verifier, trusted tables and the caps."""

from __future__ import annotations

import random

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import Effect, ProofTick, ProofTimeout, Schedule, Send
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import Ack, Alive, Dead, Gossip, Ping, PushPull, Suspect
from grid.core.wire.codec import encoded_size

from .conftest import MachineFactory, answer_challenges, peer_address

SINK = "10.66.6.6:7946"


def fakes(count: int, address: str | None = SINK) -> list[Alive]:
    return [
        Alive(f"fake-{i:04d}", address or f"10.77.{i // 250}.{i % 250}:7946", 0)
        for i in range(count)
    ]


def flood(machine: SwimMachine, updates: list[Alive], now: float) -> list[Effect]:
    """The announcements in Gossip datagrams of 38 updates each, as the probe sent them."""
    out: list[Effect] = []
    for start in range(0, len(updates), 38):
        chunk = tuple(updates[start : start + 38])
        out += machine.handle_packet("10.99.0.1:7946", Gossip("mallory", updates=chunk), now)
    return out


def sends_to(effects: list[Effect], address: str) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and e.address == address]


def fire_all(machine: SwimMachine, effects: list[Effect], until: float) -> list[Effect]:
    """Run the admission timers among `effects` (and those they set) up to `until`."""
    seen: list[Effect] = list(effects)
    pending = [e for e in effects if isinstance(e, Schedule)]
    while pending:
        pending.sort(key=lambda s: s.at)
        due = pending.pop(0)
        if due.at > until:
            break
        if isinstance(due.timer, ProofTimeout | ProofTick):
            out = machine.handle_timer(due.timer, due.at)
            seen += out
            pending += [e for e in out if isinstance(e, Schedule)]
    return seen


def test_3000_fakes_at_one_address_never_enter_the_table_and_draw_two_challenges(
    make_machine: MachineFactory,
):
    machine, _ = make_machine(peers=3)
    out = flood(machine, fakes(3000), 1.0)
    assert machine.live_count == 3 and len(machine.members()) == 3
    assert machine.unproven_count == 1  # one applicant per address
    assert machine.admission.refused["address_taken"] == 2999
    effects = fire_all(machine, out, until=100.0)
    challenges = sends_to(effects, SINK)
    assert len(challenges) == machine.config.proof_attempts
    # A challenge carries no piggyback, only our own Alive.
    me = Alive("me", machine.address, machine.incarnation)
    assert all(isinstance(c.message, Ping) and c.message.updates == (me,) for c in challenges)
    assert machine.unproven_count == 0 and machine.admission.unanswered == 1
    # Announced again while the address cools down: refused, nothing sent.
    again = flood(machine, fakes(38), 20.0)
    assert sends_to(again, SINK) == [] and machine.admission.refused["cooling_down"] == 38
    # Nothing about the fakes is gossiped or listed in push-pull.
    assert machine.queued() == 0 or all(
        not u.member.startswith("fake") for u in machine.push_pull_message(join=False).members
    )
    assert len(machine.push_pull_message(join=False).members) == 4


def test_fakes_at_many_addresses_are_capped_and_challenged_at_the_budgeted_rate(
    make_machine: MachineFactory,
):
    config = SwimConfig(unproven_max=64, unproven_probe_rate_per_s=10, unproven_probe_burst=8)
    machine, _ = make_machine(peers=3, config=config)
    out = flood(machine, fakes(3000, address=None), 1.0)
    assert machine.unproven_count == 64
    assert machine.admission.refused["unproven_full"] == 3000 - 64
    assert len(machine.members()) == 3
    effects = fire_all(machine, out, until=5.0)
    challenged = [e for e in effects if isinstance(e, Send) and e.address.startswith("10.77.")]
    # A burst of 8, then 10 per second: at most 8 + 4 * 10 by t = 5 s.
    assert len(challenged) <= 8 + 4 * 10 + 1
    assert len(challenged) >= 8 + 3 * 10


def test_an_answer_from_the_member_admits_it_and_only_then_it_spreads(
    make_machine: MachineFactory,
):
    machine, _ = make_machine(peers=3)
    newcomer = Alive("newcomer", "10.5.5.5:7946", 2)
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(newcomer,)), 1.0)
    assert machine.member("newcomer") is None and machine.transmits_of("newcomer") is None
    challenge = sends_to(out, newcomer.address)[0].message
    assert isinstance(challenge, Ping) and challenge.target == "newcomer"
    # An ack in the wrong name, or for another sequence, proves nothing.
    machine.handle_packet(newcomer.address, Ack(challenge.seq, "someone"), 1.1)
    machine.handle_packet(newcomer.address, Ack(challenge.seq + 1, "newcomer"), 1.1)
    assert machine.member("newcomer") is None
    answered = machine.handle_packet(newcomer.address, Ack(challenge.seq, "newcomer"), 1.2)
    record = machine.member("newcomer")
    assert record is not None and record.state is MemberState.ALIVE and record.incarnation == 2
    assert machine.admission.answered == 1 and machine.transmits_of("newcomer") == 0
    assert [n for n in answered if getattr(n, "member", "") == "newcomer"]


def test_the_verifier_admits_a_new_name_but_never_a_new_address(make_machine: MachineFactory):
    machine = SwimMachine(
        "me",
        "10.0.0.254:7946",
        rng=random.Random(1),
        size_of=encoded_size,
        vouch=lambda alive: alive.member == "certified",
    )
    machine.restore({"p1": Member("p1", peer_address(1), 0, MemberState.ALIVE)})
    machine.join((), 0.0)
    certified = Alive("certified", "10.5.5.5:7946", 0)
    updates = (certified, Alive("other", "10.5.5.6:7946", 0))
    machine.handle_packet(peer_address(1), Gossip("p1", updates=updates), 1.0)
    assert machine.member("certified") is not None and machine.member("other") is None
    assert machine.admission.vouched == 1
    moved = Alive("certified", SINK, 5)
    out = machine.handle_packet(peer_address(1), Gossip("p1", updates=(moved,)), 2.0)
    record = machine.member("certified")
    assert record is not None and record.address == certified.address  # not moved yet
    assert sends_to(out, SINK)  # the new address must answer for itself
    answer_challenges(machine, out, 2.1)
    record = machine.member("certified")
    assert record is not None and (record.address, record.incarnation) == (SINK, 5)


def test_a_seeds_reply_admits_its_members_and_other_tables_only_announce(
    make_machine: MachineFactory,
):
    machine, _ = make_machine(peers=1, seeds=(peer_address(1),))
    listed = tuple(Alive(f"n{i}", f"10.0.1.{i}:7946", 0) for i in range(1, 6))
    machine.handle_push_pull_reply(peer_address(1), PushPull("p1", listed, ()), 1.0)
    assert {f"n{i}" for i in range(1, 6)} <= {m.id for m in machine.members()}
    others = tuple(Alive(f"m{i}", f"10.0.2.{i}:7946", 0) for i in range(1, 6))
    machine.handle_push_pull_reply("10.0.2.1:7946", PushPull("m1", others, ()), 2.0)
    _, _ = machine.handle_push_pull(PushPull("m1", others, ()), 2.5)
    assert not {m.id for m in machine.members()} & {f"m{i}" for i in range(1, 6)}
    assert machine.unproven_count == 5


def test_a_full_table_gives_up_its_oldest_tombstone_then_refuses(make_machine: MachineFactory):
    machine, _ = make_machine(peers=3, config=SwimConfig(member_table_max=4))
    p1 = machine.member("p1")
    assert p1 is not None
    machine.handle_packet(
        peer_address(2), Gossip("p2", updates=(Dead("p1", p1.address, 0, "p2"),)), 1
    )
    for index, name in enumerate(("a", "b")):
        alive = Alive(name, f"10.3.3.{index}:7946", 0)
        out = machine.handle_packet(peer_address(2), Gossip("p2", updates=(alive,)), 2.0)
        answer_challenges(machine, out, 2.1)
    ids = {m.id for m in machine.members()}
    assert ids == {"p2", "p3", "a", "b"}  # "b" took the place of p1's tombstone
    assert len(machine.members()) == 4
    assert machine.admission.refused["table_full"] == 0
    out = machine.handle_packet(
        peer_address(2), Gossip("p2", updates=(Alive("c", "10.3.3.9:7946", 0),)), 3.0
    )
    answer_challenges(machine, out, 3.1)
    assert machine.member("c") is None and machine.admission.refused["table_full"] == 1


def test_an_applicant_is_never_probed_gossiped_to_or_counted(make_machine: MachineFactory):
    machine, joined = make_machine(peers=2)
    machine.handle_packet(peer_address(1), Gossip("p1", updates=tuple(fakes(1))), 0.5)
    # An accusation by the applicant counts for nothing.
    lie = Suspect("p1", peer_address(1), 0, "fake-0000")
    machine.handle_packet(SINK, Gossip("fake-0000", updates=(lie,)), 0.6)
    assert machine.suspect_count == 0
    ticks = [e for e in joined if isinstance(e, Schedule)]
    targets: set[str] = set()
    now = 1.0
    for _ in range(20):
        for tick in ticks:
            for effect in machine.handle_timer(tick.timer, now):
                if isinstance(effect, Send) and effect.message.updates:
                    targets.add(effect.address)
        now += 1.0
    assert SINK not in targets  # only the bare challenges ever went there
    assert machine.live_count == 2 and machine.member("fake-0000") is None


def test_an_answer_that_comes_after_the_timeout_still_admits_while_the_address_cools(
    make_machine: MachineFactory,
):
    """On saturated cores acks come late; they prove the member as well as a timely one."""
    machine, _ = make_machine(peers=3)
    newcomer = Alive("newcomer", "10.5.5.5:7946", 1)
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(newcomer,)), 1.0)
    effects = fire_all(machine, out, until=5.0)  # both challenges time out
    first, second = (s.message for s in sends_to(effects, newcomer.address))
    assert isinstance(first, Ping) and isinstance(second, Ping)
    assert machine.unproven_count == 0 and machine.admission.unanswered == 1
    # A stranger holding the number, or a number we never sent, proves nothing.
    machine.handle_packet(newcomer.address, Ack(first.seq, "someone"), 5.5)
    machine.handle_packet(newcomer.address, Ack(first.seq ^ 1, "newcomer"), 5.5)
    assert machine.member("newcomer") is None
    # The first challenge's answer, seconds late: admitted, the address no longer cools.
    machine.handle_packet(newcomer.address, Ack(first.seq, "newcomer"), 6.0)
    record = machine.member("newcomer")
    assert record is not None and record.state is MemberState.ALIVE
    assert machine.admission.answered == 1 and machine.admission.answered_late == 1
    flood(machine, [Alive("other", newcomer.address, 0)], 7.0)
    assert machine.admission.refused["cooling_down"] == 0
    # Its other challenge is spent: a second answer does nothing more.
    machine.handle_packet(newcomer.address, Ack(second.seq, "newcomer"), 6.1)
    assert machine.admission.answered == 1


def test_a_late_answer_after_the_address_has_cooled_proves_nothing(
    make_machine: MachineFactory,
):
    machine, _ = make_machine(peers=3)
    newcomer = Alive("newcomer", "10.5.5.5:7946", 1)
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(newcomer,)), 1.0)
    effects = fire_all(machine, out, until=5.0)
    first = sends_to(effects, newcomer.address)[0].message
    assert isinstance(first, Ping)
    later = 5.0 + machine.config.unproven_retry_s
    # Announced again once the address has cooled: a fresh applicant, fresh challenges.
    again = machine.handle_packet(peer_address(2), Ping(2, "p2", "me", updates=(newcomer,)), later)
    fresh = sends_to(again, newcomer.address)[0].message
    assert isinstance(fresh, Ping) and fresh.seq != first.seq
    machine.handle_packet(newcomer.address, Ack(first.seq, "newcomer"), later + 0.1)
    assert machine.member("newcomer") is None and machine.admission.answered_late == 0
    machine.handle_packet(newcomer.address, Ack(fresh.seq, "newcomer"), later + 0.2)
    assert machine.member("newcomer") is not None and machine.admission.answered == 1
