"""What a GridSite's status shows from the replica: the site's offer and certificate.

`member_offers` gives each site's ``status.capabilities`` (§16): upstream's
``{inference, agentTools, agentToAgent}`` flags, and beside them one entry per
model the site's provider records serve (with the union of the capabilities its
providers declare for it, the largest context window any declares, and the
providers serving it), per tool its ``tools`` OR-Set offers (with the providers
serving it) and per agent its ``agents`` OR-Set offers, all sorted so that the
same replica always gives the same status (and an unchanged offer writes nothing).
`member_certs` gives each member's gossiped certificate chain for
``status.publicCertPem`` (a PEM with a private key never reached the replica).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grid.core.crdt.offer import AgentOffer, origin_offers
from grid.core.crdt.record import ProviderRecord
from grid.core.crdt.replica import GridState
from grid.core.resources.discovery import member_of
from grid.core.resources.models import GridSite


def site_capabilities(records: Iterable[ProviderRecord]) -> list[dict[str, Any]]:
    """The ``status.capabilities`` entries of the site whose records these are."""
    caps: dict[str, set[str]] = {}
    windows: dict[str, int] = {}
    providers: dict[str, set[str]] = {}
    for record in records:
        for model in record.models:
            info = record.info(model)
            caps.setdefault(model, set()).update(info.capabilities)
            providers.setdefault(model, set()).add(record.name)
            if info.context_window is not None:
                windows[model] = max(windows.get(model, 0), info.context_window)
    entries = []
    for model in sorted(caps):
        entry: dict[str, Any] = {
            "model": model,
            "capabilities": sorted(caps[model]),
            "providers": sorted(providers[model]),
        }
        if model in windows:
            entry["contextWindow"] = windows[model]
        entries.append(entry)
    return entries


def site_offer(
    records: Iterable[ProviderRecord],
    tools: Iterable[AgentOffer] = (),
    agents: Iterable[AgentOffer] = (),
) -> dict[str, Any]:
    """The ``status.capabilities`` object of the site offering these."""
    models = site_capabilities(records)
    serving: dict[str, set[str]] = {}
    for tool in tools:
        serving.setdefault(tool.name, set()).add(tool.provider)
    names = sorted({a.name for a in agents})
    return {
        "inference": bool(models),
        "agentTools": bool(serving),
        "agentToAgent": bool(names),
        "models": models,
        "tools": [{"name": n, "providers": sorted(serving[n])} for n in sorted(serving)],
        "agents": [{"name": n} for n in names],
    }


def member_offers(replica: GridState, sites: Sequence[GridSite]) -> dict[str, dict[str, Any]]:
    """Each site's ``status.capabilities`` from its origin's live records and its
    trusted ``tools`` and ``agents`` OR-Sets, by member name."""
    by_origin: dict[str, list[ProviderRecord]] = {}
    for origin, _pid, record in replica.providers():
        by_origin.setdefault(origin, []).append(record)
    offered: dict[str, dict[str, list[AgentOffer]]] = {"tools": {}, "agents": {}}
    for kind in ("tools", "agents"):
        for origin, offer in origin_offers(replica, kind):
            offered[kind].setdefault(origin, []).append(offer)
    return {
        member_of(s): site_offer(
            by_origin.get(member_of(s), []),
            offered["tools"].get(member_of(s), []),
            offered["agents"].get(member_of(s), []),
        )
        for s in sites
    }


def member_certs(replica: GridState, members: Mapping[str, object]) -> dict[str, str]:
    """Each member's certificate PEM, trusted or only introduced (`GridState.introduced`)."""
    certs = {}
    for member in members:
        seen = replica.introduced(member)
        if seen is not None and seen[0].pem:
            certs[member] = seen[0].pem
    return certs
