"""What a node offers, finished in one call: the settings and the agent's state each change the published devices
the way a user of the slices would see (shares, passthrough devices, NVLink peers, taints, a lost GPU's devices)."""

from __future__ import annotations

from gpudra.api.dra import Device, DeviceTaint
from gpudra.devices.offer import NodeState, OfferSettings, node_offer
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.simulated import simulated_backend


def reading(profile: str = "dgx-h100") -> tuple[NodeInventory, tuple[PciGpu, ...]]:
    backend = simulated_backend(profile, "n1").backend
    return backend.read_inventory(), backend.pci_gpus()


def by_name(devices: list[Device]) -> dict[str, Device]:
    return {d.name: d for d in devices}


def test_with_defaults_the_node_offers_its_gpus_untainted_without_counters() -> None:
    inventory, _ = reading()
    offered = node_offer(inventory, NodeState(), OfferSettings())
    assert sorted(by_name(offered.devices)) == sorted(f"gpu-{g.minor}" for g in inventory.gpus)
    assert offered.counter_sets == []
    assert all(not d.taints for d in offered.devices)
    assert all("gpudra.dev/nvlinkPeers" not in (d.attributes or {}) for d in offered.devices)


def test_time_sharing_passthrough_and_nvlink_peers_each_show_in_the_devices() -> None:
    inventory, pci = reading()
    offered = node_offer(
        inventory, NodeState(pci_gpus=pci), OfferSettings(shared_gpu_replicas=4, nvlink_peers=True)
    )
    devices = by_name(offered.devices)
    assert devices["gpu-0"].allow_multiple_allocations
    assert devices["gpu-0"].consumes_counters  # the GPU and its passthrough device share one counter
    assert "gpu-vfio-0" in devices
    assert len(offered.counter_sets) == len(inventory.gpus)
    peers = (devices["gpu-0"].attributes or {})["gpudra.dev/nvlinkPeers"].strings or []
    assert sorted(peers) == sorted(g.uuid for g in inventory.gpus)  # NVSwitch: every GPU reaches every other


def test_a_whole_gpu_taint_reaches_its_mig_devices_and_effect_none_stays_out_for_old_servers() -> None:
    inventory, _ = reading("dgx-a100")
    gpu = next(g for g in inventory.gpus if g.mig_devices)
    other = next(g for g in inventory.gpus if g.uuid != gpu.uuid)
    xid79 = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect="NoSchedule")
    xid13 = DeviceTaint(key="gpu.nvidia.com/xid", value="13", effect="None")
    state = NodeState(gpu_taints={(gpu.uuid, None): xid79, (other.uuid, None): xid13})
    offered = node_offer(inventory, state, OfferSettings()).devices

    def of(minor: int) -> set[str]:
        return {d.name for d in offered if d.name == f"gpu-{minor}" or d.name.startswith(f"gpu-{minor}-mig-")}

    assert {n for n in of(gpu.minor) if "-mig-" in n}  # the GPU's MIG devices are among those tainted
    assert {d.name for d in offered if d.taints} == of(gpu.minor) | of(other.minor)
    old_server = node_offer(inventory, state, OfferSettings(informational_taints=False)).devices
    assert {d.name for d in old_server if d.taints} == of(gpu.minor)
