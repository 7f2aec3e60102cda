"""A reference model of seed 000's ingest-feedback rules, for tests to compare against.

This is an oracle, deliberately written apart from `grid.core.signals.feedback`: a
plain dict of tuples and one function per rule, in the words of the seed, so a
test can drive the real machine (or the real endpoint) and this model with the
same reports and demand the same answers and the same final state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Fields = tuple[int, int, int, bool, str]
"""(epoch, sequence, rejected, clean, replica) of one report."""


@dataclass
class ModelReporter:
    """What the model remembers of one reporter."""

    fields: Fields
    evidence: bool
    fresh_at: str


@dataclass
class FeedbackModel:
    """Reporters by identity, with a capacity for new identities."""

    capacity: int = 64
    reporters: dict[str, ModelReporter] = field(default_factory=dict)

    def apply(self, reporter: str, fields: Fields, now: str) -> str:
        """Apply one report; return ``accepted``, ``duplicate`` or the refusal code."""
        epoch, sequence, rejected, clean, _replica = fields
        known = self.reporters.get(reporter)
        if known is None:
            if len(self.reporters) >= self.capacity:
                return "reporter_capacity"
            previous_rejected = 0
        else:
            k_epoch, k_sequence, k_rejected, _k_clean, _k_replica = known.fields
            if epoch < k_epoch:
                return "replay"
            if epoch > k_epoch:
                previous_rejected = 0  # a new epoch starts afresh
            else:
                if sequence < k_sequence:
                    return "replay"
                if sequence == k_sequence:
                    return "duplicate" if fields == known.fields else "changed_duplicate"
                if rejected < k_rejected:
                    return "counter_decreased"
                previous_rejected = k_rejected
        rose = rejected > previous_rejected
        # A rise is evidence whatever `clean` says; a newer clean report with the
        # same counter clears it; a newer report that is not clean holds it.
        evidence = rose or not clean
        self.reporters[reporter] = ModelReporter(fields, evidence, now)
        return "accepted"

    def with_evidence(self) -> int:
        """Reporters holding rejection evidence."""
        return sum(1 for r in self.reporters.values() if r.evidence)
