"""A simulated 64-member mesh through the live view's model: every member, every observer."""

from __future__ import annotations

from grid.core.swim.members import MemberState
from grid.testing.live_view import detection_bound_s, simulated_view
from grid.testing.simulator import Simulator

MEMBERS = 64


def _states(view: dict, member: str) -> set[str]:
    row = next(m for m in view["members"] if m["id"] == member)
    return {seen["state"] for seen in row["views"].values()}


def test_64_members_alive_in_every_column_then_one_dies(sim_seed: int) -> None:
    sim = Simulator(sim_seed)
    nodes = [sim.add_node() for _ in range(MEMBERS)]
    sim.bootstrap(nodes)
    assert sim.run_until(sim.full_membership, timeout_s=30, check_every_s=0.5) is not None
    view = simulated_view(sim)
    assert len(view["sites"]) == MEMBERS and len(view["members"]) == MEMBERS
    assert all(len(m["views"]) == MEMBERS for m in view["members"])
    assert all(_states(view, n.id) == {"alive"} for n in nodes)

    victim = nodes[7]
    sim.kill(victim)
    bound = detection_bound_s(sim.config, MEMBERS)
    others = nodes[:7] + nodes[8:]
    done = sim.run_until(
        lambda: all(n.state_of(victim.id) is MemberState.DEAD for n in others),
        timeout_s=bound,
        check_every_s=0.2,
    )
    assert done is not None, sim
    view = simulated_view(sim)
    assert view["unreachable"] == [victim.id]
    assert victim.id not in view["sites"]
    assert _states(view, victim.id) == {"dead"}
    seen = {(a["member"], a["kind"]) for a in view["activity"]}
    assert (victim.id, "dead") in seen
