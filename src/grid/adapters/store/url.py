"""Store URLs: which `ResourceStore` a process talks to.

``sqlite:PATH`` opens the embedded store file (relative paths are relative to
the working directory); ``kubernetes`` opens the Kubernetes API store, configured
from ``--kubeconfig``, ``KUBECONFIG``, the in-cluster service account or
``~/.kube/config``, in that order. Events for cluster-scoped objects go to
``POD_NAMESPACE`` (the Downward API; ``default`` without it).
`DEFAULT_STORE_URL` is what the CLI uses without ``--store`` or ``GRID_STORE``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grid.adapters.store.port import DEFAULT_NAMESPACE, ResourceStore
from grid.errors import ValidationError

DEFAULT_STORE_URL = "sqlite:.grid/store.db"


def pod_namespace() -> str:
    """The namespace the process runs in: ``POD_NAMESPACE`` (the Downward API), else ``default``.

    The operator's Events, its Lease and its spend-ledger ConfigMap live there.
    """
    return os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE


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


async def open_store(url: str, *, kubeconfig: str | Path | None = None) -> ResourceStore:
    """Open the store a URL names; ``kubeconfig`` only matters for ``kubernetes``."""
    parsed = parse_store_url(url)
    if parsed.scheme == "kubernetes":
        from grid.adapters.store.kubernetes import KubernetesStore

        return await KubernetesStore.connect(
            kubeconfig,
            event_namespace=pod_namespace(),
            reporting_instance=os.environ.get("POD_NAME", ""),
        )
    from grid.adapters.store.sqlite import SqliteStore

    assert parsed.path is not None
    return await SqliteStore.open(parsed.path)
