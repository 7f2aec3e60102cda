"""Kubernetes object metadata and Secret references as Grid reads them.

Grid resources are cluster-scoped, so `ObjectMeta` refuses a namespace; fields the
API server manages (managedFields, finalizers, ...) are accepted and dropped because
no Grid logic reads them. A `SecretRef` points at a key of a namespaced Secret and
never carries the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from grid.core.resources.errors import field_error
from grid.core.resources.types import (
    LabelKey,
    LabelValue,
    NamespaceName,
    ObjectName,
    Text,
    Timestamp,
    WireModel,
)

# Metadata fields the API server populates; accepted on input and dropped, since
# Grid's logic never reads them.
_SERVER_METADATA = (
    "managedFields",
    "finalizers",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
    "selfLink",
)


class ObjectMeta(WireModel):
    """The subset of Kubernetes object metadata Grid reads and writes."""

    name: ObjectName
    """Object name, an RFC 1123 subdomain. Grid resources are cluster-scoped."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: Text | None = None
    generation: int | None = Field(default=None, ge=0)
    resource_version: Text | None = None
    creation_timestamp: Timestamp | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_server_fields(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = {k: v for k, v in data.items() if k not in _SERVER_METADATA}
            if data.get("namespace") in ("", None):
                data.pop("namespace", None)
            else:
                raise field_error("namespace", "must be empty: Grid resources are cluster-scoped")
        return data


class SecretRef(WireModel):
    """A reference to a key of a namespaced core v1 Secret; never the value itself."""

    name: ObjectName
    namespace: NamespaceName
    key: Text | None = None
    """The key inside the Secret; absent means the consumer's default key."""

    @property
    def complete(self) -> bool:
        """Whether name, namespace and key are all given (required to project a credential)."""
        return bool(self.key)
