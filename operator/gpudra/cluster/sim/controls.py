"""The simulator's controls as ``gpudra up`` runs them: the GpuFault CRD and its watcher, and the HTTP endpoint
of ``gpudra sim fault``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpudra.cluster.sim.endpoint import SimulatorEndpoint
from gpudra.cluster.sim.gpufault import GpuFaultWatcher
from gpudra.hardware.simulated import FakeNvml
from gpudra.kube.client import KubeClient


class SimulatorControls:
    """``fleet`` is the live mapping of node name -> simulated NVML (nodes added later are found too)."""

    def __init__(self, client: KubeClient, fleet: Mapping[str, FakeNvml], directory: Path) -> None:
        self.endpoint = SimulatorEndpoint(fleet, directory)
        self.faults = GpuFaultWatcher(client, fleet)

    async def start(self) -> None:
        await self.faults.install()
        await self.endpoint.start()

    async def run(self) -> None:
        await self.faults.run()

    async def stop(self) -> None:
        await self.endpoint.stop()
