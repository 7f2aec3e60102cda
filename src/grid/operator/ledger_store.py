"""Where the site's spend ledger survives a restart: a ConfigMap, and a file when there is a disk.

The ledger (`grid.core.metering.budgets.Ledger`) must outlive the process, or a restarted
operator would publish a lower slot than it had gossiped, and a counter it had
priced would be priced again. It is kept in two places:

* the ConfigMap ``grid-budget-ledger-{site}`` (key ``budget-ledger.json``) in
  the operator's namespace, written through the `ResourceStore` port, so it is
  kept by the embedded store and by Kubernetes alike, and a new leader of a
  replicated operator reads what the old one wrote;
* ``budget-ledger.json`` in the state directory, when the operator has one.

Each save carries a sequence number one above the last, and a load takes the
copy with the higher sequence (a crash between the two writes leaves one copy a
step behind). A save that fails raises, so the caller keeps its old ledger and
gossips nothing it has not persisted. An unreadable copy is logged and ignored;
with no readable copy the ledger starts empty and is raised to what the mesh
echoes back of this site's slot.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from grid.adapters.store.port import ResourceStore
from grid.core.metering.budgets import BudgetDocumentError, Ledger
from grid.errors import NotFound
from grid.operator.output import atomic_write, short_name, upsert_configmap
from grid.operator.resilience import WriteGuard, WriteSite

log = logging.getLogger(__name__)

LEDGER_FILE = "budget-ledger.json"
"""The ledger's file name in the state directory, and its ConfigMap key."""

SEQUENCE_KEY = "sequence"
"""The save counter stored beside the ledger's own fields."""


def ledger_configmap_name(site: str) -> str:
    """``grid-budget-ledger-{site}``, shortened deterministically past 63 characters."""
    return short_name(f"grid-budget-ledger-{site}")


def _parse(text: str, where: str) -> tuple[int, Ledger] | None:
    """(sequence, ledger) from a saved copy, or None (logged) when it is not one."""
    try:
        doc = json.loads(text)
        ledger = Ledger.from_wire(doc)
        sequence = int(doc.get(SEQUENCE_KEY, 0))
    except (ValueError, TypeError, AttributeError, BudgetDocumentError) as exc:
        log.error(
            "budget ledger copy unreadable; ignoring it",
            extra={"copy": where, "error": type(exc).__name__},
        )
        return None
    return sequence, ledger


class LedgerStore:
    """Loads and saves one site's ledger in its ConfigMap and its state file."""

    def __init__(
        self,
        store: ResourceStore,
        site: str,
        namespace: str,
        state_dir: Path | None,
        guard: WriteGuard | None = None,
    ) -> None:
        self.store = store
        self.name = ledger_configmap_name(site)
        self.namespace = namespace
        self.path = state_dir / LEDGER_FILE if state_dir is not None else None
        self.sequence = 0
        self.guard = guard or WriteGuard()

    async def load(self) -> Ledger:
        """The newest readable copy (an empty ledger when there is none)."""
        copies = [c for c in (await self._from_store(), self._from_file()) if c is not None]
        if not copies:
            return Ledger()
        self.sequence, ledger = max(copies, key=lambda c: c[0])
        return ledger

    async def _from_store(self) -> tuple[int, Ledger] | None:
        try:
            cm = await self.store.get("ConfigMap", self.name, namespace=self.namespace)
        except NotFound:
            return None
        text = (cm.get("data") or {}).get(LEDGER_FILE)
        return _parse(text, "configmap") if isinstance(text, str) else None

    def _from_file(self) -> tuple[int, Ledger] | None:
        if self.path is None:
            return None
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.error("budget ledger file unreadable", extra={"error": type(exc).__name__})
            return None
        return _parse(text, "file")

    async def save(self, ledger: Ledger) -> None:
        """Persist ``ledger`` in both places; raises when the ConfigMap write fails."""
        doc: dict[str, Any] = {**ledger.to_wire(), SEQUENCE_KEY: self.sequence + 1}
        text = json.dumps(doc, sort_keys=True)
        labels = {"app.kubernetes.io/managed-by": "grid-operator"}
        await self.guard.write(
            WriteSite.LEDGER,
            lambda: upsert_configmap(
                self.store, self.name, self.namespace, labels, {LEDGER_FILE: text}
            ),
        )
        if self.path is not None:
            atomic_write(self.path, text.encode())
        self.sequence += 1
