"""The committed telemetry Protobuf code is exactly what the .proto generates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO = "grid/telemetry/v1/telemetry.proto"
GENERATED = ("telemetry_pb2.py", "telemetry_pb2.pyi")


def test_regenerating_the_telemetry_proto_is_byte_identical(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            str(ROOT / "proto" / PROTO),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    committed = ROOT / "src/grid/proto_gen/grid/telemetry/v1"
    for name in GENERATED:
        fresh = (tmp_path / "grid/telemetry/v1" / name).read_bytes()
        assert fresh == (committed / name).read_bytes(), f"{name} is stale: run `make proto`"


def test_the_generated_messages_carry_the_spec_names() -> None:
    from grid.proto_gen.grid.telemetry.v1 import telemetry_pb2 as pb

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
