"""Regenerates the protobuf modules in ``pb/`` from the vendored Kubernetes ``.proto`` files in ``protos/``.

Run ``python -m gpudra.cluster.apiserver.kubeproto.codegen`` after refreshing ``protos/`` (see refresh.py) or
upgrading grpcio-tools, and commit the result; a test regenerates into a temporary directory and fails when the
committed files differ.

protoc names a module after its file's import path (``k8s.io/api/core/v1/generated.proto`` ->
``k8s.io/api/core/v1/generated_pb2.py``), which Python cannot import (``k8s.io`` is no package name). Each module
is written flat instead, named after its proto package (``k8s_io_api_core_v1_pb2.py``), and the import lines
between them are rewritten to match. grpcio-tools is a development dependency: it is imported only when generating.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from gpudra.errors import ConfigurationError

PROTO_DIR = Path(__file__).parent / "protos"
PB_DIR = Path(__file__).parent / "pb"
COMMAND = "python -m gpudra.cluster.apiserver.kubeproto.codegen"

_PB_INIT = '"""Generated protobuf modules; do not edit. Regenerate with: {command}"""\n'
_PROTOC_IMPORT = re.compile(r"^from ([\w.]+) import generated_pb2 as (\w+)$", re.MULTILINE)


def module_name(import_path: str) -> str:
    """``k8s.io/api/core/v1/generated.proto`` -> ``k8s_io_api_core_v1_pb2``."""
    directory = import_path.rsplit("/", 1)[0]
    return re.sub(r"[^0-9A-Za-z]", "_", directory) + "_pb2"


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Generate every module of ``pb/`` into ``out_dir``; return the files written, sorted."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    protos = proto_files()
    by_dir = {
        path.rsplit("/", 1)[0].replace("/", ".").replace("-", "_"): module_name(path) for path in protos
    }
    with tempfile.TemporaryDirectory() as raw:
        args = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={raw}", *protos]
        if protoc.main(args) != 0:
            raise ConfigurationError(f"protoc failed on {PROTO_DIR} (arguments: {' '.join(args[1:])})")
        for path in protos:
            dotted = path.removesuffix(".proto").replace("-", "_").replace("/", ".")
            text = (Path(raw) / (dotted.replace(".", "/") + "_pb2.py")).read_text()

            def local(match: re.Match[str]) -> str:
                return f"from . import {by_dir[match.group(1)]} as {match.group(2)}"

            (out_dir / f"{module_name(path)}.py").write_text(_PROTOC_IMPORT.sub(local, text))
    (out_dir / "__init__.py").write_text(_PB_INIT.format(command=COMMAND))
    return sorted(p for p in out_dir.iterdir() if p.is_file() and p.suffix == ".py")


def main() -> int:
    for path in generate(PB_DIR):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
