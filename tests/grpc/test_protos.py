"""The committed protoc output under tidemq/grpc/proto/ is what ``make grpc-protos`` makes of the .proto
files with the pinned grpcio-tools: regenerated here into a temp dir and compared, file by file."""

from __future__ import annotations

from pathlib import Path

import grpc_tools
from grpc_tools import protoc

import tidemq.grpc.proto

PROTO_DIR = Path(tidemq.grpc.proto.__file__).parent
SRC = PROTO_DIR.parents[2]
REPO = SRC.parent
PROTOS = ("definition.proto", "service.proto")
GENERATED = tuple(
    f"{stem}{suffix}"
    for stem in ("definition", "service")
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
)


def test_generated_modules_match_the_protos(tmp_path: Path) -> None:
    include = Path(grpc_tools.__file__).parent / "_proto"  # the well-known types (Timestamp, Duration)
    argv = ["protoc", f"-I{SRC}", f"-I{include}"]
    argv += [f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}"]
    argv += [str(PROTO_DIR / name) for name in PROTOS]
    assert protoc.main(argv) == 0
    out = tmp_path / "tidemq" / "grpc" / "proto"
    for name in GENERATED:
        assert (out / name).read_text() == (PROTO_DIR / name).read_text(), f"{name}: run make grpc-protos"


def test_makefile_regenerates_with_the_same_command() -> None:
    recipe = (REPO / "Makefile").read_text()
    assert "grpc-protos:" in recipe
    for flag in ("-m grpc_tools.protoc -I src", "--python_out=", "--pyi_out=", "--grpc_python_out="):
        assert flag in recipe
    for name in PROTOS:
        assert f"src/tidemq/grpc/proto/{name}" in recipe


def test_package_and_service_are_the_ones_the_sdks_call() -> None:
    from tidemq.grpc.proto import service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    assert service.methods_by_name["Telemetry"].client_streaming
    assert service.methods_by_name["ReceiveMessage"].server_streaming
