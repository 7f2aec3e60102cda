"""The overlay: what a gateway routes by, its envelope, its digest and its verifier.

* `document`: ``grid-config.json``, the ranked candidates in wire form;
* `envelope`: ``grid-overlay.json``, revision, digest, scope and provenance;
* `digest`: RFC 8785 canonical JSON (reference and fast writers) and the SHA-256;
* `verify` with `structure`: what a reader accepts, in SPEC-DECISIONS §5's order;
* `ids`: the FNV-1a ``stable_id`` of a candidate.

The names below are the package's public surface; `canonical_digest` is the fixed
seam of SPEC-DECISIONS §10 (``grid.core.overlay.canonical_digest``).
"""

from grid.core.overlay.digest import canonical_digest
from grid.core.overlay.document import (
    KIND_INFERENCE_MODEL,
    Selection,
    build_overlay,
    build_overlay_and_envelope,
    candidate_document,
)
from grid.core.overlay.envelope import (
    PRODUCER,
    SCHEMA_VERSION,
    Provenance,
    Scope,
    build_envelope,
    format_timestamp,
)
from grid.core.overlay.ids import stable_id
from grid.core.overlay.structure import (
    CANDIDATES_MAX,
    admission_state_problem,
    candidate_selection_problem,
    secret_ref_of,
    selection_policy_problem,
    stable_id_of,
)
from grid.core.overlay.verify import ACCEPT, ACCEPT_LEGACY, REJECT, Verdict, verify

__all__ = [
    "ACCEPT",
    "ACCEPT_LEGACY",
    "CANDIDATES_MAX",
    "KIND_INFERENCE_MODEL",
    "PRODUCER",
    "REJECT",
    "SCHEMA_VERSION",
    "Provenance",
    "Scope",
    "Selection",
    "Verdict",
    "admission_state_problem",
    "build_envelope",
    "build_overlay",
    "build_overlay_and_envelope",
    "candidate_document",
    "candidate_selection_problem",
    "canonical_digest",
    "format_timestamp",
    "secret_ref_of",
    "selection_policy_problem",
    "stable_id",
    "stable_id_of",
    "verify",
]
