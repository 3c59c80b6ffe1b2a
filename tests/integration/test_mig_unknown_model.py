"""A GPU model the catalog lacks gets static MIG, the MIG planner and the web view from the MIG facts its node's
agent reads from NVML: the real H200 recording, renamed into a model gpudra's catalog does not know (an
"NVIDIA H20" with another PCI device id), runs as a node of the embedded cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp

from clusterkit import StartCluster, eventually, mig_claim
from gpudra.cluster.sim.fleetfile import load_fleet
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS, RESOURCE_SLICES

RECORDING = Path(__file__).parents[1] / "fixtures" / "nvml" / "h200-sxm-141gb-580.159.04.json"
PRODUCT, PCI_DEVICE_ID = "NVIDIA H20", 0x232910DE
NODE = "unknown-0"


def unknown_model_recording(path: Path) -> Path:
    """The H200 recording with its GPU renamed and given a PCI device id the catalog has no model for."""
    data: dict[str, Any] = json.loads(RECORDING.read_text())
    for gpu in data["gpus"]:
        gpu["name"], gpu["pci"]["device_id"] = PRODUCT, PCI_DEVICE_ID
    for gpu in data["inventory"]["gpus"]:
        gpu["product_name"], gpu["pci_device_id"] = PRODUCT, PCI_DEVICE_ID
    path.write_text(json.dumps(data))
    return path


async def start(start_cluster: StartCluster, tmp_path: Path) -> EmbeddedCluster:
    catalog = load_catalog()
    assert catalog.by_product_name(PRODUCT) is None and catalog.by_pci_device_id(PCI_DEVICE_ID) is None
    recording = unknown_model_recording(tmp_path / "h20.json")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"profiles:\n- {{name: unknown, recording: {recording}}}\nnodes:\n- profile: unknown\n")
    settings = ControllerSettings(
        pending_grace_seconds=0.2, pending_interval_seconds=0.2, mig_planner="suggest"
    )
    return await start_cluster(load_fleet(fleet), controller=settings, web_port=0)


async def test_an_unknown_model_gets_static_mig_the_planner_and_the_web_view(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = await start(start_cluster, tmp_path)
    client = cluster.client
    assert client is not None and cluster.web_url is not None
    # mig-parted's default config all-1g.18gb: one entry per model, with the H20's from its node's report.
    await client.create(MIGLAYOUTS, {
        "apiVersion": "gpudra.dev/v1alpha1", "kind": "MigLayout", "metadata": {"name": "sevens"},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}},
                 "layout": {"config": "all-1g.18gb"}},
    })  # fmt: skip

    async def applied() -> bool:
        status = (await client.get_raw(MIGLAYOUTS, "sevens")).get("status") or {}
        nodes = status.get("nodes") or []
        assert all(n.get("state") != "invalid" for n in nodes), nodes
        return [n.get("state") for n in nodes] == ["success"]

    await eventually(applied, timeout=60)

    async def mig_devices() -> list[str]:
        slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
        return sorted(
            d["attributes"]["profile"]["string"]
            for s in slices
            for d in s["spec"].get("devices") or []
            if "profile" in d.get("attributes", {})
        )

    assert await eventually(mig_devices) == ["1g.18gb"] * 7

    # The planner: a 3g.71gb fits the H20 once repartitioned (the user's MigLayout governs, so it only suggests).
    await client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.71gb"), "default")

    async def planner_event() -> str | None:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=wants-3g")
        said = [e["message"] for e in events if "MIG planner" in e["message"]]
        return said[0] if said else None

    message = await eventually(planner_event, timeout=30)
    assert f"would fit on {NODE} if its MIG layout had a 3g.71gb free" in message, message

    # The web view draws the GPU with its memory as NVML reported it (no full-GPU device says it with MIG on).
    async def card() -> str | None:
        async with aiohttp.ClientSession() as session, session.get(str(cluster.web_url)) as response:
            page = await response.text()
        found = re.search(rf"gpu-0 · {PRODUCT} · (\d+ GiB|\?)", page)
        return found.group(1) if found and "1g.18gb" in page else None

    assert await eventually(card) == "140 GiB"
