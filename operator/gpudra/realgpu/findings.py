"""What the real-GPU check concludes from what it read: the GPUs with MIG mode on, the slices against the recording,
a claim's CDI spec's device nodes, the health stream. Pure: the callers read the objects and the files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Body = dict[str, Any]


def recorded_gpus(recording: Mapping[str, Any]) -> list[Body]:
    """The recording's GPUs as gpudra read them (its inventory); empty when NVML could not be read at all."""
    inventory = recording.get("inventory") or {}
    return list(inventory.get("gpus") or [])


def gpus_with_mig_on(recording: Mapping[str, Any]) -> list[Body]:
    """GPUs whose MIG mode is on now or pending (on after the next reset): index, UUID and the two modes."""
    return [
        {
            "index": g.get("index"),
            "uuid": g.get("uuid"),
            "mig_enabled": bool(g.get("mig_enabled")),
            "mig_pending": bool(g.get("mig_pending")),
        }
        for g in recorded_gpus(recording)
        if g.get("mig_enabled") or g.get("mig_pending")
    ]


def gpu_line(gpu: Mapping[str, Any]) -> Body:
    """A GPU of the recording in a few words."""
    keys = (
        "index",
        "uuid",
        "product_name",
        "memory_bytes",
        "mig_capable",
        "mig_enabled",
        "minor",
        "pci_bus_id",
    )
    return {k: gpu.get(k) for k in keys}


def node_devices(slices: Iterable[Mapping[str, Any]], node: str, driver: str) -> list[Body]:
    """The devices the node's slices of ``driver`` publish."""
    return [
        device
        for s in slices
        if s.get("spec", {}).get("nodeName") == node and s.get("spec", {}).get("driver") == driver
        for device in s.get("spec", {}).get("devices") or []
    ]


def attribute(device: Mapping[str, Any], name: str) -> Any:
    """An attribute's value whatever its type (``{"string": "gpu"}`` -> ``"gpu"``); None when absent."""
    value = (device.get("attributes") or {}).get(name)
    if not isinstance(value, Mapping) or not value:
        return None
    return next(iter(value.values()))


def compare_slices(
    devices: Sequence[Mapping[str, Any]], recording: Mapping[str, Any]
) -> tuple[list[str], Body]:
    """Problems (empty: none) and a summary of the published devices against what the recording says gpudra
    would publish from the same GPUs: every recorded device must be published, and every recorded GPU as a
    device of its own or as the parent of its MIG devices."""
    published = {str(d.get("name")) for d in devices}
    expected = {str(d.get("name")) for d in recording.get("devices") or []}
    uuids = {attribute(d, "uuid") for d in devices} | {attribute(d, "parentUUID") for d in devices}
    problems = []
    if not devices:
        problems.append("the node's slices publish no device")
    missing = sorted(expected - published)
    if missing:
        problems.append(f"devices of the recording not published: {missing}")
    lost = [g.get("uuid") for g in recorded_gpus(recording) if g.get("uuid") not in uuids]
    if lost:
        problems.append(f"GPUs of the recording with no published device: {lost}")
    gpus = [d for d in devices if attribute(d, "type") == "gpu"]
    summary: Body = {
        "devices": len(devices),
        "by_type": _count(str(attribute(d, "type")) for d in devices),
        "names": sorted(published),
        "not_in_recording": sorted(published - expected),
    }
    if gpus:
        first = min(gpus, key=lambda d: str(d.get("name")))
        summary["first_gpu"] = {
            "name": first.get("name"),
            "attributes": dict(first.get("attributes") or {}),
            "capacity": dict(first.get("capacity") or {}),
        }
    return problems, summary


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def spec_device_nodes(spec: Mapping[str, Any]) -> list[str]:
    """The host paths of every device node a CDI spec gives a container (spec-wide and per device), in order."""
    edits = [spec.get("containerEdits") or {}] + [
        d.get("containerEdits") or {} for d in spec.get("devices") or []
    ]
    paths: list[str] = []
    for edit in edits:
        for node in edit.get("deviceNodes") or []:
            path = str(node.get("hostPath") or node.get("path"))
            if path not in paths:
                paths.append(path)
    return paths


def spec_env(spec: Mapping[str, Any]) -> dict[str, str]:
    """The spec-wide environment of a CDI spec."""
    pairs = (e.split("=", 1) for e in (spec.get("containerEdits") or {}).get("env") or [])
    return {k: v for k, v in pairs}


def health_findings(
    updates: Sequence[Sequence[Mapping[str, Any]]], published: Iterable[str]
) -> tuple[list[str], Body]:
    """Problems and a summary of the health stream: it must have sent an update, the last one naming every
    published device, and no device may be unhealthy in any update."""
    problems = []
    if not updates:
        problems.append("the health stream sent nothing")
        return problems, {"updates": 0}
    last = {str(d["device"]): str(d["health"]) for d in updates[-1]}
    missing = sorted(set(published) - set(last))
    if missing:
        problems.append(f"published devices missing from the last health update: {missing}")
    unhealthy = sorted({str(d["device"]) for update in updates for d in update if d["health"] == "UNHEALTHY"})
    if unhealthy:
        problems.append(f"devices reported unhealthy: {unhealthy}")
    messages = sorted(
        {f"{d['device']}: {d['message']}" for update in updates for d in update if d.get("message")}
    )
    return problems, {
        "updates": len(updates),
        "last": _count(last.values()),
        "unhealthy": unhealthy,
        "messages": messages,
    }
