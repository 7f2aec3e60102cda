"""Deterministic bytes for lane values: what a BroadcastItem's ``payload`` holds.

Each lane value maps to one message of ``proto/grid/swim/v1/state.proto``.
Encoding writes every repeated field in sorted order and serializes
deterministically, so equal values give byte-identical payloads on every site.

Decoding treats its input as untrusted. It has exactly two outcomes: a lane
value, or a `PayloadError` (a `ProtocolError`) with a stable ``code``. Input
size and every count are bounded before anything is built, and a payload for
origin X may only carry writes by X: a register written by, a tag issued by or
a counter slot of any other site is refused, so no peer can overwrite another
origin's data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, assert_never, get_args

from google.protobuf.message import DecodeError, Message

from grid.core.crdt.gcounter import CounterRefusal, GCounter
from grid.core.crdt.lww import LwwRegister
from grid.core.crdt.orset import ORSet, Tag
from grid.core.crdt.record import (
    PROVIDER_PHASES,
    ModelInfo,
    ProviderRecord,
    RecordSignals,
)
from grid.core.crdt.snapshot import (
    CertLaneValue,
    GatewayLaneValue,
    GridStateSnapshot,
    LaneValue,
    MetadataLaneValue,
    ProviderRegister,
    StateLaneValue,
    sorted_pairs,
)
from grid.core.swim.messages import Lane
from grid.core.vocabulary import (
    CAPACITY_WEIGHT_MAX,
    CAPACITY_WEIGHT_MIN,
    PROVIDER_KINDS,
    BackendKind,
)
from grid.errors import ProtocolError, ValidationError
from grid.proto_gen.grid.swim.v1 import state_pb2 as pb

SignalName = Literal[
    "queue_depth",
    "kv_cache_utilization",
    "prefix_cache_hit_ratio",
    "p99_latency_ms",
    "cost_per_million_input_tokens",
    "requests",
]

SIGNAL_FIELDS: tuple[SignalName, ...] = get_args(SignalName)


class PayloadError(ProtocolError):
    """A lane payload could not be decoded or broke a rule; ``code`` says which."""

    code = "payload_malformed"


@dataclass(frozen=True, slots=True)
class PayloadLimits:
    """Bounds on decoded lane payloads; each caps memory spent on untrusted input."""

    payload_bytes_max: int = 1024 * 1024
    """Largest payload accepted, in bytes. Datagram items are far smaller (1,400-byte
    datagrams); push-pull items may carry a whole state lane, hence 1 MiB."""

    providers_max: int = 4096
    """Provider registers per state lane (tombstones included). A lane carries a
    site's whole inventory, which may exceed what one overlay renders (its
    1,024-candidate cap applies after filtering and scoring); 4,096 leaves room
    for a 2,000-provider site plus churn. It stays in step with the byte bound:
    a typical register encodes to ~130-250 bytes, so 4,096 of them fit the
    1 MiB `payload_bytes_max` that bounds decoding first."""

    set_elements_max: int = 4096
    """Elements per capability OR-Set."""

    tags_max: int = 16384
    """Tags (live plus tombstoned) per OR-Set; bounds growth from removals."""

    tenants_max: int = 4096
    """Tenants with a spend counter per state lane."""

    pairs_max: int = 256
    """Labels in the metadata lane, and gateways in the gateway lane."""

    models_max: int = 256
    """Models per provider record."""

    match_labels_max: int = 64
    """Access-policy match labels per provider record. A selector is a handful of
    labels; a bound keeps one record from costing a lane's worth of memory."""

    capabilities_max: int = 64
    """Capability tags per model of a provider record; a model declares a few."""


DEFAULT_LIMITS = PayloadLimits()


def _fail(code: str, message: str) -> PayloadError:
    return PayloadError(message, code=code)


def _check_count(what: str, count: int, limit: int) -> None:
    if count > limit:
        raise _fail("payload_limit", f"{what}: {count} exceeds the limit of {limit}")


def _check_writer(origin: str, writer: str, what: str) -> None:
    if writer != origin:
        raise _fail("foreign_writer", f"{what} written by another site than the origin")


# -- encoding -----------------------------------------------------------------------


_BACKEND_KIND_PREFIX = "BACKEND_KIND_"


def _backend_kind_pb(kind: BackendKind) -> pb.BackendKind.ValueType:
    """The proto enum value of the same name (``LOCAL`` -> ``BACKEND_KIND_LOCAL``)."""
    return pb.BackendKind.Value(_BACKEND_KIND_PREFIX + kind.name)


def _backend_kind(value: pb.BackendKind.ValueType) -> BackendKind | None:
    """The `BackendKind` of the same name as proto value ``value``; ``None`` when unknown.

    Unknown covers ``BACKEND_KIND_UNSPECIFIED`` and numbers this build has no name for.
    """
    try:
        name = pb.BackendKind.Name(value)
    except ValueError:
        return None
    return BackendKind.__members__.get(name.removeprefix(_BACKEND_KIND_PREFIX))


def _record_pb(record: ProviderRecord) -> pb.ProviderRecord:
    msg = pb.ProviderRecord(
        name=record.name,
        cluster=record.cluster,
        site=record.site,
        backend_kind=_backend_kind_pb(record.backend_kind),
        models=list(record.models),
        observed_at=record.observed_at,
        phase=PROVIDER_PHASES.index(record.phase) + 1,  # type: ignore[arg-type]
        provider_kind=PROVIDER_KINDS.index(record.provider_kind) + 1,  # type: ignore[arg-type]
        access_match_labels=_pairs_pb(record.access_match_labels),
    )
    for info in record.model_info:
        entry = msg.model_info.add(name=info.name, capabilities=list(info.capabilities))
        if info.context_window is not None:
            entry.context_window = info.context_window
    if record.healthy is not None:
        msg.healthy = record.healthy
    if record.cost_per_million_output_tokens is not None:
        msg.cost_per_million_output_tokens = record.cost_per_million_output_tokens
    if record.cost_per_million_input_tokens is not None:
        msg.cost_per_million_input_tokens = record.cost_per_million_input_tokens
    if record.capacity_weight != CAPACITY_WEIGHT_MIN:
        # The default travels as absence, so a record without a weight encodes
        # to the same bytes as before the field existed.
        msg.capacity_weight = record.capacity_weight
    msg.signals.SetInParent()
    for name in SIGNAL_FIELDS:
        value = getattr(record.signals, name)
        if value is not None:
            setattr(msg.signals, name, float(value))
    return msg


def _tags_pb(tags: Iterable[Tag]) -> list[pb.Tag]:
    return [pb.Tag(replica=r, counter=c) for r, c in sorted(tags)]


def _orset_pb(value: ORSet[str]) -> pb.OrSet:
    entries = [
        pb.OrSetEntry(element=element, tags=_tags_pb(tags))
        for element, tags in sorted(value.entries.items())
    ]
    return pb.OrSet(entries=entries, tombstones=_tags_pb(value.tombstones))


def _pairs_pb(pairs: Iterable[tuple[str, str]]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in sorted(pairs)]


def _state_pb(value: StateLaneValue) -> pb.StateLane:
    providers = []
    for pid, register in sorted(value.providers.items()):
        reg = pb.ProviderRegister(
            provider_id=pid, revision=register.revision, writer_id=register.writer_id
        )
        if register.value is not None:
            reg.record.CopyFrom(_record_pb(register.value))
        providers.append(reg)
    spend = [
        pb.TenantSpend(
            tenant=tenant,
            slots=[pb.CounterSlot(site=s, count=c) for s, c in sorted(counter.slots.items())],
        )
        for tenant, counter in sorted(value.spend.items())
    ]
    return pb.StateLane(
        providers=providers,
        models=_orset_pb(value.models),
        tools=_orset_pb(value.tools),
        agents=_orset_pb(value.agents),
        spend=spend,
    )


def _gateway_pb(value: GatewayLaneValue) -> pb.GatewayLane:
    return pb.GatewayLane(egress_address=value.egress_address, gateways=_pairs_pb(value.gateways))


def _metadata_pb(value: MetadataLaneValue) -> pb.MetadataLane:
    return pb.MetadataLane(
        region=value.region,
        zone=value.zone,
        sovereignty_zone=value.sovereignty_zone,
        labels=_pairs_pb(value.labels),
        signal_transport=value.signal_transport,
    )


def lane_message(value: LaneValue) -> Message:
    """The state.proto message for a lane value."""
    match value:
        case StateLaneValue():
            return _state_pb(value)
        case GatewayLaneValue():
            return _gateway_pb(value)
        case CertLaneValue(pem=pem):
            return pb.CertLane(pem=pem)
        case MetadataLaneValue():
            return _metadata_pb(value)
        case _:
            assert_never(value)


def encode_lane(value: LaneValue) -> bytes:
    """Deterministic payload bytes for one lane value."""
    return lane_message(value).SerializeToString(deterministic=True)


# -- decoding -----------------------------------------------------------------------


def parse_message(msg: Message, payload: bytes, limit: int) -> None:
    """Parse ``payload`` into ``msg``, bounded by ``limit`` bytes, or raise PayloadError."""
    if len(payload) > limit:
        raise _fail("payload_too_large", f"payload of {len(payload)} bytes exceeds {limit}")
    try:
        msg.ParseFromString(payload)
    except (DecodeError, ValueError) as exc:
        raise _fail("payload_malformed", "lane payload is not a valid message") from exc


def _record(msg: pb.ProviderRecord, limits: PayloadLimits) -> ProviderRecord:
    _check_count("models", len(msg.models), limits.models_max)
    _check_count("match labels", len(msg.access_match_labels), limits.match_labels_max)
    kind, phase = _backend_kind(msg.backend_kind), int(msg.phase)
    if kind is None or not 1 <= phase <= len(PROVIDER_PHASES):
        raise _fail("payload_invalid", "provider record has an unknown backend kind or phase")
    # Zero is a record from a peer that predates providerKind: the record default.
    provider_kind = int(msg.provider_kind) or PROVIDER_KINDS.index("self_hosted") + 1
    if not 1 <= provider_kind <= len(PROVIDER_KINDS):
        raise _fail("payload_invalid", "provider record has an unknown provider kind")
    sig = msg.signals
    signals = RecordSignals(
        **{name: getattr(sig, name) if sig.HasField(name) else None for name in SIGNAL_FIELDS}
    )
    return ProviderRecord(
        name=msg.name,
        cluster=msg.cluster,
        site=msg.site,
        backend_kind=kind,
        models=tuple(msg.models),
        healthy=msg.healthy if msg.HasField("healthy") else None,
        observed_at=msg.observed_at,
        signals=signals,
        phase=PROVIDER_PHASES[phase - 1],
        provider_kind=PROVIDER_KINDS[provider_kind - 1],
        access_match_labels=tuple((kv.key, kv.value) for kv in msg.access_match_labels),
        model_info=_model_info(msg, limits),
        cost_per_million_output_tokens=(
            msg.cost_per_million_output_tokens
            if msg.HasField("cost_per_million_output_tokens")
            else None
        ),
        cost_per_million_input_tokens=(
            msg.cost_per_million_input_tokens
            if msg.HasField("cost_per_million_input_tokens")
            else None
        ),
        capacity_weight=_capacity_weight(msg),
    )


def _capacity_weight(msg: pb.ProviderRecord) -> int:
    """The record's capacity weight: absent is 1, out of 1..1000 is refused."""
    if not msg.HasField("capacity_weight"):
        return CAPACITY_WEIGHT_MIN
    weight = int(msg.capacity_weight)
    if not CAPACITY_WEIGHT_MIN <= weight <= CAPACITY_WEIGHT_MAX:
        raise _fail("payload_invalid", "provider record has a capacity weight outside 1..1000")
    return weight


def _model_info(msg: pb.ProviderRecord, limits: PayloadLimits) -> tuple[ModelInfo, ...]:
    _check_count("model infos", len(msg.model_info), limits.models_max)
    infos = []
    for entry in msg.model_info:
        _check_count("capabilities", len(entry.capabilities), limits.capabilities_max)
        window = entry.context_window if entry.HasField("context_window") else None
        infos.append(ModelInfo(entry.name, tuple(entry.capabilities), window))
    return tuple(infos)


def _tags(tags: Iterable[pb.Tag], origin: str) -> list[Tag]:
    result = []
    for tag in tags:
        _check_writer(origin, tag.replica, "an OR-Set tag")
        result.append((tag.replica, tag.counter))
    return result


def _orset(msg: pb.OrSet, origin: str, limits: PayloadLimits) -> ORSet[str]:
    _check_count("set elements", len(msg.entries), limits.set_elements_max)
    total = len(msg.tombstones) + sum(len(e.tags) for e in msg.entries)
    _check_count("set tags", total, limits.tags_max)
    entries: dict[str, list[Tag]] = {}
    for entry in msg.entries:
        entries.setdefault(entry.element, []).extend(_tags(entry.tags, origin))
    return ORSet.build(entries, _tags(msg.tombstones, origin))


def _providers(
    msg: pb.StateLane, origin: str, limits: PayloadLimits
) -> dict[str, ProviderRegister]:
    _check_count("providers", len(msg.providers), limits.providers_max)
    providers: dict[str, ProviderRegister] = {}
    for reg in msg.providers:
        _check_writer(origin, reg.writer_id, "a provider register")
        if not reg.provider_id:
            raise _fail("payload_invalid", "a provider register has no provider ID")
        record = _record(reg.record, limits) if reg.HasField("record") else None
        register = LwwRegister(record, reg.revision, reg.writer_id)
        known = providers.get(reg.provider_id)
        providers[reg.provider_id] = register if known is None else known.merge(register)
    return providers


def _spend(msg: pb.StateLane, origin: str, limits: PayloadLimits) -> dict[str, GCounter]:
    _check_count("tenants", len(msg.spend), limits.tenants_max)
    spend: dict[str, GCounter] = {}
    for tenant in msg.spend:
        slots: dict[str, int] = {}
        for slot in tenant.slots:
            _check_writer(origin, slot.site, "a counter slot")
            slots[slot.site] = max(slots.get(slot.site, 0), slot.count)
        counter = GCounter.build(slots)
        known = spend.get(tenant.tenant)
        spend[tenant.tenant] = counter if known is None else known.merge(counter)
    return spend


def _pairs(
    what: str, pairs: Iterable[pb.KeyValue], limits: PayloadLimits
) -> tuple[tuple[str, str], ...]:
    items = [(kv.key, kv.value) for kv in pairs]
    _check_count(what, len(items), limits.pairs_max)
    return sorted_pairs(items)


def state_from_message(
    msg: pb.StateLane, origin: str, limits: PayloadLimits = DEFAULT_LIMITS
) -> StateLaneValue:
    """Build a validated state-lane value from its parsed message."""
    try:
        return StateLaneValue(
            providers=_providers(msg, origin, limits),
            models=_orset(msg.models, origin, limits),
            tools=_orset(msg.tools, origin, limits),
            agents=_orset(msg.agents, origin, limits),
            spend=_spend(msg, origin, limits),
        )
    except (ValidationError, CounterRefusal, ValueError) as exc:
        raise _fail("payload_invalid", "state lane holds an invalid value") from exc


def lane_from_message(
    lane: Lane, msg: Message, origin: str, limits: PayloadLimits = DEFAULT_LIMITS
) -> LaneValue:
    """Build a validated lane value from its parsed state.proto message."""
    if isinstance(msg, pb.StateLane):
        return state_from_message(msg, origin, limits)
    if isinstance(msg, pb.GatewayLane):
        return GatewayLaneValue(
            egress_address=msg.egress_address, gateways=_pairs("gateways", msg.gateways, limits)
        )
    if isinstance(msg, pb.CertLane):
        return CertLaneValue(pem=msg.pem)  # raises PrivateKeyRefused on a key marker
    if isinstance(msg, pb.MetadataLane):
        return MetadataLaneValue(
            region=msg.region,
            zone=msg.zone,
            sovereignty_zone=msg.sovereignty_zone,
            labels=_pairs("labels", msg.labels, limits),
            # Only a mode this version knows; anything else reads as unknown.
            signal_transport=(
                msg.signal_transport if msg.signal_transport in SIGNAL_TRANSPORTS else ""
            ),
        )
    raise _fail("payload_invalid", f"no lane message for lane {lane.value}")


SIGNAL_TRANSPORTS = ("gossip", "poll")
"""The metadata lane's known ``signal_transport`` values."""

LANE_MESSAGES: Mapping[Lane, type[Message]] = {
    Lane.STATE: pb.StateLane,
    Lane.GATEWAY: pb.GatewayLane,
    Lane.CERT: pb.CertLane,
    Lane.METADATA: pb.MetadataLane,
}


def decode_lane(
    lane: Lane | str, payload: bytes, origin: str, limits: PayloadLimits = DEFAULT_LIMITS
) -> LaneValue:
    """Decode an untrusted payload of ``lane`` from ``origin``.

    Raises only `PayloadError` or `PrivateKeyRefused` (both `ProtocolError`).
    """
    try:
        lane = Lane(lane)
    except ValueError as exc:
        raise _fail("unknown_lane", "unknown lane") from exc
    msg = LANE_MESSAGES[lane]()
    parse_message(msg, payload, limits.payload_bytes_max)
    return lane_from_message(lane, msg, origin, limits)


# -- whole snapshots ----------------------------------------------------------------


def encode_snapshot(snapshot: GridStateSnapshot) -> bytes:
    """Deterministic bytes for a whole per-origin snapshot (all four lanes)."""
    msg = pb.GridStateSnapshot(
        origin=snapshot.origin,
        state_revision=snapshot.revision(Lane.STATE),
        gateway_revision=snapshot.revision(Lane.GATEWAY),
        cert_revision=snapshot.revision(Lane.CERT),
        metadata_revision=snapshot.revision(Lane.METADATA),
        state=_state_pb(snapshot.state),
        gateway=_gateway_pb(snapshot.gateway),
        cert=pb.CertLane(pem=snapshot.cert.pem),
        metadata=_metadata_pb(snapshot.metadata),
    )
    return msg.SerializeToString(deterministic=True)


def decode_snapshot(data: bytes, limits: PayloadLimits = DEFAULT_LIMITS) -> GridStateSnapshot:
    """Decode untrusted snapshot bytes; raises only `ProtocolError` subclasses."""
    msg = pb.GridStateSnapshot()
    parse_message(msg, data, limits.payload_bytes_max)
    if not msg.origin:
        raise _fail("payload_invalid", "snapshot has no origin")
    snapshot = GridStateSnapshot.empty(msg.origin)
    parts: tuple[tuple[Lane, int, Message], ...] = (
        (Lane.STATE, msg.state_revision, msg.state),
        (Lane.GATEWAY, msg.gateway_revision, msg.gateway),
        (Lane.CERT, msg.cert_revision, msg.cert),
        (Lane.METADATA, msg.metadata_revision, msg.metadata),
    )
    for lane, revision, part in parts:
        value = lane_from_message(lane, part, msg.origin, limits)
        snapshot = snapshot.with_lane(lane, revision, value)
    return snapshot
