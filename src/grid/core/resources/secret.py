"""A minimal core v1 Secret, read only to check that a referenced key exists.

`grid render` accepts Secrets next to the CRs so it can tell whether a provider's
``auth.secretRef`` names a key that is really there. Values are never copied, printed
or put in an error: the data fields are excluded from ``repr`` and every message
names keys only.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from pydantic import ConfigDict, Field, field_validator

from grid.core.resources.errors import InvalidResource, issues_from
from grid.core.resources.object_meta import SecretRef
from grid.core.resources.types import (
    LabelValue,
    NamespaceName,
    ObjectName,
    Text,
    Timestamp,
    WireModel,
)

SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""Keys a Kubernetes Secret accepts."""


class SecretMeta(WireModel):
    """Metadata of a Secret: namespaced, unlike Grid's own resources."""

    model_config = ConfigDict(extra="ignore")

    name: ObjectName
    namespace: NamespaceName = "default"
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: Text | None = None
    resource_version: Text | None = None
    creation_timestamp: Timestamp | None = None


class Secret(WireModel):
    """A core v1 Secret whose values Grid never reveals."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["Secret"] = "Secret"
    metadata: SecretMeta
    type: Text | None = None
    data: dict[str, str] = Field(default_factory=dict, repr=False)
    """Base64-encoded values; only the keys are ever read."""
    string_data: dict[str, str] = Field(default_factory=dict, repr=False)
    """Plain values (write-only in Kubernetes); only the keys are ever read."""
    immutable: bool | None = None

    @field_validator("data", "string_data", mode="before")
    @classmethod
    def _keys_are_valid(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            for key in value:
                if not isinstance(key, str) or not _valid_key(key):
                    raise ValueError("keys must match [-._a-zA-Z0-9]+")
        return value

    @field_validator("data", mode="after")
    @classmethod
    def _data_is_base64(cls, data: dict[str, str]) -> dict[str, str]:
        # A field validator, not a model one, so a bad stringData key and a bad data
        # value are reported together instead of one hiding the other.
        for key, encoded in data.items():
            try:
                base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"the value of key {key!r} is not valid base64") from None
        return data

    @property
    def keys(self) -> frozenset[str]:
        """Every key present in `data` or `stringData`."""
        return frozenset(self.data) | frozenset(self.string_data)

    def has_key(self, key: str) -> bool:
        """Whether the Secret holds `key`."""
        return key in self.keys

    def matches(self, ref: SecretRef) -> bool:
        """Whether `ref` names this Secret (by namespace and name)."""
        return ref.name == self.metadata.name and ref.namespace == self.metadata.namespace

    def __str__(self) -> str:
        return f"Secret {self.metadata.namespace}/{self.metadata.name} (keys: {sorted(self.keys)})"


def _valid_key(key: str) -> bool:
    return bool(re.fullmatch(SECRET_KEY_PATTERN, key)) and len(key) <= 253


def parse_secret(obj: Mapping[str, Any]) -> Secret:
    """Validate a decoded core v1 Secret; errors name fields and keys, never values."""
    try:
        return Secret.model_validate(obj)
    except pydantic.ValidationError as exc:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        raise InvalidResource(issues_from(exc), resource=f"Secret/{name or '?'}") from None
