"""Behaviour of the SWIM machine fed inputs by hand: probing, suspicion, lifecycle."""

from __future__ import annotations

import random

import pytest

from grid.core.swim.config import SwimConfig
from grid.core.swim.effects import (
    Effect,
    EventKind,
    Notify,
    ProbeTick,
    ProbeTimeout,
    PushPullRequest,
    RelayTimeout,
    Schedule,
    Send,
    SuspicionTimeout,
)
from grid.core.swim.machine import SwimMachine
from grid.core.swim.members import Member, MemberState
from grid.core.swim.messages import Ack, Alive, Dead, Nack, Ping, PingReq, Suspect
from grid.core.swim.suspicion import suspicion_timeout_s
from grid.core.wire.codec import encoded_size
from grid.errors import TransitionError

from .conftest import MachineFactory, peer_address


def sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def schedules(effects: list[Effect], kind: type) -> list[Schedule]:
    return [e for e in effects if isinstance(e, Schedule) and isinstance(e.timer, kind)]


def notices(effects: list[Effect]) -> list[Notify]:
    return [e for e in effects if isinstance(e, Notify)]


def probe_tick(effects: list[Effect]) -> ProbeTick:
    timer = schedules(effects, ProbeTick)[0].timer
    assert isinstance(timer, ProbeTick)
    return timer


def test_probe_round_pings_then_asks_k_helpers_then_suspects(make_machine: MachineFactory):
    machine, joined = make_machine(peers=5)
    tick = probe_tick(joined)
    out = machine.handle_timer(tick, 1.0)
    ping = sends(out)[0]
    assert isinstance(ping.message, Ping)
    target = ping.message.target
    assert target is not None
    timeout = schedules(out, ProbeTimeout)[0]
    assert timeout.at == pytest.approx(1.0 + machine.config.probe_timeout_s)

    reqs = sends(machine.handle_timer(timeout.timer, timeout.at))
    assert len(reqs) == machine.config.gossip_nodes
    assert all(isinstance(r.message, PingReq) and r.message.target == target for r in reqs)
    assert target not in {r.message.source for r in reqs}

    concluded = machine.handle_timer(tick, 6.0)
    assert [(n.kind, n.member) for n in notices(concluded)] == [(EventKind.SUSPECT, target)]
    member = machine.member(target)
    assert member is not None and member.state is MemberState.SUSPECT
    # Lifeguard: no helper nacked, so the fault is likely ours: +1 per missing nack.
    assert machine.local_health == 3


def test_nacks_from_every_helper_spare_local_health(make_machine: MachineFactory):
    machine, joined = make_machine(peers=5)
    tick = probe_tick(joined)
    out = machine.handle_timer(tick, 1.0)
    seq = sends(out)[0].message.seq
    reqs = sends(machine.handle_timer(ProbeTimeout(seq), 2.0))
    for req in reqs:
        machine.handle_packet(req.address, Nack(seq, req.message.target), 2.5)
    machine.handle_timer(tick, 6.0)
    assert machine.local_health == 0


def test_local_health_scales_probe_interval_and_decays_on_acks(make_machine: MachineFactory):
    config = SwimConfig(gossip_nodes=0)
    machine, joined = make_machine(peers=3, config=config)
    tick = probe_tick(joined)
    now = 1.0
    for _ in range(2):  # two failed probes without helpers: +1 each
        machine.handle_timer(tick, now)
        now += 5.0
    out = machine.handle_timer(tick, now)
    assert machine.local_health == 2
    next_tick = schedules(out, ProbeTick)[0]
    assert next_tick.at == pytest.approx(now + config.probe_interval_s * 3)
    timeout = schedules(out, ProbeTimeout)[0]
    assert timeout.at == pytest.approx(now + config.probe_timeout_s * 3)
    ping = sends(out)[0]
    machine.handle_packet(ping.address, Ack(ping.message.seq, "x"), now + 0.1)
    assert machine.local_health == 1


def test_local_health_is_capped(make_machine: MachineFactory):
    config = SwimConfig(gossip_nodes=0, awareness_max_multiplier=3)
    machine, joined = make_machine(peers=3, config=config)
    tick = probe_tick(joined)
    for step in range(6):
        machine.handle_timer(tick, 1.0 + 30.0 * step)
    assert machine.local_health == 2


def test_suspect_member_refutes_with_higher_incarnation(make_machine: MachineFactory):
    machine, _ = make_machine()
    before = machine.incarnation
    accusation = Suspect("me", machine.address, before, "p1")
    out = machine.handle_packet(peer_address(1), Ping(9, "p1", "me", updates=(accusation,)), 1.0)
    assert machine.incarnation == before + 1
    ack = sends(out)[0].message
    assert isinstance(ack, Ack)
    assert Alive("me", machine.address, before + 1) in ack.updates
    assert machine.local_health == 1  # having to refute raises the LHM


def test_stale_accusation_is_ignored(make_machine: MachineFactory):
    machine, _ = make_machine()
    machine.handle_packet(
        peer_address(1), Ping(1, "p1", "me", updates=(Dead("me", "", 0, "p1"),)), 1.0
    )
    assert machine.incarnation == 1
    machine.handle_packet(
        peer_address(1), Ping(2, "p1", "me", updates=(Suspect("me", "", 0, "p2"),)), 2.0
    )
    assert machine.incarnation == 1


def test_refutation_by_higher_incarnation_clears_suspicion(make_machine: MachineFactory):
    machine, _ = make_machine()
    out = machine.handle_packet(
        peer_address(1), Ping(1, "p1", "me", updates=(Suspect("p2", "", 0, "p1"),)), 1.0
    )
    timer = schedules(out, SuspicionTimeout)[0]
    out = machine.handle_packet(
        peer_address(2), Ping(2, "p2", "me", updates=(Alive("p2", peer_address(2), 1),)), 2.0
    )
    assert [(n.kind, n.member, n.incarnation) for n in notices(out)] == [(EventKind.ALIVE, "p2", 1)]
    assert machine.handle_timer(timer.timer, timer.at) == []
    member = machine.member("p2")
    assert member is not None and member.state is MemberState.ALIVE


def test_dynamic_suspicion_timeout_shrinks_with_confirmations(make_machine: MachineFactory):
    machine, _ = make_machine(peers=6, config=SwimConfig(suspicion_confirmations=3))
    cfg = machine.config
    deadlines = []
    for accuser, now in (("p1", 10.0), ("p3", 11.0), ("p4", 12.0), ("p3", 13.0)):
        update = Suspect("p2", peer_address(2), 0, accuser)
        out = machine.handle_packet(peer_address(1), Ping(1, accuser, "me", updates=(update,)), now)
        deadlines.append([s.at for s in schedules(out, SuspicionTimeout)])
    expected = [
        10.0 + suspicion_timeout_s(c, 3, cfg.suspicion_timeout_s, cfg.suspicion_max_s)
        for c in range(3)
    ]
    assert deadlines == [[expected[0]], [expected[1]], [expected[2]], []]
    assert expected[0] == pytest.approx(10.0 + 60.0)
    assert expected[1] < expected[0] and expected[2] < expected[1]
    # The first, later timer is now stale; the shortened one declares death.
    assert machine.handle_timer(SuspicionTimeout("p2", 0), expected[2] - 1.0) == []
    out = machine.handle_timer(SuspicionTimeout("p2", 0), expected[2])
    assert [(n.kind, n.member) for n in notices(out)] == [(EventKind.DEAD, "p2")]
    assert machine.handle_timer(SuspicionTimeout("p2", 0), expected[0]) == []


def test_default_k_is_memberlists_two_confirmations(make_machine: MachineFactory):
    machine, _ = make_machine(peers=6)
    cfg = machine.config
    assert cfg.suspicion_confirmations == 2
    deadlines = []
    for accuser, now in (("p1", 10.0), ("p3", 11.0), ("p4", 12.0), ("p5", 13.0)):
        update = Suspect("p2", peer_address(2), 0, accuser)
        out = machine.handle_packet(peer_address(1), Ping(1, accuser, "me", updates=(update,)), now)
        deadlines.append([s.at for s in schedules(out, SuspicionTimeout)])
    # Two confirmations (p3, p4) bring the deadline to the minimum; p5 changes nothing.
    assert deadlines[2] == [pytest.approx(10.0 + cfg.suspicion_timeout_s)]
    assert deadlines[3] == []


def test_tiny_cluster_suspicion_starts_at_minimum(make_machine: MachineFactory):
    machine, _ = make_machine(peers=2)
    update = Suspect("p2", peer_address(2), 0, "p1")
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=(update,)), 5.0)
    assert schedules(out, SuspicionTimeout)[0].at == pytest.approx(5.0 + 10.0)


def test_probing_a_suspect_tells_it_so(make_machine: MachineFactory):
    machine, joined = make_machine(peers=2)
    accusation = Suspect("p1", peer_address(1), 0, "p2")
    machine.handle_packet(peer_address(2), Ping(1, "p2", "me", updates=(accusation,)), 0.5)
    tick, now = probe_tick(joined), 1.0
    while True:  # the permutation reaches p1 within two rounds
        out = machine.handle_timer(tick, now)
        ping = sends(out)[0].message
        if isinstance(ping, Ping) and ping.target == "p1":
            break
        machine.handle_packet(peer_address(2), Ack(ping.seq, "p2"), now + 0.1)
        now += machine.config.probe_interval_s
    assert ping.updates[0] == accusation


def test_an_accusation_by_a_stranger_counts_for_nothing(make_machine: MachineFactory):
    machine, _ = make_machine(peers=2)
    lies = (Suspect("p1", peer_address(1), 0, "stranger"), Dead("p2", peer_address(2), 0, "x"))
    out = machine.handle_packet(peer_address(1), Ping(1, "p1", "me", updates=lies), 1.0)
    assert notices(out) == [] and machine.suspect_count == 0
    assert {m.id for m in machine.members() if m.state is MemberState.ALIVE} == {"p1", "p2"}
    # About ourselves it is still refuted (safe), without counting against our health.
    machine.handle_packet(
        peer_address(1),
        Ping(2, "p1", "me", updates=(Suspect("me", machine.address, 0, "stranger"),)),
        2.0,
    )
    assert machine.incarnation == 1 and machine.local_health == 0


def test_ping_req_helper_relays_ack_or_nacks(make_machine: MachineFactory):
    machine, _ = make_machine()
    out = machine.handle_packet(peer_address(1), PingReq(77, "p1", "p2", peer_address(2)), 1.0)
    probe = sends(out)[0]
    assert probe.address == peer_address(2) and probe.message.target == "p2"
    relay_timer = schedules(out, RelayTimeout)[0]
    assert relay_timer.at == pytest.approx(1.0 + 0.8 * machine.config.probe_timeout_s)
    out = machine.handle_packet(peer_address(2), Ack(probe.message.seq, "p2"), 1.2)
    relayed = sends(out)[0]
    assert relayed.address == peer_address(1)
    assert (type(relayed.message), relayed.message.seq) == (Ack, 77)
    assert machine.handle_timer(relay_timer.timer, relay_timer.at) == []

    out = machine.handle_packet(peer_address(1), PingReq(78, "p1", "p3", peer_address(3)), 2.0)
    nack_timer = schedules(out, RelayTimeout)[0]
    nack = sends(machine.handle_timer(nack_timer.timer, nack_timer.at))[0]
    assert nack.address == peer_address(1)
    assert (type(nack.message), nack.message.seq) == (Nack, 78)


def test_ping_for_another_member_is_ignored(make_machine: MachineFactory):
    machine, _ = make_machine()
    assert machine.handle_packet(peer_address(1), Ping(1, "p1", "someone-else"), 1.0) == []


def peer_of(address_index: int, knows: SwimMachine) -> SwimMachine:
    peer = SwimMachine(
        f"p{address_index}", peer_address(address_index), rng=random.Random(5), size_of=encoded_size
    )
    peer.restore({"me": Member("me", knows.address, knows.incarnation, MemberState.ALIVE)})
    peer.join((), 0.0)
    return peer


def test_graceful_leave_is_left_not_failed_and_rejoin_wins(make_machine: MachineFactory):
    machine, _ = make_machine(peers=3)
    peer = peer_of(1, machine)
    farewells = sends(machine.leave(5.0))
    assert {f.address for f in farewells} == {peer_address(i) for i in (1, 2, 3)}
    farewell = next(f for f in farewells if f.address == peer_address(1)).message
    assert farewell.updates == (Dead("me", machine.address, 1, "me"),)
    out = peer.handle_packet(machine.address, farewell, 5.1)
    assert [(n.kind, n.member) for n in notices(out)] == [(EventKind.LEFT, "me")]
    record = peer.member("me")
    assert record is not None and record.state is MemberState.LEFT

    # A left member is silent until it rejoins.
    assert machine.handle_packet(peer_address(1), Ping(3, "p1", "me"), 6.0) == []
    rejoin = machine.join([peer_address(1)], 10.0)
    assert machine.incarnation == 2
    request = next(e for e in rejoin if isinstance(e, PushPullRequest))
    reply, out = peer.handle_push_pull(request.message, 10.1)
    about_me = [(n.kind, n.incarnation) for n in notices(out) if n.member == "me"]
    assert about_me == [(EventKind.ALIVE, 2)]
    machine.handle_push_pull_reply(peer_address(1), reply, 10.2)
    assert machine.incarnation == 2
    with pytest.raises(TransitionError):
        machine.join((), 11.0)


def test_restarted_member_outranks_its_old_incarnation(make_machine: MachineFactory):
    machine, _ = make_machine(peers=1)
    # A peer still remembers a previous life of "me" at incarnation 7.
    ping = Ping(1, "p1", "me", updates=(Alive("me", machine.address, 7),))
    machine.handle_packet(peer_address(1), ping, 1.0)
    assert machine.incarnation == 8


def test_remote_dead_in_push_pull_only_suspects(make_machine: MachineFactory):
    machine, _ = make_machine(peers=3)
    remote = machine.push_pull_message(join=False)
    buried = tuple(
        Dead(u.member, u.address, u.incarnation, "p3") if u.member == "p2" else u
        for u in remote.members
    )
    _, out = machine.handle_push_pull(type(remote)("p3", buried, remote.items, False), 3.0)
    assert [(n.kind, n.member) for n in notices(out)] == [(EventKind.SUSPECT, "p2")]


def test_ack_tells_a_suspected_pinger_what_we_hold_against_it(make_machine: MachineFactory):
    machine, _ = make_machine()
    accusation = Suspect("p1", peer_address(1), 0, "p2")
    machine.handle_packet(peer_address(2), Ping(1, "p2", "me", updates=(accusation,)), 1.0)
    ack = sends(machine.handle_packet(peer_address(1), Ping(2, "p1", "me"), 2.0))[0].message
    assert isinstance(ack, Ack) and ack.updates[0] == accusation
    clean = sends(machine.handle_packet(peer_address(3), Ping(3, "p3", "me"), 2.5))[0].message
    assert all(u.member != "p3" for u in clean.updates)


def test_ping_req_about_ourselves_is_answered_directly(make_machine: MachineFactory):
    machine, _ = make_machine()
    out = machine.handle_packet(peer_address(1), PingReq(5, "p1", "me", machine.address), 1.0)
    assert [(s.address, type(s.message), s.message.seq) for s in sends(out)] == [
        (peer_address(1), Ack, 5)
    ]
    assert schedules(out, RelayTimeout) == []
