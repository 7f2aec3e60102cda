"""The routing snapshot: one verified overlay, indexed for routing, swapped whole.

A `Snapshot` is immutable. Requests take the current one when they start and
keep it to the end, so a reload never changes a request midway. `OverlayFile`
watches an envelope file and replaces the snapshot only after §5's verifier
accepted the new content (verify, then swap); a failed reload keeps the last
good snapshot, and an invalid file at cold start refuses to start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.core.json_document import DocumentError, decode_json
from grid.core.overlay import secret_ref_of, stable_id_of, verify
from grid.errors import GridError

log = logging.getLogger(__name__)

NEW_AND_EXISTING = "new_and_existing"
EXISTING_ONLY = "existing_only"


@dataclass(frozen=True)
class Candidate:
    """One routing candidate as the gateway uses it."""

    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool
    stable_id: str
    admission: str
    credential: tuple[str, str, str] | None
    """(secret name, namespace, key) of its credential reference, if any."""
    tier: str | None = None
    """The overlay's ``selection_tier``; inline candidates carry none."""

    def wire(self) -> dict[str, Any]:
        """The /snapshot form (no credential details beyond presence)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "site": self.site,
            "cluster": self.cluster,
            "fresh": self.fresh,
            "stable_id": self.stable_id,
            "admission_state": self.admission,
            "selection_tier": self.tier,
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


def _candidate(raw: Mapping[str, Any]) -> Candidate:
    kind, name, site, cluster = (str(raw[k]) for k in ("kind", "name", "site", "cluster"))
    credential = raw.get("credential")
    ref = None
    if isinstance(credential, dict):
        secret = secret_ref_of(credential) or {}
        ref = (str(secret.get("name")), str(secret.get("namespace")), str(secret.get("key")))
    return Candidate(
        kind=kind,
        name=name,
        site=site,
        cluster=cluster,
        fresh=bool(raw.get("fresh", True)),
        stable_id=stable_id_of(raw),
        admission=str(raw.get("admission_state") or NEW_AND_EXISTING),
        credential=ref,
        tier=str(raw["selection_tier"]) if raw.get("selection_tier") else None,
    )


def snapshot_from_candidates(
    raw: Sequence[Mapping[str, Any]], revision: str | None, source: str
) -> Snapshot:
    """A snapshot of already-verified candidate documents, in their order."""
    return snapshot_of(tuple(_candidate(c) for c in raw), revision, source)


def snapshot_of(candidates: Sequence[Candidate], revision: str | None, source: str) -> Snapshot:
    """A snapshot of candidates in the order given, indexed for routing."""
    candidates = tuple(candidates)
    by_model: dict[tuple[str, str], list[Candidate]] = {}
    for c in candidates:
        by_model.setdefault((c.kind, c.name), []).append(c)
    return Snapshot(
        revision=revision,
        source=source,
        candidates=candidates,
        by_model={k: tuple(v) for k, v in by_model.items()},
        by_id={c.stable_id: c for c in candidates},
    )


class OverlayRejected(GridError):
    """An overlay file that did not verify; ``reason`` is the §5 code (or io/json)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}", code=reason)
        self.reason = reason
        self.detail = detail


def read_overlay(path: Path, expected_scope: Mapping[str, str] | None, max_bytes: int) -> Snapshot:
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
    return snapshot_from_candidates(
        overlay["candidates"], verdict.revision if envelope else None, str(path)
    )


class OverlayFile:
    """The overlay-file source: the current snapshot, reloaded when the file changes."""

    def __init__(
        self, path: Path, expected_scope: Mapping[str, str] | None, max_bytes: int
    ) -> None:
        self.path = path
        self.expected_scope = expected_scope
        self.max_bytes = max_bytes
        self._stamp: tuple[int, int, int] | None = None
        self.accepted = 0
        self.rejected = 0
        self.last_rejection: str | None = None
        self.snapshot = self._load_cold()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load_cold(self) -> Snapshot:
        self._stamp = self._file_stamp()
        snapshot = read_overlay(self.path, self.expected_scope, self.max_bytes)
        self.accepted += 1
        return snapshot

    def poll(self) -> bool:
        """Reload if the file changed; True when a new snapshot was swapped in."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            snapshot = read_overlay(self.path, self.expected_scope, self.max_bytes)
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
