"""What a container would see of its GPUs, for the stand-in kubelet (nothing runs in the embedded cluster).

A container runtime applies the CDI edits of the container's CDI devices: each spec's own edits once, then each
device's. The device nodes decide which GPUs and MIG devices the NVIDIA driver lets the container use, so
``nvidia-smi -L`` lists exactly those: a GPU whose ``/dev/nvidiaN`` is there, and under a MIG-enabled GPU the MIG
devices whose GPU-instance and compute-instance capability nodes are both there, numbered from 0 as the container
sees them. The lines are formatted as nvidia-smi prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudra.agent.prepareplan import mig_cap_minors
from gpudra.hardware.gpus.inventory import NodeInventory

_NVIDIA_SMI = re.compile(r"(^|[\s;&|/(])nvidia-smi(\s|$|;|&|\|)")
PREFIX = "[gpudra] "


@dataclass
class ContainerView:
    """The CDI edits a container gets, merged: device nodes and mounts by path, env last value wins."""

    cdi_devices: list[str] = field(default_factory=list)
    device_nodes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, str] = field(default_factory=dict)  # container path -> host path

    def apply(self, edits: dict[str, Any]) -> None:
        for node in edits.get("deviceNodes") or []:
            path = str(node.get("path", ""))
            if path and path not in self.device_nodes:
                self.device_nodes.append(path)
        for entry in edits.get("env") or []:
            key, _, value = str(entry).partition("=")
            self.env[key] = value
        for mount in edits.get("mounts") or []:
            self.mounts[str(mount.get("containerPath", ""))] = str(mount.get("hostPath", ""))


def _specs(cdi_dir: Path) -> dict[str, dict[str, Any]]:
    """Spec kind -> device name -> (spec, device) of every readable CDI spec in the directory."""
    found: dict[str, dict[str, Any]] = {}
    if not cdi_dir.is_dir():
        return found
    for path in sorted(cdi_dir.glob("*.json")):
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        devices = found.setdefault(str(spec.get("kind", "")), {})
        for device in spec.get("devices") or []:
            devices[str(device.get("name", ""))] = (spec, device)
    return found


def container_view(cdi_dir: Path, device_ids: Iterable[str]) -> ContainerView:
    """The merged edits of these fully qualified CDI ids (``vendor/class=name``), as a runtime applies them."""
    specs = _specs(cdi_dir)
    view = ContainerView()
    applied: set[int] = set()
    for device_id in device_ids:
        kind, _, name = device_id.partition("=")
        found = specs.get(kind, {}).get(name)
        if found is None:
            continue
        spec, device = found
        view.cdi_devices.append(device_id)
        if id(spec) not in applied:
            applied.add(id(spec))
            view.apply(spec.get("containerEdits") or {})
        view.apply(device.get("containerEdits") or {})
    return view


def nvidia_smi_list(inventory: NodeInventory, device_nodes: Iterable[str]) -> list[str]:
    """``nvidia-smi -L`` in a container with these device nodes."""
    paths = set(device_nodes)
    lines = []
    visible = [g for g in sorted(inventory.gpus, key=lambda g: g.index) if f"/dev/nvidia{g.minor}" in paths]
    for index, gpu in enumerate(visible):
        lines.append(f"GPU {index}: {gpu.product_name or 'NVIDIA GPU'} (UUID: {gpu.uuid})")
        if not gpu.mig_enabled:
            continue
        usable = [
            mig
            for mig in gpu.mig_devices
            if all(
                f"/dev/nvidia-caps/nvidia-cap{minor}" in paths
                for minor in mig_cap_minors(gpu.minor, mig.gi_id, mig.ci_id)
            )
        ]
        lines += [
            f"  MIG {mig.profile:<11} Device {i:>2}: (UUID: {mig.uuid})" for i, mig in enumerate(usable)
        ]
    return lines or ["No devices were found"]


def runs_nvidia_smi(container: dict[str, Any]) -> bool:
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    return any(_NVIDIA_SMI.search(w) for w in words)


def container_log(
    container: dict[str, Any], view: ContainerView, inventory: NodeInventory | None
) -> list[str]:
    """The log lines of a container: what its CDI devices give it (lines marked ``[gpudra]``), then what its
    nvidia-smi prints, or the command that did not run."""
    devices = " ".join(view.cdi_devices) or "none"
    lines = [
        f'{PREFIX}no container runs on a simulated node; "{container.get("name", "")}" gets CDI devices {devices}'
    ]
    if view.device_nodes:
        lines.append(f"{PREFIX}device nodes: {' '.join(view.device_nodes)}")
    if view.env:
        lines.append(f"{PREFIX}env: {' '.join(f'{k}={v}' for k, v in view.env.items())}")
    if view.mounts:
        lines.append(f"{PREFIX}mounts: {', '.join(f'{h} -> {p}' for p, h in view.mounts.items())}")
    if inventory is not None and runs_nvidia_smi(container):
        return [*lines, *nvidia_smi_list(inventory, view.device_nodes)]
    command = " ".join(_quoted((container.get("command") or []) + (container.get("args") or [])))
    return [*lines, f"{PREFIX}not run: {command or '(the image entrypoint)'}"]


def _quoted(words: Sequence[Any]) -> list[str]:
    return [
        w if re.fullmatch(r"[\w@%+=:,./-]+", w) else "'" + w.replace("'", "'\\''") + "'"
        for w in map(str, words)
    ]
