"""A sans-IO SWIM membership machine with the Lifeguard refinements.

The public surface: `SwimMachine` (inputs in, effects out), its `SwimConfig`,
the wire vocabulary in `messages`, the effects and timers in `effects`, and
the one driver of a machine, over a runtime's four verbs, in `runtime`.
One module per concept: `members` (the table and probe order), `membership`
(precedence rules), `suspicion` (dynamic timeout), `health` (LHM),
`dissemination` (the piggyback queue and its lanes). See docs/swim.md.
"""

from grid.core.swim.config import SwimConfig
from grid.core.swim.machine import NodeStatus, SwimMachine

__all__ = ["NodeStatus", "SwimConfig", "SwimMachine"]
