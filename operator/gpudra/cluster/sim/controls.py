"""The simulator's controls as ``gpudra up`` runs them: the GpuFault CRD and its watcher, and the HTTP endpoint
of ``gpudra sim fault``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpudra.cluster.sim.delivery import FaultDelivery
from gpudra.cluster.sim.endpoint import SimulatorEndpoint
from gpudra.cluster.sim.gpufault import GpuFaultWatcher
from gpudra.cluster.sim.inbox import FaultInbox
from gpudra.hardware.simulated import FakeNvml
from gpudra.kube.client import KubeClient


class SimulatorControls:
    """``fleet``: node name -> simulated NVML of the agents in this process; ``inboxes``: node name -> the fault
    inbox of an agent in a process of its own. Both live mappings (nodes added later are found too)."""

    def __init__(
        self,
        client: KubeClient,
        fleet: Mapping[str, FakeNvml],
        directory: Path,
        inboxes: Mapping[str, FaultInbox] | None = None,
    ) -> None:
        delivery = FaultDelivery(fleet, {} if inboxes is None else inboxes)
        self.endpoint = SimulatorEndpoint(delivery, directory)
        self.faults = GpuFaultWatcher(client, delivery)

    async def start(self) -> None:
        await self.faults.install()
        await self.endpoint.start()

    async def run(self) -> None:
        await self.faults.run()

    async def stop(self) -> None:
        await self.endpoint.stop()
