"""Open the configured backbone and roster: embedded SQLite or NATS JetStream.

``sqlite`` keeps both in the data dir. ``nats://HOST:PORT`` uses the JetStream
adapter (`grid.adapters.backbone.jetstream`), imported only when asked for, so
the embedded default never loads the NATS client.
"""

from __future__ import annotations

from pathlib import Path

from grid.adapters.backbone import Backbone, RosterLog
from grid.adapters.backbone.roster_sqlite import SqliteRosterLog
from grid.adapters.backbone.sqlite import SqliteBackbone
from grid.errors import ValidationError


def check_backbone_spec(spec: str) -> str:
    """Return ``spec`` when it is ``sqlite`` or a ``nats://`` URL, else raise."""
    if spec == "sqlite" or spec.startswith("nats://"):
        return spec
    raise ValidationError(f"backbone must be 'sqlite' or nats://HOST:PORT, not {spec!r}")


async def open_backbone(spec: str, data_dir: Path) -> Backbone:
    """The durable backbone named by ``spec``."""
    if check_backbone_spec(spec) == "sqlite":
        return await SqliteBackbone.open(data_dir)
    from grid.adapters.backbone import jetstream  # only when asked for: it loads nats

    backbone: Backbone = await jetstream.JetStreamBackbone.connect(spec)
    return backbone


async def open_roster(spec: str, data_dir: Path) -> RosterLog:
    """The roster log that lives with the backbone named by ``spec``."""
    if check_backbone_spec(spec) == "sqlite":
        return await SqliteRosterLog.open(data_dir)
    from grid.adapters.backbone import jetstream  # only when asked for: it loads nats

    roster: RosterLog = await jetstream.JetStreamRoster.connect(spec)
    return roster
