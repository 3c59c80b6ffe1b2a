"""The web view's node cards: GPUs with their holders and health, MIG GPUs to scale (static and dynamic)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.core import Node
from gpudra.api.dra import ResourceSlice
from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.simslices import node_objects
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.planning.fleetview import GpuCard, MigSlot, NodeCard, node_card

CATALOG = load_catalog()


def card(profile: str, *, dynamic_mig: bool = False, held: dict[str, str] | None = None,
         edit: Any = None) -> NodeCard:  # fmt: skip
    (node,) = parse_fleet(f"{profile}:1", {profile})
    node_body, *slices = node_objects(node, dynamic_mig=dynamic_mig)
    if edit is not None:
        edit(slices)
    holders = {(node.name, device): claim for device, claim in (held or {}).items()}
    return node_card(node.name, Node.model_validate(node_body), _parsed(slices), holders, CATALOG)


def _parsed(slices: list[dict[str, Any]]) -> list[ResourceSlice]:
    return [ResourceSlice.model_validate(s) for s in slices]


def test_static_mig_gpu_is_drawn_to_scale_with_each_instance_placed() -> None:
    gpu0 = card("dgx-a100").gpus[0]
    assert (gpu0.name, gpu0.model, gpu0.state) == ("gpu-0", "NVIDIA A100-SXM4-40GB", "free")
    assert gpu0.mig is not None and not gpu0.mig.dynamic
    assert (gpu0.mig.memory_slices, gpu0.mig.compute_slices) == (8, 7)
    assert [(s.profile, s.start, s.size, s.compute) for s in gpu0.mig.instances] == [
        ("2g.10gb", 0, 2, 2), ("1g.5gb", 2, 1, 1), ("1g.5gb", 3, 1, 1), ("3g.20gb", 4, 4, 3)
    ]  # fmt: skip
    assert gpu0.mig.free_memory_slices == 0


def test_holders_of_mig_instances_and_whole_gpus() -> None:
    a100 = card("dgx-a100", held={"gpu-0-mig-3g20gb-9-4": "team-a/infer"})
    mig = a100.gpus[0].mig
    assert mig is not None
    (held,) = [s for s in mig.instances if s.holder]
    assert held == MigSlot("gpu-0-mig-3g20gb-9-4", "3g.20gb", 4, 4, 3, holder="team-a/infer")
    assert a100.gpus[0].state == "partial" and a100.gpus[1].state == "free"
    h100 = card("dgx-h100", held={"gpu-3": "default/train"})
    assert h100.gpus[3].holder == "default/train" and h100.gpus[3].state == "allocated"
    assert h100.gpus[3].mig is None and h100.count("free") == 7
    assert h100.gpus[0].memory_bytes > 80 * 10**9


def test_dynamic_mig_shows_only_what_is_carved() -> None:
    idle = card("dgx-a100", dynamic_mig=True)
    assert idle.gpus[0].mig is not None and idle.gpus[0].mig.dynamic and idle.gpus[0].mig.instances == ()
    carved = card("dgx-a100", dynamic_mig=True, held={"gpu-2-mig-3g20gb-9-4": "default/a"})
    mig = carved.gpus[2].mig
    assert mig is not None
    assert [(s.profile, s.start, s.size, s.holder) for s in mig.instances] == [("3g.20gb", 4, 4, "default/a")]
    whole = card("dgx-a100", dynamic_mig=True, held={"gpu-5": "default/whole"})
    assert whole.gpus[5].holder == "default/whole" and whole.gpus[5].state == "allocated"


def test_taints_mark_a_gpu_unhealthy_only_when_they_repel() -> None:
    def taint(slices: list[dict[str, Any]]) -> None:
        devices = slices[0]["spec"]["devices"]
        devices[0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
        devices[1]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]

    node = card("l4x4", edit=taint)
    assert node.gpus[0].state == "unhealthy" and node.gpus[0].taints == ("gpu.nvidia.com/xid=79:NoSchedule",)
    assert node.gpus[1].state == "free" and node.gpus[1].taints == ("gpu.nvidia.com/xid=13:None",)


@pytest.mark.parametrize("ready", [True, False])
def test_node_readiness_taints_and_other_drivers_devices(ready: bool) -> None:
    (node,) = parse_fleet("gb200-nvl72:1", {"gb200-nvl72"})
    body, *slices = node_objects(node)
    body["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    body["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]
    devices = [{"name": "channel-0"}, {"name": "daemon-0"}]
    channels = {"metadata": {"name": "cd"},
                "spec": {"driver": "compute-domain.nvidia.com", "nodeName": node.name, "devices": devices,
                         "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}}}  # fmt: skip
    out = node_card(node.name, Node.model_validate(body), _parsed([*slices, channels]), {}, CATALOG)
    assert out.ready is ready and out.taints == ("maintenance:NoSchedule",)
    assert out.other_devices == 2 and len(out.gpus) == 4


def test_a_held_gpu_that_turns_unhealthy_is_still_held() -> None:
    """The web view draws it apart from a free faulted GPU, and counts it among the held ones."""
    held = GpuCard("gpu-0", 0, "H100", 0, "GPU-0", holder="ns/train-gpu-x7k2p", unhealthy=True)
    free = GpuCard("gpu-1", 1, "H100", 0, "GPU-1", unhealthy=True)
    assert (held.state, held.held) == ("unhealthy", "allocated")
    assert (free.state, free.held) == ("unhealthy", "free")
