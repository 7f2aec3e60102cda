"""Tools and agents converge add-wins across sites, in a seeded simulation.

East's MCP server dies (its tools leave east's ``tools`` OR-Set) and comes back
(they are added again with fresh tags) while west's agent offer comes and goes;
the broadcast items reach every site in a random order, with duplicates. Every
site ends with east's tools and west's agent, attributed to their origin. Each run
prints its seed; replay one with ``GRID_SIM_SEED``.
"""

from __future__ import annotations

import os
import random

from hypothesis import given
from hypothesis import strategies as st

from grid.core.crdt.offer import AgentOffer, decode, origin_offers
from grid.core.crdt.replica import GridState
from grid.core.resources import API_VERSION, GridSite
from grid.core.resources.site_offers import member_offers
from grid.core.resources.status import GridSiteStatus

TOOLS = {AgentOffer("tools", "tools-east", n) for n in ("search", "calculator")}
AGENT = AgentOffer("agents", "planner", "planner", (("tier", "prod"),))


def seed() -> int:
    value = int(os.environ.get("GRID_SIM_SEED", random.randrange(2**32)))
    print(f"agent offer simulation seed {value}")
    return value


def offer(replica: GridState, kind: str, offers: set[AgentOffer]) -> list[object]:
    snap = replica.local.sync_capability(kind, {o.encode() for o in offers})
    return list(replica.update_local(snap))


def test_offers_leave_and_return_and_converge_add_wins_everywhere() -> None:
    rng = random.Random(seed())
    names = ["east", "west", "central"]
    replicas = {n: GridState(n) for n in names}
    east, west = replicas["east"], replicas["west"]
    items = offer(east, "tools", TOOLS) + offer(west, "agents", {AGENT})
    items += offer(east, "tools", set())  # the MCP server died
    items += offer(west, "agents", set())
    items += offer(east, "tools", TOOLS)  # and came back
    items += offer(west, "agents", {AGENT})
    deliveries = [(n, i) for n in names for i in items] * 2
    rng.shuffle(deliveries)
    for name, item in deliveries:
        replicas[name].apply(item)  # type: ignore[arg-type]
    for replica in replicas.values():
        assert set(origin_offers(replica, "tools")) == {("east", o) for o in TOOLS}
        assert origin_offers(replica, "agents") == [("west", AGENT)]
        assert AGENT.admits({"tier": "prod"}) and not AGENT.admits({"tier": "dev"})


def test_a_malformed_element_from_a_peer_is_ignored() -> None:
    for element in ("", "a b", "UPPER/tool", "p/bad name", "p", "p/t k", "p/t k=v k=w"):
        assert decode("tools", element) is None
    assert decode("agents", "p/x") is None


names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
tool_names = st.from_regex(r"[A-Za-z0-9_.-]{1,40}", fullmatch=True)
labels = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9./-]{0,20}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_.-]{0,20}", fullmatch=True),
    max_size=4,
)


@given(names, tool_names, labels)
def test_an_offer_round_trips_through_its_element(
    provider: str, tool: str, access: dict[str, str]
) -> None:
    pairs = tuple(sorted(access.items()))
    for candidate in (
        AgentOffer("tools", provider, tool, pairs),
        AgentOffer("agents", provider, provider, pairs),
    ):
        assert decode(candidate.kind, candidate.encode()) == candidate


def test_each_site_status_shows_the_tools_and_agents_its_origin_offers() -> None:
    east, west = GridState("east"), GridState("west")
    for item in offer(east, "tools", TOOLS) + offer(west, "agents", {AGENT}):
        east.apply(item)  # type: ignore[arg-type]
    sites = [_site("east"), _site("west")]
    offers = member_offers(east, sites)
    assert offers["east"] == {
        "inference": False,
        "agentTools": True,
        "agentToAgent": False,
        "models": [],
        "tools": [
            {"name": "calculator", "providers": ["tools-east"]},
            {"name": "search", "providers": ["tools-east"]},
        ],
        "agents": [],
    }
    assert offers["west"]["agents"] == [{"name": "planner"}]
    assert offers["west"]["agentToAgent"] and not offers["west"]["agentTools"]
    status = GridSiteStatus.model_validate({"capabilities": offers["east"]})
    assert status.capabilities.model_dump(by_alias=True, exclude_none=True) == offers["east"]


def test_a_status_written_as_the_model_list_reads_as_its_models() -> None:
    old = {"capabilities": [{"model": "llama", "capabilities": ["chat"]}]}
    caps = GridSiteStatus.model_validate(old).capabilities
    assert caps.inference and [m.model for m in caps.models] == ["llama"]
    assert not GridSiteStatus.model_validate({"capabilities": []}).capabilities.inference


def _site(name: str) -> GridSite:
    return GridSite.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": name},
            "spec": {"gridNetworkRef": "grid"},
        }
    )
