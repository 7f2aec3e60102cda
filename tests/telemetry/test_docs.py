"""docs/telemetry.md documents every setting and every refusal code."""

from __future__ import annotations

from pathlib import Path

from grid.core.telemetry.refusals import REFUSALS
from grid.core.telemetry.settings import GatewaySettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"


def test_every_setting_and_flag_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in GatewaySettings.model_fields:
        assert f"`{name}`" in text and f"`--{name.replace('_', '-')}`" in text, name


def test_every_refusal_code_is_documented_with_its_status() -> None:
    text = DOC.read_text(encoding="utf-8")
    for refusal in REFUSALS:
        assert f"| `{refusal.code}` | {refusal.status} |" in text, refusal.code
