"""Refreshes the vendored Kubernetes wire definitions from the Go module proxy (a developer tool; needs ``go``).

``python -m gpudra.cluster.apiserver.kubeproto.refresh`` downloads the pinned ``k8s.io/api`` and
``k8s.io/apimachinery`` modules (``go mod download -json``), then

- copies, unchanged, the ``generated.proto`` of every package the embedded API server serves and of every package
  they import, to ``protos/<import path>`` (each keeps the Apache-2.0 header it has upstream; the module's
  LICENSE is copied next to them);
- writes ``gofields.json``: for each message, how its Go struct serialises each field to JSON (the JSON name, ``""``
  for a struct inlined into its parent; whether the tag has ``omitempty``/``omitzero``; whether the Go field is a
  pointer). The protobuf encoding alone cannot say these: Go writes every non-pointer field even when it is zero.
  They are read from the struct tags of the Go sources of the same packages.

Then run ``python -m gpudra.cluster.apiserver.kubeproto.codegen`` and commit protos/, gofields.json and pb/.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gpudra.errors import ConfigurationError

HERE = Path(__file__).parent
PROTO_DIR = HERE / "protos"
FIELDS_FILE = HERE / "gofields.json"
MODULES = {"k8s.io/api": "v0.37.2", "k8s.io/apimachinery": "v0.37.2"}
SERVED = [
    f"k8s.io/api/{package}/generated.proto"
    for package in (
        "core/v1",
        "apps/v1",
        "batch/v1",
        "coordination/v1",
        "scheduling/v1",
        "events/v1",
        "resource/v1",
        "resource/v1alpha3",
        "resource/v1beta2",
    )
]
"""The packages of the built-in kinds the embedded API server serves (registry.py), plus meta/v1 for Status,
DeleteOptions and WatchEvent."""
META = "k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto"

_IMPORT = re.compile(r'^import "([^"]+)";', re.MULTILINE)
_PACKAGE = re.compile(r"^package ([\w.]+);", re.MULTILINE)
_STRUCT = re.compile(r"^type (\w+) struct \{$")
_FIELD = re.compile(r"^\s*(?P<decl>[^`/]+?)\s*`(?P<tag>[^`]*)`\s*(//.*)?$")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def module_dirs() -> dict[str, Path]:
    """Module path -> its directory in the Go module cache (downloaded when missing)."""
    dirs = {}
    for module, version in MODULES.items():
        try:
            out = subprocess.run(
                ["go", "mod", "download", "-json", f"{module}@{version}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ConfigurationError(f"`go mod download {module}@{version}` failed: {exc}") from exc
        dirs[module] = Path(json.loads(out)["Dir"])
    return dirs


def _source(dirs: dict[str, Path], import_path: str) -> Path:
    for module, directory in dirs.items():
        if import_path.startswith(module + "/"):
            return directory / import_path[len(module) + 1 :]
    raise ConfigurationError(f"{import_path}: not in any of the modules {sorted(dirs)}")


def closure(dirs: dict[str, Path]) -> list[str]:
    """The served packages' proto files and every file they import, sorted."""
    seen: set[str] = set()
    pending = [*SERVED, META]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        pending.extend(_IMPORT.findall(_source(dirs, path).read_text()))
    return sorted(seen)


def struct_fields(go_source: str) -> dict[str, dict[str, list[object]]]:
    """Go struct name -> protobuf field name -> [JSON name, omitempty, pointer] from the struct tags."""
    structs: dict[str, dict[str, list[object]]] = {}
    current: dict[str, list[object]] | None = None
    for line in go_source.splitlines():
        opened = _STRUCT.match(line)
        if opened:
            current = structs.setdefault(opened.group(1), {})
            continue
        if line == "}":
            current = None
            continue
        match = _FIELD.match(line) if current is not None else None
        if match is None or current is None:
            continue
        tags = dict(_TAG.findall(match.group("tag")))
        if tags.get("protobuf", "-") == "-":
            continue
        decl = match.group("decl").split()
        go_type = decl[-1]
        options = tags["protobuf"].split(",")
        go_name = decl[0] if len(decl) > 1 else go_type.lstrip("*").rsplit(".", 1)[-1]
        # without name=, go-to-protobuf names the field after the Go field, first letter lowered
        name = next(
            (o[len("name=") :] for o in options if o.startswith("name=")), go_name[0].lower() + go_name[1:]
        )
        json_name, *json_options = tags.get("json", "").split(",")  # "": an embedded struct, inlined
        omit = bool({"omitempty", "omitzero"} & set(json_options))
        current[name] = [json_name, int(omit), int(go_type.startswith("*"))]
    return {name: fields for name, fields in structs.items() if fields}


def go_fields(dirs: dict[str, Path], protos: list[str]) -> dict[str, dict[str, list[object]]]:
    table: dict[str, dict[str, list[object]]] = {}
    for path in protos:
        source = _source(dirs, path)
        match = _PACKAGE.search(source.read_text())
        assert match is not None, path
        package = match.group(1)
        for go_file in sorted(source.parent.glob("*.go")):
            if go_file.name.endswith("_test.go"):
                continue
            for struct, fields in struct_fields(go_file.read_text()).items():
                table.setdefault(f"{package}.{struct}", {}).update(fields)
    return dict(sorted(table.items()))


def refresh() -> list[Path]:
    dirs = module_dirs()
    protos = closure(dirs)
    if PROTO_DIR.exists():
        shutil.rmtree(PROTO_DIR)
    written = []
    for path in protos:
        target = PROTO_DIR / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_source(dirs, path), target)
        written.append(target)
    for module, directory in dirs.items():
        target = PROTO_DIR / module / "LICENSE"
        shutil.copyfile(directory / "LICENSE", target)
        written.append(target)
    lines = [
        f"{json.dumps(message)}: {json.dumps(fields, sort_keys=True, separators=(',', ':'))}"
        for message, fields in go_fields(dirs, protos).items()
    ]
    FIELDS_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one message a line: readable diffs
    written.append(FIELDS_FILE)
    return written


def main() -> int:
    for path in refresh():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
