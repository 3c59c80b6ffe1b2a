"""Where the controller finds a GPU model's MIG facts: in the report of the node the GPU is on.

Each node's agent reports the MIG facts of its GPU models as NVML reports them (``gpudra.dev/mig-state``,
:class:`gpudra.mig.desired.GpuMigFacts`); the catalog stands in for a node that reports none (a simulated node of
an older agent, a node whose agent has not reported yet). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpudra.api.core import Node
from gpudra.hardware.gpus.catalog import Catalog, MigModel, load_catalog
from gpudra.mig import (
    STATE_ANNOTATION,
    GpuMigFacts,
    NodeReport,
)


@dataclass(frozen=True)
class FleetMigModels:
    """The MIG facts of the fleet's GPU models, node by node."""

    reported: Mapping[str, tuple[GpuMigFacts, ...]] = field(default_factory=dict)  # node -> its facts
    catalog: Catalog = field(default_factory=load_catalog)

    @classmethod
    def of_nodes(cls, nodes: Iterable[Node], catalog: Catalog | None = None) -> FleetMigModels:
        reported: dict[str, tuple[GpuMigFacts, ...]] = {}
        for node in nodes:
            text = (node.metadata.annotations or {}).get(STATE_ANNOTATION)
            report = NodeReport.from_json(text) if text else None
            if report is not None and report.models:
                reported[node.metadata.name or ""] = report.models
        return cls(reported, catalog or load_catalog())

    def by_product_name(self, node: str, product_name: str) -> MigModel | None:
        """The model of a GPU the node publishes with this ``productName``."""
        facts = next((f for f in self.reported.get(node, ()) if f.product_name == product_name), None)
        return facts.mig_model() if facts is not None else self.catalog.by_product_name(product_name)

    def pci_device_ids(self) -> dict[str, int]:
        """Model id -> PCI device id (a MigLayout entry's ``device-filter``), reported ones first."""
        ids = {m.model_id: m.pci_device_id for m in self.catalog.models.values()}
        ids.update({f.model: f.pci_device_id for facts in self.reported.values() for f in facts})
        return ids
