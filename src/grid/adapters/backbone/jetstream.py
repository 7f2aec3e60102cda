"""The distributed backbone: NATS JetStream with file storage, behind the `Backbone` port.

A batch is stored as ONE JetStream message on ``grid.telemetry.{route}`` whose
payload is the stamped batch (the ``EventBatch`` or ``InventoryBatch`` the
gateway encoded once), so a batch is durable whole or not at all.
`JetStreamBackbone.publish` sends the message with ``Nats-Msg-Id`` set to the
batch ID (the stream's de-duplication window turns a re-publish of the same
batch into a no-op) and returns a `Receipt` only after the stream's PubAck has
arrived. Any NATS error, timeout or missing responder becomes
`BackboneUnavailable`, so the gateway never acknowledges what it cannot prove.

A batch larger than the server's ``max_payload`` (1 MiB by default, while a
request may carry 8 MiB) is split into numbered parts, each its own message with
``Nats-Msg-Id`` ``{batch_id}/{part}``. Readers only yield a batch once every part
is present, so a gateway killed between parts leaves an incomplete batch that
nobody sees and nobody was told about.

The roster lives in a JetStream KV bucket. Every append is a ``put`` of a fresh
key ``log.{uuid}``; the KV stream's sequence number is the entry's revision. The
backing stream keeps every key, so replaying it from sequence 1 returns the full
ordered log, and an ordered consumer started after the last revision tails it
with push delivery (well under the 1 s reaction the spec asks for).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any, get_args

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from grid.adapters.backbone import (
    BackboneUnavailable,
    PublishBatch,
    Receipt,
    RosterEntry,
    RosterState,
    Route,
    StoredRecord,
    stored_records,
)
from grid.errors import ProtocolError

STREAM_NAME = "GRID_TELEMETRY"
"""The JetStream stream holding published batches."""

SUBJECT_PREFIX = "grid.telemetry"
"""Batches of route ``r`` go to subject ``grid.telemetry.r``."""

ROSTER_BUCKET = "GRID_ROSTER"
"""The KV bucket holding the roster log."""

CONNECT_TIMEOUT_S = 2.0
"""How long `connect` waits for the server; longer tolerates slow starts, shorter fails fast."""

PUBLISH_TIMEOUT_S = 2.0
"""How long publish waits for the PubAck before reporting `BackboneUnavailable`.

Keep it below the gateway's publish budget so the gateway can still answer 503 in time.
"""

RECONNECT_WAIT_S = 0.25
"""Pause between reconnect attempts after the server went away; short so recovery is quick."""

DUPLICATE_WINDOW_S = 120.0
"""The stream's de-duplication window for ``Nats-Msg-Id`` (JetStream's default, 2 min)."""

PART_HEADROOM_BYTES = 4096
"""Bytes of ``max_payload`` kept free for headers when a batch is split into parts."""

PARTS_MAX = 1024
"""Most parts one batch may be split into; readers refuse more. At NATS's default 1 MiB
``max_payload`` an 8 MiB request needs 9."""

READ_IDLE_TIMEOUT_S = 5.0
"""How long a reader waits for the next stored message before calling the server unavailable."""

_PART_HEADER = "Grid-Batch-Part"
_ROUTES: tuple[Route, ...] = get_args(Route)
_STATES: tuple[RosterState, ...] = get_args(RosterState)
_NATS_ERRORS = (nats.errors.Error, asyncio.TimeoutError, OSError)


def _redacted(url: str) -> str:
    """``url`` without user info, so credentials never reach messages or logs."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


async def _connect(url: str, connect_timeout_s: float, name: str) -> Client:
    """Connect to ``url`` with reconnects forever, or raise `BackboneUnavailable`.

    nats-py retries the first connection forever too when reconnects are unlimited,
    so the first connection is bounded here by ``connect_timeout_s``.
    """

    async def _quiet(exc: Exception) -> None:
        # Disconnects are reported through publish outcomes; the default handler
        # would log a traceback for every failed reconnect attempt.
        del exc

    nc = Client()
    try:
        await asyncio.wait_for(
            nc.connect(
                url,
                name=name,
                connect_timeout=connect_timeout_s,  # type: ignore[arg-type]
                reconnect_time_wait=RECONNECT_WAIT_S,  # type: ignore[arg-type]
                max_reconnect_attempts=-1,
                allow_reconnect=True,
                error_cb=_quiet,
            ),
            timeout=connect_timeout_s,
        )
    except (*_NATS_ERRORS, ValueError) as exc:
        await nc.close()
        raise BackboneUnavailable(f"cannot reach NATS at {_redacted(url)}") from exc
    return nc


class JetStreamBackbone:
    """A `Backbone` on a JetStream stream with file storage."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        *,
        stream: str,
        subject_prefix: str,
        publish_timeout_s: float,
    ) -> None:
        self._nc = nc
        self._js = js
        self._stream = stream
        self._prefix = subject_prefix
        self._publish_timeout_s = publish_timeout_s

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        stream: str = STREAM_NAME,
        subject_prefix: str = SUBJECT_PREFIX,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        publish_timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> JetStreamBackbone:
        """Connect to ``url`` (``nats://HOST:PORT``) and ensure the stream exists.

        ``stream`` and ``subject_prefix`` exist so several independent backbones can
        share one server (tests do); streams must not overlap in subjects.
        """
        nc = await _connect(url, connect_timeout_s, "grid-telemetry-backbone")
        js = nc.jetstream(timeout=publish_timeout_s)
        config = api.StreamConfig(
            name=stream,
            subjects=[f"{subject_prefix}.{route}" for route in _ROUTES],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
        )
        try:
            await _ensure_stream(js, config)
        except BackboneUnavailable:
            await nc.close()
            raise
        except _NATS_ERRORS as exc:
            await nc.close()
            raise BackboneUnavailable(f"cannot set up stream {stream}") from exc
        return cls(
            nc,
            js,
            stream=stream,
            subject_prefix=subject_prefix,
            publish_timeout_s=publish_timeout_s,
        )

    async def publish(self, batch: PublishBatch) -> Receipt:
        """Store ``batch`` as one message (or numbered parts) and await every PubAck."""
        if not self._nc.is_connected:
            raise BackboneUnavailable("NATS connection is down")
        subject = f"{self._prefix}.{batch.route}"
        frame = batch.stamped
        part_bytes = max(1, self._nc.max_payload - PART_HEADROOM_BYTES)
        chunks = [frame[i : i + part_bytes] for i in range(0, len(frame), part_bytes)]
        if len(chunks) > PARTS_MAX:
            raise BackboneUnavailable(f"batch needs more than {PARTS_MAX} messages")
        duplicate = True
        try:
            for index, chunk in enumerate(chunks):
                headers = {"Nats-Msg-Id": batch.batch_id}
                if len(chunks) > 1:
                    headers["Nats-Msg-Id"] = f"{batch.batch_id}/{index}"
                    headers[_PART_HEADER] = f"{index}/{len(chunks)}"
                ack = await self._js.publish(
                    subject,
                    chunk,
                    timeout=self._publish_timeout_s,
                    stream=self._stream,
                    headers=headers,
                )
                duplicate = duplicate and bool(ack.duplicate)
        except _NATS_ERRORS as exc:
            raise BackboneUnavailable("JetStream gave no publish acknowledgement") from exc
        return Receipt(batch.batch_id, len(batch.records), duplicate=duplicate)

    async def batches(self) -> AsyncIterator[tuple[str, Route, bytes]]:
        """Every complete batch as ``(batch_id, route, stamped bytes)``, in stream order,
        up to the end of the stream at call time."""
        partial: dict[str, dict[int, bytes]] = {}
        async for msg in _read_stream(self._js, self._stream, f"{self._prefix}.>", 1):
            route = msg.subject.rsplit(".", 1)[-1]
            headers = msg.headers or {}
            batch_id = headers.get("Nats-Msg-Id", "")
            if route not in _ROUTES or not batch_id:
                continue
            frame = _assemble(partial, batch_id, headers.get(_PART_HEADER), msg.data)
            if frame is None:
                continue
            batch_id = batch_id.rsplit("/", 1)[0] if _PART_HEADER in headers else batch_id
            yield batch_id, route, frame

    async def records(self) -> AsyncIterator[tuple[str, Route, StoredRecord]]:
        """Every complete batch's records, in stream order, up to the end at call time."""
        async for batch_id, route, stamped in self.batches():
            for record in stored_records(route, stamped):
                yield batch_id, route, record

    async def close(self) -> None:
        """Close the NATS connection."""
        await self._nc.close()


async def _ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create the stream, or add our subjects to an existing one.

    An existing stream keeps the rest of its configuration, so limits an operator set
    (``max_age``, ``max_bytes``, replicas) survive gateway restarts. Storage cannot be
    changed later, and only file storage keeps the ACK promise, so anything else is refused.
    """
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(config)
        return
    current = info.config
    if current.storage != api.StorageType.FILE:
        raise BackboneUnavailable(
            f"stream {config.name} uses {current.storage} storage; file storage is required"
        )
    subjects = list(current.subjects or [])
    missing = [s for s in config.subjects or [] if s not in subjects]
    if missing:
        await js.update_stream(current.evolve(subjects=subjects + missing))


def _assemble(
    partial: dict[str, dict[int, bytes]], msg_id: str, part: str | None, data: bytes
) -> bytes | None:
    """The whole frame once every part of a batch has been seen, else None.

    A part header that is not ``i/n`` with ``0 <= i < n <= PARTS_MAX`` is a `ProtocolError`.
    """
    if part is None:
        return data
    index_s, _, total_s = part.partition("/")
    try:
        index, total = int(index_s), int(total_s)
    except ValueError as exc:
        raise ProtocolError(f"bad {_PART_HEADER} header", code="bad_frame") from exc
    if not 0 <= index < total <= PARTS_MAX:
        raise ProtocolError(f"bad {_PART_HEADER} header", code="bad_frame")
    batch_id = msg_id.rsplit("/", 1)[0]
    parts = partial.setdefault(batch_id, {})
    parts[index] = data
    if len(parts) < total:
        return None
    del partial[batch_id]
    return b"".join(parts[i] for i in range(total))


async def _read_stream(
    js: JetStreamContext, stream: str, subject: str, start_seq: int
) -> AsyncIterator[Msg]:
    """Messages of ``stream`` from ``start_seq`` to its last sequence at call time."""
    try:
        info = await js.stream_info(stream)
        last = info.state.last_seq
        if last < start_seq or info.state.messages == 0:
            return
        sub = await _ordered(js, subject, stream, start_seq)
    except _NATS_ERRORS as exc:
        raise BackboneUnavailable(f"cannot read stream {stream}") from exc
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=READ_IDLE_TIMEOUT_S)
            except _NATS_ERRORS as exc:
                raise BackboneUnavailable(f"stream {stream} stopped delivering") from exc
            yield msg
            if msg.metadata.sequence.stream >= last:
                return
    finally:
        await _unsubscribe(sub)


async def _ordered(
    js: JetStreamContext, subject: str, stream: str, start_seq: int
) -> JetStreamContext.PushSubscription:
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, start_seq)
    )
    return await js.subscribe(
        subject, stream=stream, ordered_consumer=True, config=config, idle_heartbeat=1.0
    )


async def _unsubscribe(sub: JetStreamContext.PushSubscription) -> None:
    # The connection may already be gone; the server drops ephemeral consumers itself.
    with contextlib.suppress(*_NATS_ERRORS):
        await sub.unsubscribe()


def _entry(msg: Msg) -> RosterEntry | None:
    """A roster entry from a KV message, or None for anything that is not one."""
    try:
        doc: Any = json.loads(msg.data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("state") not in _STATES:
        return None
    agent, tenant = doc.get("agent_id"), doc.get("tenant_id")
    if not isinstance(agent, str) or not (tenant is None or isinstance(tenant, str)):
        return None
    return RosterEntry(agent, tenant, doc["state"], msg.metadata.sequence.stream)


class JetStreamRoster:
    """A `RosterLog` in a JetStream KV bucket; revision = the KV stream sequence."""

    def __init__(self, nc: Client, js: JetStreamContext, kv: KeyValue, *, bucket: str) -> None:
        self._nc = nc
        self._js = js
        self._kv = kv
        self._bucket = bucket
        self._stream = f"KV_{bucket}"
        self._subject = f"$KV.{bucket}.log.>"

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        bucket: str = ROSTER_BUCKET,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> JetStreamRoster:
        """Connect to ``url`` and ensure the KV bucket exists (file storage)."""
        nc = await _connect(url, connect_timeout_s, "grid-telemetry-roster")
        js = nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
        try:
            try:
                kv = await js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                kv = await js.create_key_value(
                    bucket=bucket, history=1, storage=api.StorageType.FILE
                )
        except _NATS_ERRORS as exc:
            await nc.close()
            raise BackboneUnavailable(f"cannot set up roster bucket {bucket}") from exc
        return cls(nc, js, kv, bucket=bucket)

    async def append(self, agent_id: str, state: RosterState, tenant_id: str | None) -> RosterEntry:
        """Put a new ``log.{uuid}`` key; its KV revision is the entry's revision."""
        if state not in _STATES:
            raise ValueError(f"unknown roster state {state!r}")
        value = json.dumps({"agent_id": agent_id, "tenant_id": tenant_id, "state": state})
        try:
            revision = await self._kv.put(f"log.{uuid.uuid4().hex}", value.encode())
        except _NATS_ERRORS as exc:
            raise BackboneUnavailable("roster append was not acknowledged") from exc
        return RosterEntry(agent_id, tenant_id, state, revision)

    async def replay(self) -> list[RosterEntry]:
        """Every entry so far, in revision order."""
        entries = []
        async for msg in _read_stream(self._js, self._stream, self._subject, 1):
            entry = _entry(msg)
            if entry is not None:
                entries.append(entry)
        return entries

    async def tail(self, after_revision: int) -> AsyncIterator[RosterEntry]:
        """Entries with revision > ``after_revision`` as they arrive; runs until cancelled."""
        try:
            sub = await _ordered(self._js, self._subject, self._stream, after_revision + 1)
        except _NATS_ERRORS as exc:
            raise BackboneUnavailable("cannot tail the roster") from exc
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=READ_IDLE_TIMEOUT_S)
                except nats.errors.TimeoutError:
                    continue
                except nats.errors.ConnectionClosedError as exc:
                    raise BackboneUnavailable("roster connection closed") from exc
                entry = _entry(msg)
                if entry is not None and entry.revision > after_revision:
                    yield entry
        finally:
            await _unsubscribe(sub)

    async def close(self) -> None:
        """Close the NATS connection."""
        await self._nc.close()
