"""The admission roster: an append-only log replayed into a state machine.

SPEC-DECISIONS §8: the roster is an append-only log of ``{agent_id, tenant_id,
state, revision}``. The gateway replays it in full before its listener opens
and then tails it. This module is the pure part: the transition table, replay
of entries in revision order, and the admission decision of seed 004 step 2.

The tenant is bound when an agent is registered and never changes; later
entries repeat it or leave it out. Entries that break the transition table (two
operators racing, say) are skipped deterministically on every replay, so every
gateway that replays the same log reaches the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from grid.core.telemetry.refusals import AgentNotAdmitted, AgentNotRegistered
from grid.errors import AlreadyExists, NotFound, TransitionError, ValidationError

RosterState = Literal["registered", "admitted", "suspended", "revoked"]
ROSTER_STATES: tuple[RosterState, ...] = ("registered", "admitted", "suspended", "revoked")

# Legal transitions. None is "no entry yet". Revoked is terminal: a revoked
# identity is never admitted again; issue the agent a new identity instead.
TRANSITIONS: dict[RosterState | None, frozenset[RosterState]] = {
    None: frozenset({"registered"}),
    "registered": frozenset({"admitted", "suspended", "revoked"}),
    "admitted": frozenset({"suspended", "revoked"}),
    "suspended": frozenset({"admitted", "revoked"}),
    "revoked": frozenset(),
}


class RosterEntryLike(Protocol):
    """Any roster-log entry (the adapters' ``RosterEntry`` satisfies it)."""

    @property
    def agent_id(self) -> str: ...
    @property
    def tenant_id(self) -> str | None: ...
    @property
    def state(self) -> RosterState: ...
    @property
    def revision(self) -> int: ...


@dataclass(frozen=True)
class RosterRecord:
    """One append to the roster log, as the core sees it."""

    agent_id: str
    tenant_id: str | None
    state: RosterState
    revision: int


@dataclass(frozen=True)
class AgentStatus:
    """The current roster state of one agent."""

    agent_id: str
    tenant_id: str
    state: RosterState
    revision: int


class Roster:
    """The replayed roster: current state per agent, and the last applied revision."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentStatus] = {}
        self.revision = 0
        self.skipped = 0

    def replay(self, entries: Iterable[RosterEntryLike]) -> None:
        """Apply entries in revision order (already-applied revisions are ignored)."""
        for entry in sorted(entries, key=lambda e: e.revision):
            self.apply(entry)

    def apply(self, entry: RosterEntryLike) -> bool:
        """Apply one log entry; return False when it was stale or broke the table."""
        if entry.revision <= self.revision:
            return False
        self.revision = entry.revision
        try:
            self._agents[entry.agent_id] = self._next(entry)
        except (TransitionError, ValidationError):
            self.skipped += 1
            return False
        return True

    def _next(self, entry: RosterEntryLike) -> AgentStatus:
        current = self._agents.get(entry.agent_id)
        check_transition(current.state if current else None, entry.state)
        if current is None:
            if not entry.tenant_id:
                raise ValidationError("registration needs a tenant", path="tenant_id")
            tenant = entry.tenant_id
        else:
            if entry.tenant_id not in (None, "", current.tenant_id):
                raise ValidationError("the tenant of an agent never changes", path="tenant_id")
            tenant = current.tenant_id
        return AgentStatus(entry.agent_id, tenant, entry.state, entry.revision)

    def get(self, agent_id: str) -> AgentStatus | None:
        """The agent's current status, or None when the roster has no entry."""
        return self._agents.get(agent_id)

    def agents(self) -> list[AgentStatus]:
        """Every agent, ordered by agent ID."""
        return [self._agents[a] for a in sorted(self._agents)]

    def admit(self, agent_id: str) -> str:
        """Seed 004 step 2: the agent's tenant when admitted, else the refusal."""
        status = self._agents.get(agent_id)
        if status is None:
            raise AgentNotRegistered(f"agent {agent_id!r} is not in the roster")
        if status.state != "admitted":
            raise AgentNotAdmitted(f"agent {agent_id!r} is {status.state}, not admitted")
        return status.tenant_id

    def plan(
        self, agent_id: str, state: RosterState, tenant_id: str | None = None
    ) -> tuple[RosterState, str]:
        """Validate an operator command; return the ``(state, tenant)`` to append.

        Raises `AlreadyExists` when registering a known agent, `NotFound` for a
        change to an unknown agent, and `TransitionError` for an illegal change.
        """
        if not agent_id:
            raise ValidationError("agent ID must not be empty", path="agent_id")
        current = self._agents.get(agent_id)
        if state == "registered":
            if current is not None:
                raise AlreadyExists(
                    f"agent {agent_id!r} is already in the roster ({current.state})"
                )
            if not tenant_id:
                raise ValidationError("registering an agent needs --tenant", path="tenant_id")
            return state, tenant_id
        if current is None:
            raise NotFound(f"agent {agent_id!r} is not in the roster")
        check_transition(current.state, state)
        return state, current.tenant_id


def check_transition(current: RosterState | None, target: RosterState) -> None:
    """Raise `TransitionError` unless ``current → target`` is in the table."""
    if target not in TRANSITIONS[current]:
        raise TransitionError(f"roster state {current or 'absent'} cannot become {target}")
