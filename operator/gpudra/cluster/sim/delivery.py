"""Where a fault goes: straight to the simulated GPUs of a node whose agent runs in ``gpudra up``'s process, or to
the inbox of a node whose agent runs in a process of its own (:mod:`gpudra.cluster.sim.inbox`). Both ways in
(``gpudra sim fault`` and GpuFault objects) deliver through here."""

from __future__ import annotations

from collections.abc import Mapping

from gpudra.cluster.sim.faults import FaultOutcome, FaultRejected, inject, parse_fault
from gpudra.cluster.sim.inbox import FaultInbox
from gpudra.hardware.simulated import FakeNvml


class FaultDelivery:
    """``fleet`` and ``inboxes`` are live mappings (nodes added later are found too)."""

    def __init__(self, fleet: Mapping[str, FakeNvml], inboxes: Mapping[str, FaultInbox]) -> None:
        self._fleet = fleet
        self._inboxes = inboxes

    async def deliver(self, body: object) -> FaultOutcome:
        """Make the fault happen (FaultRejected when it cannot)."""
        spec = parse_fault(body)
        node = spec.node_name
        if node in self._fleet:
            return inject(self._fleet, spec)
        inbox = self._inboxes.get(node)
        if inbox is None:
            known = ", ".join(sorted({*self._fleet, *self._inboxes})) or "none"
            raise FaultRejected(f"no simulated node {node!r} (nodes: {known})")
        return await inbox.send(spec.to_wire())
