"""The fleet table ``gpudra up`` prints: read back through the API, so it shows what a client would see."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from rich.table import Table

from gpudra.cluster.fleet import PROFILE_LABEL
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES, RESOURCE_SLICES


def _attr(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), ""))


async def fleet_table(client: KubeClient) -> Table:
    nodes, _ = await client.list(NODES)
    slices, _ = await client.list(RESOURCE_SLICES)
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    slice_names: dict[str, list[str]] = defaultdict(list)
    for s in slices:
        node = s["spec"].get("nodeName", "")
        per_node[node].extend(s["spec"].get("devices") or [])
        slice_names[node].append(s["metadata"]["name"])

    table = Table(title="gpudra fleet", header_style="bold")
    for column in ("NODE", "PROFILE", "GPU MODEL", "GPUS", "MIG DEVICES", "DEVICES", "SLICES"):
        table.add_column(column)
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        devices = per_node.get(name, [])
        gpus = {_attr(d, "uuid") for d in devices if _attr(d, "type") == "gpu"}
        gpus |= {_attr(d, "parentUUID") for d in devices if _attr(d, "type") == "mig"}
        models = sorted({_attr(d, "productName") for d in devices} - {""})
        profiles = Counter(_attr(d, "profile") for d in devices if _attr(d, "type") == "mig")
        mig = ", ".join(f"{n}x {p}" for p, n in sorted(profiles.items())) or "-"
        table.add_row(
            name,
            (node["metadata"].get("labels") or {}).get(PROFILE_LABEL, "-"),
            ", ".join(models) or "-",
            str(len(gpus)),
            mig,
            str(len(devices)),
            ", ".join(sorted(slice_names.get(name, []))) or "-",
        )
    return table
