"""Writing the rendered overlay: the ConfigMap through the store port, and files.

An overlay is written only when its revision changes, so re-rendering identical
state writes nothing anywhere (no ConfigMap update, no file rename, no watch
event). The ConfigMap goes through the `ResourceStore` port, so the embedded
store and a Kubernetes store need no different logic. In the embedded default
the same two documents also land in the site's output directory, each written
atomically: a temporary file in the same directory, fsync, rename, fsync of the
directory. A gateway whose ``consumerConfig`` is enabled also gets its
``praxis.yaml`` (`ConsumerConfigWriter`), written the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from grid.adapters.store.encoded import EncodedText
from grid.adapters.store.port import ResourceStore
from grid.core.overlay.configmap import (
    LAYOUTS,
    Layout,
    configmap_annotations,
    upstream_configmap_name,
)
from grid.core.overlay.consumer import (
    CONFIG_ERROR,
    DISABLED,
    RENDER_FAILED,
    ConsumerConfigError,
    render_consumer_config,
)
from grid.core.overlay.consumer import CONFIG_KEY as PRAXIS_KEY
from grid.core.overlay.envelope import Scope
from grid.core.overlay.file_text import document_text
from grid.core.resources.network_spec import ConsumerSpec
from grid.core.resources.overlay_status import Distribution
from grid.core.routing.render import Rendered, poll_ranking
from grid.core.vocabulary import OverlayFormat
from grid.errors import AlreadyExists, Conflict, GridError, NotFound
from grid.operator.resilience import WriteFailed, WriteGuard, WriteSite

CONFIG_KEY = LAYOUTS[OverlayFormat.GRID].config_key
"""``grid-config.json``, the bare overlay's key in Grid's layout (§1)."""
ENVELOPE_KEY = LAYOUTS[OverlayFormat.GRID].envelope_key
"""``grid-overlay.json``, the envelope's key in Grid's layout (§1)."""
BUDGETS_KEY = "grid-budgets.json"
"""The budget view (§12), a key of the same ConfigMap and a file beside the overlay."""
CONSUMER_APPLY_FAILED = "ConsumerConfigApplyFailed"
"""The reason a gateway's praxis.yaml ConfigMap could not be written (tried again next round)."""
NAME_MAX = 63
"""Kubernetes name limit for the ConfigMap; longer names are shortened."""
ConfigMaps = dict[tuple[str, str], dict[str, Any]]
"""Per (namespace, name): a ConfigMap as this process last stored it (`upsert_configmap`)."""


def configmap_name(network: str, gateway: str, fmt: OverlayFormat = OverlayFormat.GRID) -> str:
    """``grid-overlay-{network}-{gateway}``, shortened deterministically past 63 chars.

    In Grid's layout a long name keeps its first 54 characters (trailing dashes
    trimmed), then a dash and the first 8 hex digits of the SHA-256 of the full
    name, so two long names that share a prefix still differ. In upstream's it
    follows upstream's rule (`grid.core.overlay.configmap.upstream_configmap_name`).
    """
    if fmt is OverlayFormat.UPSTREAM:
        return upstream_configmap_name(network, gateway)
    return short_name(f"grid-overlay-{network}-{gateway}")


def short_name(name: str) -> str:
    """``name`` when it fits 63 characters, else its first 54 (trailing dashes trimmed),
    a dash and the first 8 hex digits of its SHA-256."""
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: NAME_MAX - 9].rstrip('-')}-{digest}"


def dumps(document: dict[str, Any]) -> str:
    """The stable text form of an overlay document: sorted keys, compact separators.

    Compact output keeps the C encoder in play (``indent`` forces the pure-Python
    one), which matters when a 1,024-candidate overlay is rewritten every scrape.
    """
    return document_text(document) + "\n"


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half.

    ``mode`` is the file's permission bits, set before any byte is written (0o600
    for private material), whatever the umask.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _file_revision(directory: Path, layout: Layout) -> str:
    """The revision of the envelope file in a directory, if readable."""
    try:
        envelope = json.loads((directory / layout.envelope_key).read_text())
        return str(envelope["revision"]["value"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


class OverlayWriter:
    """Writes each gateway's overlay when, and only when, its revision (or layout) changes."""

    def __init__(
        self, store: ResourceStore, overlay_dir: Path | None, guard: WriteGuard | None = None
    ) -> None:
        self._store = store
        self._root = overlay_dir
        self.guard = guard or WriteGuard()
        """Retries and counts the ConfigMap writes (`grid.operator.resilience`)."""
        self._held: dict[tuple[str, str], tuple[OverlayFormat, Distribution | None]] = {}
        """Per (network, gateway): the layout and what its ConfigMap holds, once read."""
        self.configmaps: ConfigMaps = {}
        """The ConfigMaps as last stored here: a write replaces from them (`upsert_configmap`)."""
        self.per_gateway = False
        """With more than one gateway at the site, each gets ``{overlay_dir}/{gateway}/``."""
        self.writes = 0

    @property
    def store(self) -> ResourceStore:
        """The store the ConfigMaps go to."""
        return self._store

    def directory(self, gateway: str) -> Path | None:
        """Where a gateway's files go: the overlay directory, or its gateway subdirectory."""
        if self._root is None:
            return None
        return self._root / gateway if self.per_gateway else self._root

    def distributed(self, network: str, gateway: str) -> Distribution | None:
        """What a gateway's ConfigMap holds, as last written or read."""
        held = self._held.get((network, gateway))
        return held[1] if held is not None else None

    def revision_of(self, network: str, gateway: str) -> str | None:
        """The revision last written for a gateway, if any."""
        held = self.distributed(network, gateway)
        return held.revision if held is not None else None

    async def write(self, rendered: Rendered, fmt: OverlayFormat = OverlayFormat.GRID) -> bool:
        """Write the overlay if its revision is new; True when something was written."""
        scope = rendered.scope
        revision = str(rendered.envelope["revision"]["value"])
        key = (scope.network, scope.gateway)
        layout = LAYOUTS[fmt]
        name = configmap_name(scope.network, scope.gateway, fmt)
        directory = self.directory(scope.gateway)
        held = self._held.get(key)
        if held is None or held[0] is not fmt:
            stored = await self._stored(name, scope.namespace, layout)
            # The ConfigMap is written before the files, so a crash in between
            # leaves the files behind; only a revision both agree on counts.
            files = _file_revision(directory, layout) if directory is not None else None
            if stored is not None and files not in (None, stored.revision):
                stored = None
            held = self._held[key] = (fmt, stored)
        if held[1] is not None and held[1].revision == revision:
            return False
        # With their JSON literals kept, the store splices them in unescaped again.
        texts = rendered.file_lines
        config = EncodedText.of(texts.config, texts.config_literal)
        envelope = EncodedText.of(texts.envelope, texts.envelope_literal)
        other = {
            k for f, o in LAYOUTS.items() if f is not fmt for k in (o.config_key, o.envelope_key)
        }
        written = await self.guard.write(
            WriteSite.OVERLAY,
            lambda: upsert_configmap(
                self._store,
                name,
                scope.namespace,
                _labels(scope.network, scope.gateway),
                {layout.config_key: config, layout.envelope_key: envelope},
                annotations=configmap_annotations(fmt, rendered.envelope),
                drop=other,
                known=self.configmaps,
            ),
        )
        if directory is not None:
            atomic_write(directory / layout.config_key, config.encode())
            atomic_write(directory / layout.envelope_key, envelope.encode())
            for stale in other:
                (directory / stale).unlink(missing_ok=True)
        version = str(written["metadata"].get("resourceVersion", ""))
        self._held[key] = (fmt, Distribution.of(rendered.envelope, version))
        self.writes += 1
        return True

    async def write_budgets(
        self,
        network: str,
        gateway: str,
        namespace: str,
        text: str,
        fmt: OverlayFormat = OverlayFormat.GRID,
    ) -> None:
        """Write the budget view (§12) as a key of the gateway's overlay ConfigMap and a file.

        The ConfigMap's new resourceVersion becomes the distribution's on record."""
        written = await self.guard.write(
            WriteSite.BUDGETS,
            lambda: upsert_configmap(
                self._store,
                configmap_name(network, gateway, fmt),
                namespace,
                _labels(network, gateway),
                {BUDGETS_KEY: text},
                known=self.configmaps,
            ),
        )
        held = self._held.get((network, gateway))
        if held is not None and held[0] is fmt and held[1] is not None:
            version = str(written["metadata"].get("resourceVersion", ""))
            self._held[network, gateway] = (
                fmt,
                dataclasses.replace(held[1], resource_version=version),
            )
        directory = self.directory(gateway)
        if directory is not None:
            atomic_write(directory / BUDGETS_KEY, text.encode())

    async def _stored(self, name: str, namespace: str, layout: Layout) -> Distribution | None:
        """What the ConfigMap ``name`` holds in ``layout``, or None."""
        try:
            cm = await self._store.get("ConfigMap", name, namespace=namespace)
            envelope = json.loads((cm.get("data") or {}).get(layout.envelope_key, "{}"))
            return Distribution.of(envelope, str(cm["metadata"].get("resourceVersion", "")))
        except (NotFound, ValueError, AttributeError, KeyError, TypeError):
            return None


def _labels(network: str, gateway: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": "grid-operator",
        "grid.praxis-proxy.io/network": network,
        "grid.praxis-proxy.io/gateway": gateway,
    }


async def upsert_configmap(
    store: ResourceStore,
    name: str,
    namespace: str,
    labels: dict[str, str],
    data: dict[str, str],
    *,
    annotations: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
    known: ConfigMaps | None = None,
) -> dict[str, Any]:
    """Create the ConfigMap, or replace the keys of ``data`` (keeping the other keys and the
    resourceVersion): the overlay and the budget view share one ConfigMap. ``drop`` names
    keys to remove; ``annotations``, when given, replace the ConfigMap's. Returns the
    object as stored.

    ``known`` keeps what each write stored, so the next one replaces from it without
    reading the ConfigMap back. The replace is optimistic (its resourceVersion): when
    someone else wrote or removed the ConfigMap meanwhile it is refused, and the write
    reads the ConfigMap again and goes on from what it holds."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data,
    }
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    drop = tuple(drop)  # read twice when an optimistic replace is refused
    key = (namespace, name)
    current = known.pop(key, None) if known is not None else None
    if current is not None:
        try:
            stored = await store.replace(_merged(obj, current, annotations is None, drop))
        except (Conflict, NotFound):
            current = None
    if current is None:
        stored = await _read_and_write(store, obj, annotations is None, drop)
    if known is not None:
        known[key] = stored
    return stored


async def _read_and_write(
    store: ResourceStore, obj: dict[str, Any], keep_annotations: bool, drop: Iterable[str]
) -> dict[str, Any]:
    """`upsert_configmap` from what the store holds now: create, or replace the keys."""
    name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
    try:
        current = await store.get("ConfigMap", name, namespace=namespace)
    except NotFound:
        try:
            return await store.create(obj)
        except AlreadyExists:
            current = await store.get("ConfigMap", name, namespace=namespace)
    return await store.replace(_merged(obj, current, keep_annotations, drop))


def _merged(
    obj: dict[str, Any], current: Mapping[str, Any], keep_annotations: bool, drop: Iterable[str]
) -> dict[str, Any]:
    """``obj`` over ``current``: its resourceVersion, the other keys (less ``drop``) and,
    with ``keep_annotations``, its annotations."""
    metadata = {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
    if keep_annotations and current["metadata"].get("annotations"):
        metadata["annotations"] = current["metadata"]["annotations"]
    dropped = set(drop)
    kept = {k: v for k, v in (current.get("data") or {}).items() if k not in dropped}
    return {**obj, "metadata": metadata, "data": {**kept, **obj["data"]}}


class ConsumerConfigWriter:
    """Renders and writes each gateway's ``praxis.yaml`` when, and only when, it changes.

    The text is rendered from the overlay on every pass (pure and cheap) and
    compared with what was last written, so an overlay revision that changes
    the file rewrites it and one that does not writes nothing. The ConfigMap is
    ``consumerConfig.configMapName`` in the gateway's namespace with the one key
    ``praxis.yaml``; in the embedded default the same text also lands in the
    gateway's overlay directory.
    """

    def __init__(
        self, store: ResourceStore, overlays: OverlayWriter, guard: WriteGuard | None = None
    ) -> None:
        self._store = store
        self._overlays = overlays
        self._guard = guard or WriteGuard()
        self._written: dict[tuple[str, str, str], str | None] = {}
        self._inputs: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        """Per gateway: what its last written praxis.yaml was rendered from."""
        self.writes = 0
        self.renders = 0

    def overlay_file(
        self, config: ConsumerSpec, gateway: str, fmt: OverlayFormat = OverlayFormat.GRID
    ) -> str | None:
        """The envelope path the route filter reads, or None for inline candidates."""
        if config.overlay_file is not None:
            return config.overlay_file
        directory = self._overlays.directory(gateway)
        envelope = LAYOUTS[fmt].envelope_key
        return None if directory is None else str((directory / envelope).absolute())

    async def write(
        self,
        rendered: Rendered,
        config: ConsumerSpec | None,
        fmt: OverlayFormat = OverlayFormat.GRID,
    ) -> dict[str, Any]:
        """Render and write one gateway's praxis.yaml; returns its status entry.

        ``fmt`` is the gateway's overlay layout, which names the envelope file the
        route filter reads in the embedded default."""
        scope = rendered.scope
        name = config.config_map_name if config else ConsumerSpec().config_map_name
        entry: dict[str, Any] = {
            "gatewayName": scope.gateway,
            "namespace": scope.namespace,
            "configMapName": name,
            "observedGeneration": rendered.network.metadata.generation,
        }
        if config is None or not config.enabled:
            return {**entry, "phase": "Disabled", "reason": DISABLED}
        ranking = poll_ranking(rendered)
        overlay_file = self.overlay_file(config, scope.gateway, fmt)
        route = ranking.route_fields() if ranking is not None else None
        key = (scope.network, scope.gateway, name)
        policy = rendered.network.spec.budget_policy
        tenant = policy.default_tenant if policy is not None else None
        inputs = consumer_inputs(rendered.overlay, scope, config, overlay_file, route, tenant)
        if inputs is not None and self._inputs.get(key) == inputs:
            return {**entry, "phase": "Rendered", "reason": "Rendered"}
        self._inputs.pop(key, None)
        self.renders += 1
        try:
            result = render_consumer_config(
                rendered.overlay, scope, config, overlay_file, route, tenant
            )
        except (GridError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
            # Not a fail-closed reason of §11: an input the renderer could not take. The
            # round goes on; the status names the failure's type, never its content.
            message = f"praxis.yaml did not render ({type(exc).__name__})"
            return {**entry, "phase": "Error", "reason": RENDER_FAILED, "message": message}
        if isinstance(result, ConsumerConfigError):
            return {**entry, "phase": "Error", "reason": result.reason, "message": result.message}
        directory = self._overlays.directory(scope.gateway)
        try:
            if key not in self._written:
                # After a restart, what the store and the file already hold counts as written.
                self._written[key] = await self._stored(name, scope.namespace, directory)
            if self._written[key] != result.text:
                await self._guard.write(
                    WriteSite.CONSUMER_CONFIG,
                    lambda: upsert_configmap(
                        self._store,
                        name,
                        scope.namespace,
                        _labels(scope.network, scope.gateway),
                        {PRAXIS_KEY: result.text},
                        known=self._overlays.configmaps,
                    ),
                )
        except (GridError, OSError) as exc:
            # The store refused or failed: the status says so, the next round tries again.
            reason = exc.failure.reason.value if isinstance(exc, WriteFailed) else "read"
            message = f"the {name} ConfigMap was not written ({reason})"
            return {**entry, "phase": "Error", "reason": CONSUMER_APPLY_FAILED, "message": message}
        if self._written[key] != result.text:
            if directory is not None:
                try:
                    atomic_write(directory / PRAXIS_KEY, result.text.encode())
                except OSError as exc:
                    message = f"{PRAXIS_KEY} not written to the overlay directory: {exc.strerror}"
                    return {**entry, "phase": "Error", "reason": CONFIG_ERROR, "message": message}
            self._written[key] = result.text
            self.writes += 1
        if inputs is not None:
            self._inputs[key] = inputs
        return {**entry, "phase": "Rendered", "reason": "Rendered"}

    async def _stored(self, name: str, namespace: str, directory: Path | None) -> str | None:
        """The praxis.yaml the ConfigMap holds, if the file (when kept) holds the same."""
        try:
            cm = await self._store.get("ConfigMap", name, namespace=namespace)
        except NotFound:
            return None
        text = (cm.get("data") or {}).get(PRAXIS_KEY)
        if not isinstance(text, str):
            return None
        if directory is not None:
            try:
                if (directory / PRAXIS_KEY).read_text() != text:
                    return None
            except (OSError, UnicodeDecodeError):
                return None
        return text


def consumer_inputs(
    overlay: Mapping[str, Any],
    scope: Scope,
    config: ConsumerSpec,
    overlay_file: str | None,
    route: Mapping[str, Any] | None,
    default_tenant: str | None = None,
) -> tuple[Any, ...] | None:
    """What `render_consumer_config` reads: equal inputs render the same ``praxis.yaml``.

    With an ``overlay_file`` the text holds the sets of the candidates' clusters and
    credentials (each listed in a fixed order), not the candidates themselves, so a
    signal that moves a score or the rank order but no cluster renders nothing (only
    a text that rendered is kept: one that failed closed, whose reason follows overlay
    order, renders again next round). Inline candidates are the text itself: None,
    always render.
    """
    if overlay_file is None:
        return None
    candidates = overlay["candidates"]
    clusters = tuple(sorted({str(c["cluster"]) for c in candidates}))
    credentials = tuple(
        sorted(
            {json.dumps(c["credential"], sort_keys=True) for c in candidates if c.get("credential")}
        )
    )
    return (
        config.model_dump_json(),
        scope,
        overlay_file,
        json.dumps(route, sort_keys=True) if route is not None else None,
        overlay.get("local_site"),
        clusters,
        credentials,
        default_tenant,
    )
