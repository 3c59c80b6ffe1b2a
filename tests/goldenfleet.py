"""A cluster view as the controller builds it, from a scenario of tests/golden/pending_claims.yaml: the simulated
fleet's published slices (static or dynamic MIG, taints, incomplete pools), the shipped DeviceClasses, claims
already allocated, and the pending claim; and the Event the controller posts for it (the unit tier checks it against
the corpus, tests/goldenkit.py checks that a cluster's pod gets it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpudra.allocator import Allocation
from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.cluster.fleet import DEFAULT_FLEET
from gpudra.controller.explaining import ClusterView, explain, explanation, view_from_wire
from gpudra.controller.pending import EVENT_LIMIT
from gpudra.devices.build import build_devices
from gpudra.devices.classes import load_device_classes
from gpudra.devices.dynamic import build_node_devices
from gpudra.devices.slices import build_slice_specs
from gpudra.hardware.simulated import empty_mig, simulated_backend
from gpudra.planning.migdemand import plan_pending

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "golden" / "pending_claims.yaml"
DRIVER = "gpu.nvidia.com"


def scenarios() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())
    return loaded


def fleet_slices(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The ResourceSlices the fleet's agents publish, as API objects."""
    slices: list[dict[str, Any]] = []
    dynamic = set(scenario.get("dynamic") or ())
    for part in (scenario.get("fleet") or DEFAULT_FLEET).split(","):
        profile, _, count = part.partition(":")
        for i in range(int(count or 1)):
            node = f"{profile}-{i}"
            backend = simulated_backend(profile, node).backend
            counter_sets = []
            if node in dynamic:
                empty_mig(backend)
                inventory = backend.read_inventory()
                profiles = {gpu.uuid: backend.mig_profiles(gpu.index) for gpu in inventory.gpus}
                published = build_node_devices(inventory, profiles)
                devices, counter_sets = published.devices, published.counter_sets
            else:
                devices = build_devices(backend.read_inventory())
            specs = build_slice_specs(
                node_name=node, driver=DRIVER, devices=devices, generation=1, counter_sets=counter_sets
            )
            for j, spec in enumerate(specs):
                body = ResourceSlice(metadata={"name": f"{node}-{j}"}, spec=spec).to_wire()
                if node in (scenario.get("incomplete") or ()):
                    body["spec"]["pool"]["resourceSliceCount"] += 1
                slices.append(body)
    for where, taint in (scenario.get("taints") or {}).items():
        node, device = where.split("/", 1)
        key_value, _, effect = taint.rpartition(":")
        key, _, value = key_value.partition("=")
        for body in slices:
            if body["spec"].get("nodeName") == node:
                for d in body["spec"].get("devices") or []:
                    if d["name"] == device:
                        d["taints"] = [{"key": key, "value": value, "effect": effect}]
    return slices


def _claim(name: str, namespace: str, devices: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"devices": devices},
        "status": status,
    }  # fmt: skip


def busy_claims(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """Claims in namespace default holding the listed devices."""
    out = []
    for name, devices in (scenario.get("busy") or {}).items():
        results = [
            {"request": "r", "driver": DRIVER, "pool": where.split("/")[0], "device": where.split("/")[1]}
            for where in devices
        ]
        request = {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": len(devices)}}
        out.append(
            _claim(name, "default", {"requests": [request]}, allocation={"devices": {"results": results}})
        )
    return out


def _uuid(slices: list[dict[str, Any]], where: str) -> str:
    node, device = where.split("/", 1)
    for body in slices:
        if body["spec"].get("nodeName") == node:
            for d in body["spec"].get("devices") or []:
                if d["name"] == device:
                    return str(d["attributes"]["uuid"]["string"])
    raise AssertionError(f"no device {where}")


def pending_claim(scenario: dict[str, Any], slices: list[dict[str, Any]]) -> dict[str, Any]:
    text = yaml.safe_dump(scenario["claim"])
    text = re.sub(r"\{uuid:([^}]+)\}", lambda m: _uuid(slices, m.group(1)), text)
    return _claim(scenario["name"], scenario.get("namespace", "default"), yaml.safe_load(text))


def view_of(scenario: dict[str, Any]) -> tuple[ClusterView, ResourceClaim]:
    slices = fleet_slices(scenario)
    pending = pending_claim(scenario, slices)
    claims = [*busy_claims(scenario), pending]
    nodes = sorted({s["spec"]["nodeName"] for s in slices})
    namespaces = [{"metadata": {"name": n}} for n in ("default", scenario.get("namespace", "default"))]
    view = view_from_wire(
        slices,
        [c.to_wire() for c in load_device_classes()],
        claims,
        namespaces,
        [{"metadata": {"name": n}} for n in nodes],
    )
    return view, ResourceClaim.model_validate(pending)


def expected_event(scenario: dict[str, Any]) -> tuple[str, str]:
    """The reason code and text of the Event the controller posts on the scenario's pending claim (and its pod):
    the explanation of the claim over the scenario's cluster, with the MIG planner's plan unless it is off."""
    view, claim = view_of(scenario)
    outcome = explain(view, claim)
    assert not isinstance(outcome, Allocation), f"{scenario['name']} fits on {outcome.node}"
    plan = None if scenario.get("planner") == "off" else plan_pending(view.allocator, [claim], DRIVER)
    said = explanation(view, claim, outcome, plan)
    return said.reason, said.text(EVENT_LIMIT)
