"""The routing snapshot: one verified overlay, indexed for routing, swapped whole.

A `Snapshot` is immutable. Requests take the current one when they start and
keep it to the end, so a reload never changes a request midway. `OverlayFile`
watches an envelope file and replaces the snapshot only after §5's verifier
accepted the new content (verify, then swap); a failed reload keeps the last
good snapshot, and an invalid file at cold start refuses to start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.adapters.file_stamp import FileStamp, file_stamp
from grid.core.json_document import DocumentError, decode_json
from grid.core.overlay import (
    admission_state_problem,
    candidate_selection_problem,
    secret_ref_of,
    selection_policy_problem,
    stable_id_of,
    verify,
)
from grid.core.routing.rerank import RerankContext, group_key
from grid.core.routing.selection import (
    DETERMINISTIC,
    ModelPlan,
    SelectionPolicy,
    derive_groups,
)
from grid.core.vocabulary import OVERLAY_ADMISSIONS, AdmissionState, SelectionTier
from grid.errors import GridError, ValidationError

log = logging.getLogger(__name__)

_ADMISSION_NAMES = {state: name for name, state in OVERLAY_ADMISSIONS.items()}
"""Each state's overlay name: upstream's ``none`` for the core's excluded."""
_TIERS = {tier.value: tier for tier in SelectionTier}
_DERIVE = -1
"""``selection_group`` of a candidate whose overlay names none: derived in `snapshot_of`."""


@dataclass(frozen=True)
class Candidate:
    """One routing candidate as the gateway uses it."""

    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool
    stable_id: str
    admission: AdmissionState
    credential: tuple[str, str, str] | None
    """(secret name, namespace, key) of its credential reference, if any."""
    tier: SelectionTier | None = None
    """The overlay's ``selection_tier``; inline candidates carry none."""
    selection_group: int = 0
    """Its selection group (§14): from the overlay, else derived by `snapshot_of`."""
    traffic_weight: int = 1
    capacity_weight: int = 1

    def wire(self) -> dict[str, Any]:
        """The /snapshot form (no credential details beyond presence)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "site": self.site,
            "cluster": self.cluster,
            "fresh": self.fresh,
            "stable_id": self.stable_id,
            "admission_state": _ADMISSION_NAMES[self.admission],
            "selection_tier": None if self.tier is None else self.tier.value,
            "selection_group": self.selection_group,
            "traffic_weight": self.traffic_weight,
            "capacity_weight": self.capacity_weight,
            "credential": self.credential is not None,
        }


@dataclass(frozen=True)
class Snapshot:
    """A verified set of candidates in overlay order, indexed by (kind, name)."""

    revision: str | None
    source: str
    candidates: tuple[Candidate, ...]
    by_model: Mapping[tuple[str, str], tuple[Candidate, ...]] = field(default_factory=dict)
    by_id: Mapping[str, Candidate] = field(default_factory=dict)
    policy: SelectionPolicy = field(default_factory=SelectionPolicy)
    plans: Mapping[tuple[str, str], ModelPlan[Candidate]] = field(default_factory=dict)
    """Per (kind, name): its candidates grouped and weighted for selection."""


class SelectionFieldError(ValidationError):
    """A selection field (§14) of the wrong type or out of range; the message names it."""


def policy_of(raw: Mapping[str, Any], where: str) -> SelectionPolicy:
    """``selection_policy`` and ``selection_load_aware`` of an overlay or route filter.

    The rules are the overlay reader's (`selection_policy_problem`); absent means
    ``deterministic``, not load-aware.
    """
    problem = selection_policy_problem(raw, where)
    if problem is not None:
        raise SelectionFieldError(problem)
    return SelectionPolicy(
        raw.get("selection_policy", DETERMINISTIC), raw.get("selection_load_aware", False)
    )


def selection_fields(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    """A candidate's ``selection_group``, ``traffic_weight`` and ``capacity_weight``.

    The rules are the overlay reader's (`candidate_selection_problem`); an absent
    group is derived later (`snapshot_of`), an absent weight is 1.
    """
    problem = candidate_selection_problem(raw, where)
    if problem is not None:
        raise SelectionFieldError(problem)
    return {
        "selection_group": raw.get("selection_group", _DERIVE),
        "traffic_weight": raw.get("traffic_weight", 1),
        "capacity_weight": raw.get("capacity_weight", 1),
    }


def _candidate(raw: Mapping[str, Any], where: str = "candidate") -> Candidate:
    kind, name, site, cluster = (str(raw[k]) for k in ("kind", "name", "site", "cluster"))
    credential = raw.get("credential")
    ref = None
    if isinstance(credential, dict):
        secret = secret_ref_of(credential) or {}
        ref = (str(secret.get("name")), str(secret.get("namespace")), str(secret.get("key")))
    admission, tier = states_of(raw, where)
    return Candidate(
        kind=kind,
        name=name,
        site=site,
        cluster=cluster,
        fresh=bool(raw.get("fresh", True)),
        stable_id=stable_id_of(raw),
        admission=admission,
        credential=ref,
        tier=tier,
        **selection_fields(raw, where),
    )


def states_of(raw: Mapping[str, Any], where: str) -> tuple[AdmissionState, SelectionTier | None]:
    """A candidate's ``admission_state`` (absent: ``new_and_existing``) and
    ``selection_tier`` (absent: none) as the core's enums."""
    name = raw.get("admission_state") or AdmissionState.NEW_AND_EXISTING.value
    admission = OVERLAY_ADMISSIONS.get(str(name))
    if admission is None:
        raise SelectionFieldError(admission_state_problem(where))
    tier = None
    if raw.get("selection_tier"):
        tier = _TIERS.get(str(raw["selection_tier"]))
        if tier is None:
            raise SelectionFieldError(f"{where}.selection_tier is not a known tier")
    return admission, tier


GroupKey = Callable[[Candidate], Hashable]
"""What derives a candidate's group when the overlay names none (§14 geographyFirst)."""


def geography_first(candidate: Candidate) -> Hashable:
    """(admission, tier, freshness): the default group key."""
    return (candidate.admission, candidate.tier, candidate.fresh)


def ranked_group_key(ctx: RerankContext) -> GroupKey:
    """(admission, tier, freshness), a missing tier derived from the sites' geography
    as poll mode's re-ranking derives it, so groups and re-ranking agree."""

    def key(candidate: Candidate) -> Hashable:
        return group_key(candidate, ctx)

    return key


def snapshot_from_candidates(
    raw: Sequence[Mapping[str, Any]],
    revision: str | None,
    source: str,
    policy: SelectionPolicy | None = None,
    group_key: GroupKey = geography_first,
) -> Snapshot:
    """A snapshot of already-verified candidate documents, in their order.

    Raises `SelectionFieldError` for a selection field of the wrong type.
    """
    candidates = tuple(_candidate(c, f"candidates[{i}]") for i, c in enumerate(raw))
    return snapshot_of(candidates, revision, source, policy, group_key)


def _with_groups(listed: list[Candidate], group_key: GroupKey) -> list[Candidate]:
    """One model's candidates, groups derived from ``group_key`` when any lacks one."""
    if all(c.selection_group != _DERIVE for c in listed):
        return listed
    groups = derive_groups([group_key(c) for c in listed])
    return [replace(c, selection_group=g) for c, g in zip(listed, groups, strict=True)]


def snapshot_of(
    candidates: Sequence[Candidate],
    revision: str | None,
    source: str,
    policy: SelectionPolicy | None = None,
    group_key: GroupKey = geography_first,
) -> Snapshot:
    """A snapshot of candidates in the order given, indexed and planned for routing."""
    policy = policy or SelectionPolicy()
    by_model: dict[tuple[str, str], list[Candidate]] = {}
    for c in candidates:
        by_model.setdefault((c.kind, c.name), []).append(c)
    models = {k: tuple(_with_groups(v, group_key)) for k, v in by_model.items()}
    grouped = {c.stable_id: c for listed in models.values() for c in listed}
    ordered = tuple(grouped.get(c.stable_id, c) for c in candidates)
    return Snapshot(
        revision=revision,
        source=source,
        candidates=ordered,
        by_model=models,
        by_id={c.stable_id: c for c in ordered},
        policy=policy,
        plans={k: ModelPlan(v, policy) for k, v in models.items()},
    )


class OverlayRejected(GridError):
    """An overlay file that did not verify; ``reason`` is the §5 code (or io/json)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}", code=reason)
        self.reason = reason
        self.detail = detail


def read_overlay(
    path: Path,
    expected_scope: Mapping[str, str] | None,
    max_bytes: int,
    group_key: GroupKey = geography_first,
) -> Snapshot:
    """Read, bound, decode and verify an overlay file into a snapshot."""
    try:
        document = decode_json(read_bounded(path, max_bytes))
    except UnreadableFile as exc:
        raise OverlayRejected("unreadable", str(exc)) from None
    except DocumentError as exc:
        raise OverlayRejected("malformed_structure", str(exc)) from None
    verdict = verify(document, expected_scope)
    if not verdict.accepted:
        raise OverlayRejected(str(verdict.reason), verdict.detail)
    envelope = "overlay" in document and verdict.verdict == "accept"
    overlay = document["overlay"] if envelope else document
    try:
        return snapshot_from_candidates(
            overlay["candidates"],
            verdict.revision if envelope else None,
            str(path),
            policy_of(overlay, "overlay"),
            group_key,
        )
    except SelectionFieldError as exc:
        raise OverlayRejected("malformed_structure", str(exc)) from None


class OverlayFile:
    """The overlay-file source: the current snapshot, reloaded when the file changes."""

    def __init__(
        self,
        path: Path,
        expected_scope: Mapping[str, str] | None,
        max_bytes: int,
        group_key: GroupKey = geography_first,
    ) -> None:
        self.path = path
        self.group_key = group_key
        self.expected_scope = expected_scope
        self.max_bytes = max_bytes
        self._stamp: FileStamp | None = None
        self.accepted = 0
        self.rejected = 0
        self.last_rejection: str | None = None
        self.snapshot = self._load_cold()

    def _load_cold(self) -> Snapshot:
        self._stamp = file_stamp(self.path)
        snapshot = read_overlay(self.path, self.expected_scope, self.max_bytes, self.group_key)
        self.accepted += 1
        return snapshot

    def poll(self) -> bool:
        """Reload if the file changed; True when a new snapshot was swapped in."""
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            snapshot = read_overlay(self.path, self.expected_scope, self.max_bytes, self.group_key)
        except OverlayRejected as exc:
            self.rejected += 1
            self.last_rejection = exc.reason
            log.warning(
                "overlay reload rejected; keeping the last good snapshot",
                extra={"reason": exc.reason},
            )
            return False
        self.accepted += 1
        self.last_rejection = None
        changed = snapshot.revision != self.snapshot.revision or snapshot.revision is None
        self.snapshot = snapshot
        return changed
