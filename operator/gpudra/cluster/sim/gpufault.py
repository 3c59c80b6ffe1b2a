"""GpuFault (sim.gpudra.dev/v1alpha1, cluster-scoped): a fault on a simulated node, from kubectl.

``kubectl apply -f fault.yaml`` with a GpuFault makes the fault happen once on the named node's simulated GPUs
(delivered as ``gpudra sim fault`` delivers, :mod:`gpudra.cluster.sim.delivery`); its status says what happened.
Changing the spec (a new generation) makes it happen again; deleting the object undoes nothing, since a fault is
an event, not a state (fault Recover brings a lost GPU or fabric back). Served only by the embedded cluster: the
CRD is not among the driver's CRDs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gpudra.api.base import WireModel
from gpudra.api.crd import CrdInfo, CustomResource, PrinterColumn
from gpudra.api.crdgen import crd_for
from gpudra.api.timestamps import rfc3339
from gpudra.cluster.sim.delivery import FaultDelivery
from gpudra.cluster.sim.faults import FaultRejected, FaultSpec
from gpudra.errors import KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.crdready import wait_served
from gpudra.kube.informer import Informer
from gpudra.kube.resources import CRDS, Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)

GROUP = "sim.gpudra.dev"
VERSION = "v1alpha1"
GPU_FAULTS = Resource(GROUP, VERSION, "gpufaults", "GpuFault", namespaced=False)

FaultPhase = Literal["Injected", "NotHeard", "Rejected"]


class GpuFaultStatus(WireModel):
    """What the fault did."""

    phase: FaultPhase | None = Field(
        default=None,
        description="Injected: it happened. NotHeard: the XID or ECC event happened but no NVML event set "
        "watched the GPU, so it was lost as NVML loses it. Rejected: it cannot happen as written (message).",
    )
    message: str = Field(default="", description="What happened, in words.")
    injected_at: str | None = Field(default=None, description="When it happened (RFC 3339).")
    observed_generation: int | None = Field(default=None, description="The metadata.generation it describes.")


class GpuFault(CustomResource):
    """A fault or hardware change on one simulated node: an XID, an ECC error, a lost GPU, a GPU leaving its
    NVLink fabric, or recovery."""

    crd = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="GpuFault",
        plural="gpufaults",
        singular="gpufault",
        scope="Cluster",
        short_names=("gfault",),
        categories=("gpudra",),
        printer_columns=(
            PrinterColumn(name="Node", json_path=".spec.nodeName"),
            PrinterColumn(name="Device", json_path=".spec.device"),
            PrinterColumn(name="Fault", json_path=".spec.fault"),
            PrinterColumn(name="Xid", json_path=".spec.xid", type="integer"),
            PrinterColumn(name="Phase", json_path=".status.phase"),
            PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
            PrinterColumn(name="Message", json_path=".status.message", priority=1),
        ),
        status_subresource=True,
    )

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = "GpuFault"
    spec: FaultSpec
    status: GpuFaultStatus | None = None


def gpu_fault_crd() -> dict[str, Any]:
    return crd_for(GpuFault)


class GpuFaultWatcher:
    """Makes each new GpuFault (or new generation of one) happen and writes its status."""

    def __init__(self, client: KubeClient, delivery: FaultDelivery) -> None:
        self._client = client
        self._delivery = delivery
        self.informer = Informer(client, GPU_FAULTS, self._on_fault, parse=GpuFault.model_validate)

    async def install(self) -> None:
        crd = await self._client.apply_object(CRDS, gpu_fault_crd())
        await wait_served(self._client, [crd["metadata"]["name"]])

    async def run(self) -> None:
        await self.informer.run()

    async def _on_fault(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        if (body.get("status") or {}).get("observedGeneration") == generation:
            return
        status = await self._outcome(body.get("spec"))
        status.observed_generation = generation
        log.info("simulated fault", fault=meta.get("name"), phase=status.phase, message=status.message)
        try:
            await self._client.patch(
                GPU_FAULTS, meta["name"], {"status": status.to_wire()}, subresource="status"
            )
        except NotFoundError:
            return
        except KubeError as exc:
            log.warning("could not write a GpuFault's status", fault=meta.get("name"), error=str(exc))

    async def _outcome(self, spec: object) -> GpuFaultStatus:
        now = rfc3339()
        try:
            outcome = await self._delivery.deliver(spec)
        except FaultRejected as exc:
            return GpuFaultStatus(phase="Rejected", message=str(exc))
        phase: FaultPhase = "Injected" if outcome.heard else "NotHeard"
        return GpuFaultStatus(phase=phase, message=outcome.message, injected_at=now)
