"""The GridNetwork condition saying which spelling of a policy Grid applies (§2a).

A GridNetwork may carry upstream Grid's ``scoringPolicy``/``admissionPolicy`` and
the seed's ``scoring``/``admission`` at once. The seed-shaped field wins, and the
``UpstreamPolicy`` condition says so: ``False``/``SeedFieldsWin`` naming the fields
set aside, ``True``/``Mapped`` when upstream's fields are applied, and no
condition when the network uses neither. The patch is empty when nothing changed,
so a steady state writes nothing.
"""

from __future__ import annotations

from typing import Any

from grid.core.resources.models import GridNetwork
from grid.core.resources.status import conditions_draft

UPSTREAM_POLICY_CONDITION = "UpstreamPolicy"
"""Condition type naming how upstream's policy fields were applied."""


def upstream_policy_patch(network: GridNetwork, now: str) -> dict[str, Any]:
    """The status patch recording the UpstreamPolicy condition; {} when unchanged."""
    spec = network.spec
    won = spec.seed_fields_won
    used = [
        name
        for name, value in (
            ("scoringPolicy", spec.scoring_policy),
            ("admissionPolicy", spec.admission_policy),
        )
        if value is not None and name not in won
    ]
    status = conditions_draft(network.status)
    if won:
        changed = status.set_condition(
            UPSTREAM_POLICY_CONDITION,
            "False",
            reason="SeedFieldsWin",
            message=f"{', '.join(won)} set aside: spec.scoring/spec.admission are given",
            now=now,
            observed_generation=network.metadata.generation,
        )
    elif used:
        changed = status.set_condition(
            UPSTREAM_POLICY_CONDITION,
            "True",
            reason="Mapped",
            message=f"{', '.join(used)} mapped onto scoring and admission",
            now=now,
            observed_generation=network.metadata.generation,
        )
    else:
        before = len(status.conditions)
        status.conditions = [c for c in status.conditions if c.type != UPSTREAM_POLICY_CONDITION]
        changed = len(status.conditions) != before
    if not changed:
        return {}
    return {
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in status.conditions
        ]
    }
