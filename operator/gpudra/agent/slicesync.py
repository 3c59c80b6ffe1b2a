"""Pure planning of ResourceSlice writes: what to delete, update and create so that a node's published slices
match its devices, with the fewest writes.

Rules (Kubernetes' publishing convention): one pool per node named after it; when content changes, every slice of
the pool moves to the next generation, so consumers never mix old and new slices; obsolete slices are deleted first,
then existing ones updated in place (their names survive restarts: no delete/create storm), then missing ones created.
A restart that finds the slices already current writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudra.api.dra import CounterSet, Device, ResourceSlice
from gpudra.api.meta import ObjectMeta, OwnerReference
from gpudra.devices import CounterLayout, build_slice_specs

SLICE_INDEX_LABEL = "gpudra.dev/slice-index"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


@dataclass(frozen=True)
class NodeRef:
    name: str
    uid: str


@dataclass
class SlicePlan:
    deletes: list[str] = field(default_factory=list)
    updates: list[ResourceSlice] = field(default_factory=list)
    creates: list[ResourceSlice] = field(default_factory=list)
    generation: int = 0

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.updates or self.creates)


def _index(slice_: ResourceSlice) -> tuple[int, str]:
    raw = (slice_.metadata.labels or {}).get(SLICE_INDEX_LABEL, "")
    return (int(raw) if raw.isdigit() else 1 << 30, slice_.metadata.name or "")


def plan_slices(
    existing: Sequence[ResourceSlice],
    devices: Sequence[Device],
    *,
    node: NodeRef,
    driver: str,
    max_devices_per_slice: int = 128,
    counter_sets: Sequence[CounterSet] = (),
    layout: CounterLayout = CounterLayout.V1_35,
) -> SlicePlan:
    """Compare the slices on the server (of this node and driver) with the devices (and the shared counter sets
    of dynamic MIG, laid out for the server's version) to publish."""
    current = sorted(existing, key=_index)
    generation = max((s.spec.pool.generation for s in current), default=0)
    same = build_slice_specs(
        node_name=node.name, driver=driver, devices=devices, generation=generation,
        max_devices_per_slice=max_devices_per_slice, counter_sets=counter_sets, layout=layout,
    )  # fmt: skip
    if len(same) == len(current) and all(
        have.spec.to_wire() == want.to_wire() and _index(have)[0] == i
        for i, (have, want) in enumerate(zip(current, same, strict=True))
    ):
        return SlicePlan(generation=generation)

    generation += 1
    desired = build_slice_specs(
        node_name=node.name, driver=driver, devices=devices, generation=generation,
        max_devices_per_slice=max_devices_per_slice, counter_sets=counter_sets, layout=layout,
    )  # fmt: skip
    plan = SlicePlan(generation=generation)
    plan.deletes = [s.metadata.name or "" for s in current[len(desired) :]]
    for i, spec in enumerate(desired):
        labels = {SLICE_INDEX_LABEL: str(i), MANAGED_BY_LABEL: "gpudra"}
        owner = OwnerReference(api_version="v1", kind="Node", name=node.name, uid=node.uid, controller=True)
        if i < len(current):
            have = current[i].metadata
            meta = have.model_copy(
                update={"labels": {**(have.labels or {}), **labels}, "owner_references": [owner]}
            )
            plan.updates.append(ResourceSlice(metadata=meta, spec=spec))
        else:
            meta_model = ObjectMeta(
                generate_name=f"{node.name}-{driver}-", labels=labels, owner_references=[owner]
            )
            plan.creates.append(ResourceSlice(metadata=meta_model, spec=spec))
    return plan
