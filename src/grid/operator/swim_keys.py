"""The SWIM keyring from the ``swimKeyRef`` Secret, reloaded live; tuning changes restart.

The Secret holds the key in one of two layouts (docs/operator.md):

* rotation layout: item `PRIMARY_ITEM` (32 raw bytes, base64 in ``data``) seals
  every outgoing frame; items `OLDER_ITEMS` (``previous-1``, ``previous-2``),
  when present, are accepted on receipt as well, so keys rotate without a flag
  day: add the new key as ``previous-1`` everywhere, then swap it into
  ``primary`` (the old primary moving to ``previous-1``) everywhere, then drop
  the old one;
* single-key layout: the reference's ``key`` item (when unset: ``swim.key``, then
  upstream Grid's ``key``).

`SwimKeys` reads the keyring at start and again whenever the Secret changes.
The node switches keyrings between two datagrams, with no moment without a key,
so there is never a plaintext window; a Secret that goes missing or malformed
keeps the keyring in use and is reported (``SecretsResolved``), never a
fallback to something weaker.

`tuning_change` says whether a new GridNetwork changed ``spec.swim`` or
``spec.seeds``. Those are not applied live: the operator stops with one clear
line and its supervisor (the Deployment, or ``grid demo``'s) restarts it, which
leaves the mesh gracefully and rejoins with the new tuning.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
from pathlib import Path
from typing import Any, Final

from pydantic import SecretBytes

from grid.adapters.store.port import ResourceStore
from grid.core.resources import GridNetwork
from grid.core.swim.config import SwimConfig
from grid.core.wire.keyring import Keyring
from grid.errors import NotFound, ValidationError
from grid.operator.startup import SWIM_KEY_DEFAULT_ITEM, StartupError

log = logging.getLogger(__name__)

PRIMARY_ITEM: Final = "primary"
"""Secret item whose key seals outgoing SWIM frames (rotation layout)."""
OLDER_ITEMS: Final = ("previous-1", "previous-2")
"""Secret items of older keys still accepted on receipt, newest first."""
UPSTREAM_KEY_ITEM: Final = "key"
"""The item upstream Grid reads when swimKeyRef names none, tried after ``swim.key``."""


class SwimKeyError(ValidationError):
    """The Secret's content is not a usable keyring (the message names no bytes)."""


def _decode(data: dict[str, Any], item: str) -> bytes | None:
    encoded = data.get(item)
    if not encoded:
        return None
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise SwimKeyError(f"item {item!r} is not base64") from None
    if len(raw) != 32:
        raise SwimKeyError(f"item {item!r} is not a 32-byte key")
    return raw


def keyring_from_secret(obj: dict[str, Any], *items: str) -> Keyring:
    """The keyring a Secret object holds; raises `SwimKeyError` when it holds none.

    ``items`` are the single-key layout's items, tried in order (for a reference
    naming no key: ``swim.key``, then upstream Grid's ``key``).
    """
    data = obj.get("data") or {}
    primary = _decode(data, PRIMARY_ITEM)
    if primary is None:
        single = next((k for k in (_decode(data, item) for item in items) if k is not None), None)
        if single is None:
            tried = " nor ".join(repr(i) for i in (PRIMARY_ITEM, *items))
            raise SwimKeyError(f"neither {tried} holds a key")
        return Keyring(single)
    older = [k for k in (_decode(data, item) for item in OLDER_ITEMS) if k is not None]
    return Keyring(primary, older)


class SwimKeys:
    """Where this operator's SWIM keyring comes from, and whether it still resolves."""

    def __init__(
        self, store: ResourceStore, key_file: Path | None, key: SecretBytes | None = None
    ) -> None:
        """``key`` is the environment's key (upstream's ``GRID_SWIM_ENCRYPT_KEY``)."""
        self._store = store
        self._key_file = key_file
        self._key = key
        self.unreadable: str | None = None
        """``namespace/name`` of the swimKeyRef Secret while it does not resolve."""

    async def _read(self, network: GridNetwork) -> Keyring | None:
        ref = network.spec.tls.swim_key_ref if network.spec.tls else None
        if ref is None:
            return None
        name = f"{ref.namespace}/{ref.name}"
        try:
            obj = await self._store.get("Secret", ref.name, namespace=ref.namespace)
            items = (ref.key,) if ref.key else (SWIM_KEY_DEFAULT_ITEM, UPSTREAM_KEY_ITEM)
            keyring = keyring_from_secret(obj, *items)
        except (NotFound, SwimKeyError, ValueError) as exc:
            if self.unreadable != name:
                log.warning(
                    "swim key Secret unreadable",
                    extra={"secret": name, "error": type(exc).__name__},
                )
            self.unreadable = name
            return None
        self.unreadable = None
        return keyring

    async def load(self, network: GridNetwork) -> Keyring:
        """The keyring at start: the Secret's, else ``--swim-key-file``'s, else the
        environment's ``GRID_SWIM_ENCRYPT_KEY``; or refuse to start."""
        keyring = await self._read(network)
        if keyring is not None:
            return keyring
        raw = self._key_file.read_bytes() if self._key_file is not None else None
        if raw is None and self._key is not None:
            raw = self._key.get_secret_value()
        if raw is not None:
            if len(raw) != 32:
                raise StartupError("the SWIM key must be exactly 32 bytes")
            return Keyring(raw)
        raise StartupError(
            "no SWIM key: create the swimKeyRef Secret, pass --swim-key-file "
            "or set GRID_SWIM_ENCRYPT_KEY"
        )

    async def reload(self, network: GridNetwork, current: Keyring) -> Keyring | None:
        """The Secret's keyring when it differs from ``current``; None to keep ``current``."""
        if network.spec.tls is None or network.spec.tls.swim_key_ref is None:
            return None
        keyring = await self._read(network)
        if keyring is None or keyring == current:
            return None
        log.info("swim keyring reloaded", extra={"keys": len(keyring.keys)})
        return keyring


def swim_config(network: GridNetwork, dead_retention_s: float) -> SwimConfig:
    """The SWIM settings of ``spec.swim``, with ``--swim-dead-retention``'s tombstone time."""
    swim = network.spec.swim
    config = SwimConfig.from_spec(
        gossip_nodes=swim.gossip_nodes,
        probe_interval_s=swim.probe_interval_s,
        suspicion_timeout_s=swim.suspicion_timeout_s,
    )
    return dataclasses.replace(config, dead_retention_s=dead_retention_s)


def tuning_change(before: GridNetwork | None, after: GridNetwork | None) -> str | None:
    """Which SWIM setting a GridNetwork change touched (``spec.swim``, ``spec.seeds``), if any."""
    if before is None or after is None:
        return None
    if before.spec.swim != after.spec.swim:
        return "spec.swim"
    if list(before.spec.seeds) != list(after.spec.seeds):
        return "spec.seeds"
    return None
