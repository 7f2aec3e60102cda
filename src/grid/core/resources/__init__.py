"""Grid's custom resources: models, specs, status, phases, manifests and the CRD schema.

* `models`: GridNetwork, GridSite and InferenceProvider, and `parse_resource`;
* `network_spec`, `site_spec`, `provider_spec`: the three specs (CRD-side types end in ``Spec``);
* `status`, `phases`, `lifecycle`: status shapes, phase tables, and phase decisions;
* `network_status`: what an operator writes into GridNetwork status, for which gateways;
* `types`, `errors`, `object_meta`, `duration`, `secret`: scalars, field-path errors,
  metadata, CRD durations and the minimal core v1 Secret;
* `manifest`: CR YAML text into a typed, cross-checked set; `crd_schema`: the CRDs.

The names below are re-exported from `models` for callers that only need the kinds.
"""

from grid.core.resources import models
from grid.core.resources.models import *  # noqa: F403  # the names `models.__all__` lists

__all__ = models.__all__
