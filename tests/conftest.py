"""Suite-wide test settings.

Hypothesis explores new examples on every developer run, but CI (``CI=true``)
runs a derandomized profile: the same examples each time, so a red CI run is
reproducible and a green one is not luck. Failures print the blob to replay.

``poll_quickstart`` is the quickstart example under ``signalTransport.mode: poll``.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


@pytest.fixture
def poll_quickstart(tmp_path: Path) -> Path:
    """A copy of the quickstart's manifests with ``signalTransport.mode: poll``."""
    for source in QUICKSTART.glob("*.yaml"):
        text = source.read_text()
        if source.name == "00-network.yaml":
            assert "  signalTransport:\n    mode: gossip\n" in text
            text = text.replace(
                "  signalTransport:\n    mode: gossip\n", "  signalTransport:\n    mode: poll\n"
            )
        (tmp_path / source.name).write_text(text)
    return tmp_path
