"""The committed protobuf modules match what the .proto sources generate."""

from __future__ import annotations

from pathlib import Path

from gpudra.agent.kubeletplugin import codegen


def test_committed_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    generated = {p.name: p.read_text() for p in codegen.generate(tmp_path)}
    committed = {p.name: p.read_text() for p in codegen.PB_DIR.glob("*.py")}
    stale = sorted(
        name for name in generated.keys() | committed.keys() if generated.get(name) != committed.get(name)
    )
    assert not stale, (
        f"generated protobuf modules are out of date: {stale}; run `{codegen.COMMAND}` and commit"
    )


def test_generated_modules_import_as_part_of_the_package() -> None:
    from gpudra.agent.kubeletplugin.pb import dra_v1_pb2_grpc

    text = (codegen.PB_DIR / "dra_v1_pb2_grpc.py").read_text()
    assert "from . import dra_v1_pb2" in text
    assert dra_v1_pb2_grpc.DRAPluginStub is not None
