"""Constrained scalar types shared by Grid's resource models.

Each type carries its own validation and the JSON-schema hints the CRD generator
publishes, so the Python model and the Kubernetes schema reject the same values.
Every pattern here is RE2-compatible (no lookaround, no backreferences) because the
Kubernetes API server evaluates CRD patterns with Go's regexp package.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic.config import ConfigDict
from pydantic.main import BaseModel

from grid.core.address import parse_address
from grid.errors import ValidationError as GridValidationError

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (RFC 1123 subdomain)."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A Kubernetes namespace name (RFC 1123 label)."""

HOST_PORT_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$"
"""``host:port`` with a DNS name, an IPv4 address or a bracketed IPv6 address."""

FINGERPRINT_PATTERN = r"^([0-9a-f]{64}|[0-9a-f]{2}(:[0-9a-f]{2}){31})$"
"""SHA-256 of a leaf certificate's DER: 64 lowercase hex digits, optionally colon-separated."""

URL_PATTERN = (
    r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)(:[0-9]{1,5})?"
    r"([/?#][^\s]*)?$"
)
"""An absolute ``http`` or ``https`` URL."""

HTTP_PATH_PATTERN = r"^/[^\s?#]*$"
"""An absolute HTTP path such as ``/metrics``."""

METRIC_SOURCE_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*(/[a-zA-Z_:][a-zA-Z0-9_:]*)?$"
"""A Prometheus metric name, or ``numerator/denominator`` for a ratio of two counters."""

TIMESTAMP_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
"""An RFC 3339 timestamp as Kubernetes writes it (``2026-01-01T00:00:00Z``)."""

U64_PATTERN = r"^(0|[1-9][0-9]{0,19})$"
"""A u64 written in decimal (Kubernetes integers are int64, so u64 values travel as strings)."""

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value (at most 63 characters)."""

LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""A Kubernetes label key: an optional DNS-subdomain prefix and ``/``, then a name."""

TRUST_DOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
"""A SPIFFE trust domain (lowercase letters, digits, dots, dashes, underscores)."""

U64_MAX = 2**64 - 1

PATTERN_HINTS = {
    DNS_SUBDOMAIN_PATTERN: "must be a lowercase RFC 1123 name (a-z, 0-9, '-', '.')",
    DNS_LABEL_PATTERN: "must be a lowercase RFC 1123 label (a-z, 0-9, '-')",
    HOST_PORT_PATTERN: "must be host:port",
    FINGERPRINT_PATTERN: "must be a SHA-256 fingerprint: 64 lowercase hex digits, colons optional",
    URL_PATTERN: "must be an absolute http:// or https:// URL",
    HTTP_PATH_PATTERN: "must be an absolute path starting with '/'",
    METRIC_SOURCE_PATTERN: "must be a Prometheus metric name or 'numerator/denominator'",
    TIMESTAMP_PATTERN: "must be an RFC 3339 timestamp such as 2026-01-01T00:00:00Z",
    U64_PATTERN: "must be a decimal u64 written as a string",
    LABEL_KEY_PATTERN: "must be a label key: [prefix/]name, name alphanumerics, '-', '_', '.'",
    LABEL_VALUE_PATTERN: "must be a label value: alphanumerics, '-', '_', '.', at most 63",
    TRUST_DOMAIN_PATTERN: "must be a SPIFFE trust domain (lowercase, digits, '.', '-', '_')",
}
"""Plain-language messages for pattern mismatches, keyed by pattern."""


class WireModel(BaseModel):
    """Base of every resource model: camelCase on the wire, snake_case in Python.

    Validation is strict (``"3"`` is not a number, ``yes`` is not a string) and unknown
    fields are rejected with a message naming them. A Kubernetes structural schema
    would silently prune an unknown field; Grid refuses it instead, because a typo such
    as ``gosipNodes`` that silently falls back to a default is the worse failure.
    """

    model_config = ConfigDict(
        alias_generator=lambda name: _to_camel(name),
        populate_by_name=True,
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        validate_default=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON-compatible form, omitting unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _check_host_port(text: str) -> str:
    # The pattern fixes the shape; the one parser reads the port, whose range it checks.
    try:
        port = parse_address(text)[1]
    except GridValidationError:
        port = 0
    if port < 1:
        raise ValueError("port must be between 1 and 65535")
    return text


def _check_url(text: str) -> str:
    # The pattern fixes the shape (a DNS name, IPv4 or bracketed IPv6 host, an optional
    # port); the port's range and the bracketed address need a second look.
    authority = text.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if authority.startswith("["):
        address, _, rest = authority[1:].partition("]")
        if address.count(":") < 2 or ".." in address:
            raise ValueError("the bracketed host must be an IPv6 address")
        port = rest[1:] if rest.startswith(":") else None
    else:
        port = authority.rpartition(":")[2] if ":" in authority else None
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError("port must be between 1 and 65535")
    return text


def _timestamp_to_text(value: Any) -> Any:
    # YAML turns an unquoted RFC 3339 timestamp into a datetime; keep it a string.
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return value.isoformat().replace("+00:00", "Z")
    return value


def _check_u64(text: str) -> str:
    if int(text) > U64_MAX:
        raise ValueError("must be at most 18446744073709551615")
    return text


def _check_metric_source(text: str) -> str:
    # Guard against a degenerate ratio like "a/a", which is always 1.
    parts = text.split("/")
    if len(parts) == 2 and parts[0] == parts[1]:
        raise ValueError("a ratio needs two different metric names")
    return text


ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
HostPort = Annotated[
    str, Field(max_length=261, pattern=HOST_PORT_PATTERN), AfterValidator(_check_host_port)
]
Fingerprint = Annotated[str, Field(pattern=FINGERPRINT_PATTERN)]
Url = Annotated[str, Field(max_length=2048, pattern=URL_PATTERN), AfterValidator(_check_url)]
HttpPath = Annotated[str, Field(max_length=1024, pattern=HTTP_PATH_PATTERN)]
MetricSource = Annotated[
    str,
    Field(max_length=256, pattern=METRIC_SOURCE_PATTERN),
    AfterValidator(_check_metric_source),
]
Timestamp = Annotated[
    str,
    BeforeValidator(_timestamp_to_text),
    # The pattern is repeated for the JSON schema, which omits it behind a validator.
    Field(pattern=TIMESTAMP_PATTERN, json_schema_extra={"pattern": TIMESTAMP_PATTERN}),
]
U64Text = Annotated[str, Field(pattern=U64_PATTERN), AfterValidator(_check_u64)]
TrustDomain = Annotated[str, Field(max_length=255, pattern=TRUST_DOMAIN_PATTERN)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]
Text = Annotated[str, Field(max_length=1024)]
LabelKey = Annotated[str, Field(max_length=317, pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]


def normalize_fingerprint(fingerprint: str) -> str:
    """A fingerprint as 64 lowercase hex digits, with any colons removed."""
    if not re.fullmatch(FINGERPRINT_PATTERN, fingerprint):
        raise ValueError("fingerprint must be 64 lowercase hex digits, optionally with colons")
    return fingerprint.replace(":", "")
