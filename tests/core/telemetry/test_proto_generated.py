"""The committed telemetry Protobuf code is exactly what the .proto generates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb
from grid.proto_gen.grid.telemetry.view.v1 import columns_pb2 as columns

ROOT = Path(__file__).resolve().parents[3]
PROTOS = {
    "grid/telemetry/v1/telemetry.proto": ("telemetry_pb2.py", "telemetry_pb2.pyi"),
    "grid/telemetry/view/v1/columns.proto": ("columns_pb2.py", "columns_pb2.pyi"),
}


@pytest.mark.parametrize("proto", sorted(PROTOS))
def test_regenerating_the_telemetry_protos_is_byte_identical(tmp_path: Path, proto: str) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            str(ROOT / "proto" / proto),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    package_dir = Path(proto).parent
    committed = ROOT / "src/grid/proto_gen" / package_dir
    for name in PROTOS[proto]:
        fresh = (tmp_path / package_dir / name).read_bytes()
        assert fresh == (committed / name).read_bytes(), f"{name} is stale: run `make proto`"


def test_the_generated_messages_carry_the_spec_names() -> None:
    assert pb.DESCRIPTOR.package == "grid.telemetry.v1"
    assert [f.name for f in pb.EventBatch.DESCRIPTOR.fields] == [
        "protocol_version",
        "schema_version",
        "events",
    ]
    assert [f.name for f in pb.InventoryBatch.DESCRIPTOR.fields][2] == "records"
    assert {f.name for f in pb.Event.DESCRIPTOR.fields} == {
        "record_id",
        "origin",
        "reception",
        "observed_at",
        "type",
        "attributes",
        "payload",
    }
    assert [f.name for f in pb.Ack.DESCRIPTOR.fields] == ["batch_id", "accepted"]
    assert [f.name for f in pb.Refusal.DESCRIPTOR.fields] == [
        "code",
        "message",
        "retry_after_seconds",
    ]


def _wire_kind(field: FieldDescriptor) -> str:
    """How a field is encoded: a varint, or length-delimited bytes."""
    varints = {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
    }
    return "varint" if field.type in varints else "length-delimited"


@pytest.mark.parametrize(
    ("view", "contract"),
    [
        (columns.BatchColumns, pb.EventBatch),
        (columns.BatchFrame, pb.InventoryBatch),
        (columns.RecordColumns, pb.Event),
        (columns.RecordColumns, pb.InventoryRecord),
        (columns.TimestampColumns, Timestamp),
        (columns.AttributeColumns, pb.Event.AttributesEntry),
    ],
)
def test_the_column_views_read_the_contract_fields_by_number_and_wire_type(
    view: type[Message], contract: type[Message]
) -> None:
    contract_fields = {f.number: f for f in contract.DESCRIPTOR.fields}
    for field in view.DESCRIPTOR.fields:
        assert field.number in contract_fields, f"{view.__name__}.{field.name}"
        original = contract_fields[field.number]
        assert field.name == original.name or field.number == 3
        assert _wire_kind(field) == _wire_kind(original), f"{view.__name__}.{field.name}"
