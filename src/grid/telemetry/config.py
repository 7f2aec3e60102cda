"""The gateway's configuration: a YAML or TOML file, overridden by flags.

The file is a flat mapping. Its keys are the `GatewaySettings` names (every
seed-004 limit, see docs/telemetry.md) plus the service keys below; an unknown
key is an error that names it. Command-line flags override file values.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from grid.core.telemetry.settings import GatewaySettings
from grid.errors import ValidationError

DEFAULT_DATA_DIR = Path(".grid/telemetry")


class GatewayConfig(BaseModel):
    """Where the gateway's certificates and data live, plus its admission settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cert: Path = Field(description="PEM server certificate (chain) presented to agents.")
    key: Path = Field(description="PEM private key of the server certificate.")
    client_ca: Path = Field(description="PEM CA bundle that agent client certificates chain to.")
    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Embedded backbone and roster directory.")
    backbone: str = Field("sqlite", description="'sqlite' or nats://HOST:PORT (JetStream).")
    metrics_bind: str | None = Field(
        None,
        description="host:port for /metrics, /healthz and /readyz; absent: not served.",
    )
    settings: GatewaySettings = Field(default_factory=GatewaySettings)

    @field_validator("backbone")
    @classmethod
    def _backbone_is_known(cls, value: str) -> str:
        if value == "sqlite" or value.startswith("nats://"):
            return value
        raise ValueError("backbone must be 'sqlite' or nats://HOST:PORT")


SERVICE_KEYS = frozenset(GatewayConfig.model_fields) - {"settings"}
SETTING_KEYS = frozenset(GatewaySettings.model_fields)


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML file (TOML when the name ends in ``.toml``) into a flat mapping."""
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ValidationError(f"{path}: not valid {path.suffix or 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: the config file must be a mapping")
    return dict(data)


def build_config(file_values: dict[str, Any], overrides: dict[str, Any]) -> GatewayConfig:
    """Merge file values with flag overrides (flags win; None means not given)."""
    merged = dict(file_values)
    merged.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(merged) - SERVICE_KEYS - SETTING_KEYS)
    if unknown:
        raise ValidationError(f"unknown config key {unknown[0]!r}", path=unknown[0])
    service = {k: v for k, v in merged.items() if k in SERVICE_KEYS}
    settings = {k: v for k, v in merged.items() if k in SETTING_KEYS}
    try:
        return GatewayConfig(**service, settings=GatewaySettings(**settings))
    except PydanticValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        said = "required" if first["type"] == "missing" else first["msg"]
        said = said.removeprefix("Value error, ")
        raise ValidationError(f"{where or 'config'}: {said}", path=where) from exc
