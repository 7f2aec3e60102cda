"""Agent offers: how a tool or an agent travels in the ``tools`` and ``agents`` OR-Sets.

Seed 003's capability OR-Sets hold strings. An element must say enough for a
consuming site to render a candidate (SPEC-DECISIONS §16): which provider serves
it (the routing cluster), the tool's name, and the provider's
``accessPolicy.siteSelector.matchLabels``, which the consuming site enforces as it
does a provider record's. The element is therefore
``{provider}/{tool}`` (tools) or ``{provider}`` (agents, whose name is the
provider's), followed by `` key=value`` for each access label, sorted. None of the
parts can hold a space, and neither a provider name nor a tool name a ``/``, so the
form is unambiguous; `decode` returns None for anything else, so a malformed element
from a peer is ignored rather than trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol

from grid.core.crdt.snapshot import GridStateSnapshot

OfferKind = Literal["tools", "agents"]
"""The OR-Set an offer belongs to."""

_PROVIDER = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./]{0,316}$")
_LABEL_VALUE = re.compile(r"^[-A-Za-z0-9_.]{0,63}$")
LABELS_MAX = 64
"""Most access labels one element carries (as a provider record's)."""


@dataclass(frozen=True, slots=True)
class AgentOffer:
    """One tool or agent a site offers, with the access labels consumers must carry."""

    kind: OfferKind
    provider: str
    """The provider's name: its routing cluster."""
    name: str
    """The tool's name, or the agent's (the provider's name)."""
    access: tuple[tuple[str, str], ...] = ()
    """``accessPolicy.siteSelector.matchLabels``, sorted; empty admits every site."""

    def encode(self) -> str:
        """The OR-Set element."""
        head = f"{self.provider}/{self.name}" if self.kind == "tools" else self.provider
        return " ".join([head, *(f"{k}={v}" for k, v in sorted(self.access))])

    def admits(self, labels: dict[str, str] | None) -> bool:
        """Whether a site with ``labels`` may consume it (None: unknown site, refused)."""
        if not self.access:
            return True
        return labels is not None and all(labels.get(k) == v for k, v in self.access)


def decode(kind: OfferKind, element: str) -> AgentOffer | None:
    """The offer an OR-Set element encodes, or None when it is malformed."""
    head, *pairs = element.split(" ")
    if len(pairs) > LABELS_MAX:
        return None
    if kind == "tools":
        provider, slash, name = head.partition("/")
        if not slash or not _TOOL.match(name):
            return None
    else:
        provider = name = head
    if not _PROVIDER.match(provider):
        return None
    access: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value) or key in access:
            return None
        access[key] = value
    offer = AgentOffer(kind, provider, name, tuple(sorted(access.items())))
    return offer if offer.encode() == element else None


class OfferReplica(Protocol):
    """What `origin_offers` reads of a replica (`grid.core.crdt.replica.GridState`)."""

    def origins(self) -> list[str]: ...
    def trusted(self, origin: str) -> bool: ...
    def snapshot(self, origin: str) -> GridStateSnapshot | None: ...


def origin_offers(replica: OfferReplica, kind: OfferKind) -> list[tuple[str, AgentOffer]]:
    """Every well-formed offer of one kind, by trusted origin, sorted.

    An origin's OR-Set holds only what that origin added (a writer touches its own
    snapshot only), so the origin is the offering site.
    """
    found: list[tuple[str, AgentOffer]] = []
    for origin in replica.origins():
        snap = replica.snapshot(origin)
        if snap is None or not replica.trusted(origin):
            continue
        for element in sorted(snap.state.capability(kind).elements):
            offer = decode(kind, element)
            if offer is not None:
                found.append((origin, offer))
    return found
