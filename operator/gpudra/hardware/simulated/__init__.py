"""A simulated GPU node: the pynvml call surface (FakeNvml) over GPUs built from the catalog and node
profiles.

``simulated_backend("dgx-a100", "node-0")`` gives the NvmlBackend the agent uses and the FakeNvml behind it
(for test hooks such as ``inject_xid``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.hardware.gpus.backend import GpuBackend
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.hardware.simulated.gpu_state import SimulatedGpu
from gpudra.hardware.simulated.profiles import NodeProfile


@dataclass(frozen=True)
class SimulatedNode:
    nvml: FakeNvml
    backend: NvmlBackend


def simulated_backend(profile: str | NodeProfile, node_name: str, fleet_index: int = 0) -> SimulatedNode:
    """A node of ``profile`` named ``node_name``; ``fleet_index`` places it in the fleet (GB200 racks)."""
    nvml = FakeNvml.from_profile(profile, node_name=node_name, fleet_index=fleet_index)
    return SimulatedNode(nvml=nvml, backend=NvmlBackend(node_name, nvml))


def empty_mig(backend: GpuBackend) -> None:
    """Dynamic MIG's starting point: MIG mode on and no instances on every MIG-capable GPU of the node."""
    for gpu in backend.read_inventory().gpus:
        if not gpu.mig_capable:
            continue
        backend.set_mig_mode(gpu.index, True)
        for instance in gpu.mig_devices:
            backend.destroy_mig_device(gpu.index, instance.gi_id)


__all__ = ["FakeNvml", "SimulatedGpu", "SimulatedNode", "empty_mig", "simulated_backend"]
