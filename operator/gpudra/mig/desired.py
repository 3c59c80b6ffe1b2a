"""The MIG desired-state channel between the controller and a node's agent, and the node's report back.

The controller writes a node's desired state as JSON in the Node annotation ``gpudra.dev/mig-desired``: where
it comes from (a MigLayout, or the ``nvidia.com/mig.config`` label), the generation, the policy and the
mig-parted entries (a named config is resolved by the controller, so the agent never reads ConfigMaps). Entries
travel as :class:`MigConfigEntry` values from the MigLayout to the agent: written as mig-parted documents only into
the annotation and parsed back, strictly, only when the agent reads it. The agent answers in
``gpudra.dev/mig-state``: its GPUs (index, model), the MIG facts of its MIG-capable models as NVML reports them
(profiles, placements, sizes, engine counts: once per model, so the annotation stays a few KB), the node's state
and per-GPU states, the claims in the way, one message. Both sides resolve entries per GPU with :func:`gpu_layouts`
over the reported facts, so the controller can reject a layout before any node touches its hardware once the node
has reported its GPUs, and a GPU model the catalog lacks gets MIG all the same. The catalog stands in only for a
node whose agent reports no facts (an older agent).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, ValidationError
from pydantic.alias_generators import to_camel

from gpudra.errors import InvalidInputError
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.catalog import Catalog, MigModel
from gpudra.hardware.gpus.migfacts import mig_model
from gpudra.mig.layout import InvalidLayoutError, MigLayout
from gpudra.mig.migparted import MigConfigEntry, MigPartedConfigError, entry_for_gpu, parse_entries
from gpudra.mig.validate import place_counts

DESIRED_ANNOTATION = "gpudra.dev/mig-desired"
STATE_ANNOTATION = "gpudra.dev/mig-state"
CONFIG_LABEL = "nvidia.com/mig.config"
CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"

Source = Literal["MigLayout", "Label"]
Policy = Literal["Static", "Dynamic"]
NodeState = Literal["pending", "applying", "success", "failed", "blocked", "invalid"]
GpuState = Literal[
    "pending", "success", "failed", "blocked", "invalid", "reset-required", "dynamic", "skipped"
]

# mig-manager's values of nvidia.com/mig.config.state for each node state.
LABEL_STATE: Mapping[str, str] = {
    "pending": "pending",
    "applying": "pending",
    "blocked": "pending",
    "success": "success",
    "failed": "failed",
    "invalid": "failed",
}


class _Json(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, mode="json"), sort_keys=True, separators=(",", ":"))


def _entries(value: object) -> tuple[MigConfigEntry, ...]:
    """Entries as given (the controller's values) or as the annotation's JSON carries them (parsed strictly)."""
    if isinstance(value, tuple | list) and value and all(isinstance(e, MigConfigEntry) for e in value):
        return tuple(value)
    try:
        return parse_entries(list(value) if isinstance(value, tuple) else value)
    except MigPartedConfigError as exc:
        raise ValueError(str(exc)) from exc


Entries = Annotated[
    tuple[MigConfigEntry, ...],
    PlainValidator(_entries),
    PlainSerializer(lambda entries: [e.to_document() for e in entries], return_type=list[dict[str, Any]]),
]


class DesiredState(_Json):
    """What one node's GPUs should look like."""

    source: Source
    name: str  # the MigLayout's name, or the config name of the label
    generation: int = 0
    policy: Policy = "Static"
    allow_partial: bool = False
    config: str | None = None  # the mig-parted config name, when the layout named one
    entries: Entries

    @property
    def key(self) -> str:
        """Identifies this desired state in reports and the agent's plan checkpoint."""
        return f"{self.source}/{self.name}@{self.generation}"

    @classmethod
    def from_json(cls, text: str) -> DesiredState:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise InvalidInputError(f"{DESIRED_ANNOTATION}: not a desired MIG state: {exc}") from exc


class NodeGpu(_Json):
    """A GPU as the agent reports it (enough for the controller to validate a layout)."""

    index: int
    model: str  # catalog model id; the product name for a model the catalog lacks
    pci_device_id: int


class GpuMigFacts(_Json):
    """One MIG-capable GPU model of the node, as its agent read it from NVML."""

    model: str  # as NodeGpu.model
    product_name: str
    pci_device_id: int
    memory_bytes: int
    profiles: tuple[MigProfileInfo, ...]

    def mig_model(self) -> MigModel:
        return mig_model(self.model, self.memory_bytes, self.profiles)


class GpuReport(_Json):
    index: int
    state: GpuState
    message: str = ""


class NodeReport(_Json):
    """The agent's answer to a desired state (or, with ``key`` empty, only its GPUs)."""

    key: str = ""
    state: NodeState = "pending"
    message: str = ""
    blocked_by: tuple[str, ...] = ()  # "namespace/name" of the claims in the way
    gpus: tuple[NodeGpu, ...] = ()
    models: tuple[GpuMigFacts, ...] = ()  # empty from an agent that does not report MIG facts
    gpu_states: tuple[GpuReport, ...] = ()

    @classmethod
    def from_json(cls, text: str) -> NodeReport | None:
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None


def node_models(report: NodeReport | None, catalog: Catalog) -> dict[str, MigModel]:
    """Model id -> MIG facts for a node: those its agent reported, the catalog's for models it did not report."""
    reported = {f.model: f.mig_model() for f in report.models} if report is not None else {}
    return {**catalog.models, **reported}


def gpu_layouts(
    entries: Sequence[MigConfigEntry], gpus: Sequence[NodeGpu], models: Mapping[str, MigModel]
) -> tuple[dict[int, MigLayout], list[str]]:
    """Each GPU's explicit desired layout (GPUs no entry selects are left out), and every problem, one message
    per GPU, naming the GPU and its model. GPUs without MIG are skipped unless an entry names their index.
    ``models``: model id -> MIG facts (:func:`node_models`)."""
    layouts: dict[int, MigLayout] = {}
    problems: list[str] = []
    for gpu in gpus:
        entry = entry_for_gpu(entries, gpu.index, gpu.pci_device_id)
        if entry is None:
            continue
        model = models.get(gpu.model)
        if model is None or model.mig is None:
            if entry.devices != "all":
                problems.append(f"GPU {gpu.index} ({gpu.model or 'unknown model'}) does not support MIG")
            continue
        try:
            layouts[gpu.index] = place_counts(model, entry.counts, mig_enabled=entry.mig_enabled)
        except InvalidLayoutError as exc:
            problems.append(f"GPU {gpu.index}: {exc}")
    return layouts, problems
