"""A simulated GPU node: the pynvml call surface (FakeNvml) over GPUs built from the catalog and node
profiles.

``simulated_backend("dgx-a100", "node-0")`` gives the NvmlBackend the agent uses and the FakeNvml behind it
(for test hooks such as ``inject_xid``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.hardware.nvml import NvmlBackend
from gpudra.hardware.profiles import NodeProfile
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.hardware.simulated.gpu_state import SimulatedGpu


@dataclass(frozen=True)
class SimulatedNode:
    nvml: FakeNvml
    backend: NvmlBackend


def simulated_backend(profile: str | NodeProfile, node_name: str, fleet_index: int = 0) -> SimulatedNode:
    """A node of ``profile`` named ``node_name``; ``fleet_index`` places it in the fleet (GB200 racks)."""
    nvml = FakeNvml.from_profile(profile, node_name=node_name, fleet_index=fleet_index)
    return SimulatedNode(nvml=nvml, backend=NvmlBackend(node_name, nvml))


__all__ = ["FakeNvml", "SimulatedGpu", "SimulatedNode", "simulated_backend"]
