"""`grid telemetry send`: the retaining client on the command line.

Each FILE is JSON lines, one record per line (blank lines and lines starting
with ``#`` are skipped)::

    {"route": "events", "record_id": "r-1", "observed_at": "2026-11-30T02:00:00Z",
     "type": "gpu.utilization", "attributes": {"gpu": "0"}, "payload": "87"}

- ``route``: ``events`` (the default) or ``inventory``.
- ``record_id``: optional; when absent it is the SHA-256 of the line, so sending
  the same file again yields the same IDs and consumers can de-duplicate.
- ``observed_at``: required RFC 3339 time with a zone. It is never rewritten.
- ``type``: required; ``attributes``: optional string-to-string map.
- ``payload`` (UTF-8 text) or ``payload_b64`` (base64): optional, events only.

It prints one JSON summary line. Exit 0 when every record was acknowledged, 1
when some were retained (written to ``--retain-to`` in the same format, so they
can be sent again), 2 for unusable input.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from grid.telemetry.client import (
    ClientSettings,
    HttpsTransport,
    OutboundRecord,
    SendReport,
    TelemetryClient,
)


def _parse_line(line: bytes, where: str) -> OutboundRecord:
    try:
        doc: Any = json.loads(line)
    except ValueError as exc:
        raise click.BadParameter(f"{where}: not JSON") from exc
    if not isinstance(doc, dict):
        raise click.BadParameter(f"{where}: a record must be a JSON object")
    route = doc.get("route", "events")
    if route not in ("events", "inventory"):
        raise click.BadParameter(f"{where}: route must be events or inventory")
    try:
        observed = dt.datetime.fromisoformat(str(doc["observed_at"]).replace("Z", "+00:00"))
        kind = doc["type"]
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(f"{where}: observed_at (RFC 3339) and type are required") from exc
    if observed.tzinfo is None:
        raise click.BadParameter(f"{where}: observed_at needs a time zone")
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise click.BadParameter(f"{where}: attributes must map strings to strings")
    try:
        payload = (
            base64.b64decode(doc["payload_b64"], validate=True)
            if "payload_b64" in doc
            else str(doc.get("payload", "")).encode()
        )
    except (binascii.Error, TypeError) as exc:
        raise click.BadParameter(f"{where}: payload_b64 is not base64") from exc
    if route == "inventory" and payload:
        raise click.BadParameter(f"{where}: inventory records carry no payload")
    record_id = doc.get("record_id") or hashlib.sha256(line).hexdigest()[:32]
    return OutboundRecord(route, str(record_id), observed, str(kind), attributes, payload)


def load_records(paths: Iterable[Path]) -> list[OutboundRecord]:
    """Every record of the JSON-lines files, in order."""
    records = []
    for path in paths:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                line = raw.strip()
                if line and not line.startswith(b"#"):
                    records.append(_parse_line(line, f"{path.name}:{number}"))
    return records


def record_line(record: OutboundRecord) -> str:
    """One record in the input format (payload as base64), for ``--retain-to``."""
    doc: dict[str, Any] = {
        "route": record.route,
        "record_id": record.record_id,
        "observed_at": record.observed_at.isoformat(),
        "type": record.type,
        "attributes": dict(record.attributes),
    }
    if record.payload:
        doc["payload_b64"] = base64.b64encode(record.payload).decode()
    return json.dumps(doc)


def summary(report: SendReport) -> dict[str, Any]:
    """The JSON summary printed after sending."""
    return {
        "acknowledged_batches": len(report.acknowledged),
        "acknowledged_records": report.acknowledged_records,
        "retained_records": len(report.retained_records),
        "retained": [
            {"code": b.code, "message": b.message, "records": len(b.records)}
            for b in report.retained
        ],
        "refusals": report.refusals,
        "attempts": report.attempts,
    }


async def _send(
    records: list[OutboundRecord], gateway: str, tls: dict[str, Path], settings: ClientSettings
) -> SendReport:
    transport = HttpsTransport(
        gateway,
        cert=tls["cert"],
        key=tls["key"],
        ca=tls["ca"],
        timeout_s=settings.request_timeout_s,
    )
    try:
        return await TelemetryClient(transport, settings).send(records)
    finally:
        await transport.close()


@click.command("send")
@click.option("--gateway", required=True, help="HOST:PORT of the admission gateway.")
@click.option(
    "--cert",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="PEM agent certificate; its SPIFFE URI SAN (else CN) is the agent ID.",
)
@click.option(
    "--key", required=True, type=click.Path(exists=True, path_type=Path), help="PEM agent key."
)
@click.option(
    "--ca",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="PEM CA that the gateway's certificate chains to.",
)
@click.option(
    "--retain-to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write records that were not acknowledged here (JSON lines, same format).",
)
@click.option(
    "--attempts-max",
    type=click.IntRange(min=1),
    default=ClientSettings.attempts_max,
    show_default=True,
    help="Tries per batch before it is retained and sending stops.",
)
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def send_command(
    gateway: str,
    cert: Path,
    key: Path,
    ca: Path,
    retain_to: Path | None,
    attempts_max: int,
    files: tuple[Path, ...],
) -> None:
    """Send the records in FILE... (JSON lines) and keep whatever is not acknowledged."""
    records = load_records(files)
    settings = ClientSettings(attempts_max=attempts_max)
    tls = {"cert": cert, "key": key, "ca": ca}
    report = asyncio.run(_send(records, gateway, tls, settings))
    if retain_to is not None and report.retained_records:
        retain_to.write_text("".join(record_line(r) + "\n" for r in report.retained_records))
    click.echo(json.dumps(summary(report)))
    sys.exit(1 if report.retained_records else 0)


def register(main: click.Group) -> None:
    """Add ``send`` to the ``telemetry`` group registered by `grid.cli.telemetry_cmd`."""
    group = main.commands.get("telemetry")
    if not isinstance(group, click.Group):
        raise RuntimeError("grid.cli.telemetry_send must be registered after telemetry_cmd")
    group.add_command(send_command)
