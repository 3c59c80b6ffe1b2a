"""What a custom resource model declares about its CustomResourceDefinition (group, names, scope, columns).

A CRD model subclasses :class:`CustomResource` and sets ``crd``; ``gpudra.api.crdgen`` turns the model and
this declaration into the CustomResourceDefinition that ``crds/`` holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from gpudra.api.base import WireModel
from gpudra.api.meta import ObjectMeta


@dataclass(frozen=True)
class PrinterColumn:
    """One ``kubectl get`` column (additionalPrinterColumns)."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0  # 0: always shown; 1: only with -o wide


@dataclass(frozen=True)
class CrdInfo:
    """The CustomResourceDefinition facts that are not in the model's fields."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = False

    @property
    def name(self) -> str:
        """The CRD's own name: ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


class CustomResource(WireModel):
    """Base of every CRD model: apiVersion, kind and metadata, plus the class-level ``crd`` declaration."""

    crd: ClassVar[CrdInfo]

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
