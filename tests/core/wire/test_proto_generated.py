"""The committed SWIM Protobuf code matches what protoc generates from proto/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "src" / "grid" / "proto_gen" / "grid" / "swim" / "v1"
PROTOS = sorted((ROOT / "proto" / "grid" / "swim" / "v1").glob("*.proto"))


def test_regenerating_gives_byte_identical_files(tmp_path: Path) -> None:
    env = dict(os.environ)
    # protoc finds the protoc-gen-mypy plugin on PATH, next to this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            *[str(p.relative_to(ROOT / "proto")) for p in PROTOS],
        ],
        cwd=ROOT / "proto",
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    fresh = tmp_path / "grid" / "swim" / "v1"
    names = sorted(p.name for p in fresh.iterdir())
    assert names == ["state_pb2.py", "state_pb2.pyi", "swim_pb2.py", "swim_pb2.pyi"]
    for name in names:
        assert (fresh / name).read_bytes() == (GENERATED / name).read_bytes(), name


def test_generated_modules_import_and_pass_the_runtime_version_check() -> None:
    from grid.proto_gen.grid.swim.v1 import state_pb2, swim_pb2

    assert swim_pb2.Datagram.DESCRIPTOR.full_name == "grid.swim.v1.Datagram"
    assert state_pb2.StateLane.DESCRIPTOR.full_name == "grid.swim.v1.StateLane"
