"""Regenerates the protobuf / gRPC modules in ``pb/`` from the ``.proto`` sources in ``protos/``.

Run ``python -m gpudra.agent.kubeletplugin.codegen`` after editing a ``.proto`` file or upgrading grpcio-
tools, and commit the result; a test regenerates into a temporary directory and fails when the committed
files differ.

protoc writes ``import dra_v1_pb2 as ...`` into the ``*_pb2_grpc.py`` files, which only works with ``pb/``
on ``sys.path``; the import lines are rewritten to package-relative ones so that the modules import as part
of gpudra. grpcio-tools is a development dependency: it is imported only when generating.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gpudra.errors import ConfigurationError

PROTO_DIR = Path(__file__).parent / "protos"
PB_DIR = Path(__file__).parent / "pb"
COMMAND = "python -m gpudra.agent.kubeletplugin.codegen"

_PB_INIT = '"""Generated protobuf and gRPC modules; do not edit. Regenerate with: {command}"""\n'
_ABSOLUTE_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Generate every module of ``pb/`` into ``out_dir``; return the files written, sorted."""
    import grpc_tools
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise ConfigurationError(f"protoc failed on {PROTO_DIR} (arguments: {' '.join(args[1:])})")
    for grpc_module in out_dir.glob("*_pb2_grpc.py"):
        text = grpc_module.read_text()
        grpc_module.write_text(_ABSOLUTE_IMPORT.sub(r"from . import \1 as \2", text))
    (out_dir / "__init__.py").write_text(_PB_INIT.format(command=COMMAND))
    return sorted(p for p in out_dir.iterdir() if p.is_file() and p.suffix == ".py")


def main() -> int:
    for path in generate(PB_DIR):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
