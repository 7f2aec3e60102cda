"""``status.overlayStatus[]``: upstream Grid's evidence of what was rendered and distributed.

Beside Grid's ``status.overlays[]`` the operator writes, per served gateway, the
item upstream Grid writes (`grid.core.resources.status.OverlayRevisionStatus`):

* after a render written (or already in place): phase ``Distributed``, the
  rendered and distributed revisions equal, the envelope's ``contentDigest`` and
  ``schemaVersion``, the ConfigMap's ``resourceVersion``, and ``renderedAt``,
  the time the distributed revision was first rendered, so re-rendering the same
  state writes nothing;
* after a failed render or write: the last distributed revision is kept, phase
  ``Retained`` (``Error`` when nothing was ever distributed), reason
  ``OverlayRenderFailed`` or ``OverlayApplyFailed``, and a message saying which.
  A failed write still records the revision it rendered, so "rendered B,
  distributed A" is visible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RENDER_FAILED = "OverlayRenderFailed"
APPLY_FAILED = "OverlayApplyFailed"


@dataclass(frozen=True)
class Distribution:
    """What one overlay ConfigMap holds: the envelope's evidence and the object's version."""

    revision: str
    content_digest: str
    schema_version: str
    rendered_at: str
    candidates: int
    resource_version: str

    @classmethod
    def of(cls, envelope: Mapping[str, Any], resource_version: str) -> Distribution:
        """The distribution of ``envelope`` (a §5 envelope) in a ConfigMap at that version."""
        return cls(
            revision=str(envelope["revision"]["value"]),
            content_digest=str(envelope["content_digest"]["value"]),
            schema_version=str(envelope["schema_version"]),
            rendered_at=str(envelope["provenance"]["rendered_at"]),
            candidates=len(envelope["overlay"]["candidates"]),
            resource_version=resource_version,
        )

    @classmethod
    def of_status(cls, item: Mapping[str, Any]) -> Distribution | None:
        """The distribution a previous ``overlayStatus`` item recorded, if it recorded one."""
        if not item.get("distributedRevision"):
            return None
        return cls(
            revision=str(item["distributedRevision"]),
            content_digest=str(item.get("contentDigest", "")),
            schema_version=str(item.get("schemaVersion", "")),
            rendered_at=str(item.get("renderedAt", "")),
            candidates=int(item.get("candidateCount", 0)),
            resource_version=str(item.get("configMapResourceVersion", "")),
        )


def revision_entry(
    *,
    gateway: str,
    namespace: str,
    config_map: str,
    generation: int | None,
    rendered: str | None,
    distributed: Distribution | None,
    failure: str | None = None,
) -> dict[str, Any]:
    """One ``overlayStatus`` item, in its wire form.

    ``rendered`` is the revision this round rendered (None when the render
    failed), ``distributed`` what the ConfigMap holds, and ``failure`` the reason
    of a failed render or write (None after success).
    """
    entry: dict[str, Any] = {
        "gatewayName": gateway,
        "namespace": namespace,
        "configMapName": config_map,
        "schemaVersion": distributed.schema_version if distributed else "",
        "renderedRevision": rendered or (distributed.revision if distributed else ""),
        "distributedRevision": distributed.revision if distributed else "",
        "contentDigest": distributed.content_digest if distributed else "",
        "configMapResourceVersion": distributed.resource_version if distributed else "",
        "renderedAt": distributed.rendered_at if distributed else "",
        "candidateCount": distributed.candidates if distributed else 0,
        "phase": "Distributed",
        "reason": "",
        "message": "",
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    if failure is None:
        return entry
    what = "render failed" if failure == RENDER_FAILED else "ConfigMap write failed"
    kept = "previous overlay retained" if distributed else "no overlay has been distributed"
    entry.update(
        phase="Retained" if distributed else "Error", reason=failure, message=f"{what}; {kept}"
    )
    return entry


def overlay_status_patch(
    current: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``{"overlayStatus": items}`` when they differ from ``current`` (as stored), else {}."""
    new = [dict(i) for i in items]
    return {} if [dict(c) for c in current] == new else {"overlayStatus": new}
