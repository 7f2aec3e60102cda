"""Store URLs: which `ResourceStore` a process talks to.

``sqlite:PATH`` opens the embedded store file (relative paths are relative to
the working directory); ``kubernetes`` names the Kubernetes API adapter, which
this build does not include yet, so asking for it fails with a clear error
rather than silently falling back. `DEFAULT_STORE_URL` is what the CLI uses
without ``--store`` or ``GRID_STORE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grid.adapters.store.port import ResourceStore
from grid.errors import GridError, ValidationError

DEFAULT_STORE_URL = "sqlite:.grid/store.db"
STORE_ENV = "GRID_STORE"


@dataclass(frozen=True)
class StoreUrl:
    """A parsed store URL: ``scheme`` is ``sqlite`` or ``kubernetes``."""

    scheme: str
    path: Path | None = None


def parse_store_url(url: str) -> StoreUrl:
    """Parse ``sqlite:PATH`` or ``kubernetes``; anything else is a `ValidationError`."""
    text = url.strip()
    if text == "kubernetes":
        return StoreUrl("kubernetes")
    if text.startswith("sqlite:"):
        raw = text.removeprefix("sqlite:")
        if raw.startswith("//"):
            raw = raw.removeprefix("//")
        if not raw:
            raise ValidationError(
                "sqlite: needs a file path, as in sqlite:.grid/store.db", path="store"
            )
        return StoreUrl("sqlite", Path(raw))
    raise ValidationError(
        f"unknown store {url!r}: expected sqlite:PATH or kubernetes", path="store"
    )


async def open_store(url: str) -> ResourceStore:
    """Open the store a URL names."""
    parsed = parse_store_url(url)
    if parsed.scheme == "kubernetes":
        raise GridError(
            "the kubernetes store is not available in this build; use --store sqlite:PATH",
            code="store_unavailable",
        )
    from grid.adapters.store.sqlite import SqliteStore

    assert parsed.path is not None
    return await SqliteStore.open(parsed.path)
