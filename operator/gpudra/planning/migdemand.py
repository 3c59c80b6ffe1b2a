"""Pure: what the MIG planner needs, read from the allocator's view of the cluster.

- The fleet's GPUs (``fleet_gpus``): every MIG-capable GPU that publishes static devices (its full GPU device
  when MIG is off, its MIG devices when on), with the model from ``productName``, the GPU index from the device
  name (``gpu-<minor>``; NVML index and minor agree on the machines gpudra knows), instance placements from the
  MIG device names, and as in-use set every device the snapshot holds allocated. GPUs whose devices consume
  shared counters (dynamic MIG) are left to the allocator and never planned.
- A claim's MIG demand (``claim_demand``): each request's selectors (its DeviceClass's and its own) are
  evaluated by the allocator's CEL on a virtual MIG device of every profile of every GPU model in the fleet,
  built like the agent would publish it. So a request for ``mig.nvidia.com`` with ``profile == '3g.40gb'``, a
  per-profile DeviceClass (extended resources ``nvidia.com/mig-3g.40gb``), or a selector on memory all work;
  the acceptable profiles are tried smallest first. A claim with a request no MIG device can serve (a whole GPU,
  allocationMode All, adminAccess, consumable capacity) is not the planner's.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpudra.allocator import (
    Allocator,
    ClusterSnapshot,
    DeviceEntry,
    RequestProblem,
    RequestSpec,
    build_claim,
    claim_key,
    evaluate,
    make_entry,
    spec_json,
)
from gpudra.api.dra import Device, DeviceAttribute, DeviceCapacity, ResourceClaim, ResourceSlice
from gpudra.api.quantity import format_quantity
from gpudra.api.timestamps import epoch_seconds
from gpudra.devices import (
    EXTENSION_DOMAIN,
    TYPE_GPU,
    TYPE_MIG,
    mig_device_name,
    parse_mig_device_name,
)
from gpudra.errors import GpudraError
from gpudra.hardware.gpus.catalog import MigModel, MigProfile
from gpudra.mig import (
    DemandGpu,
    DemandPlan,
    GpuMigState,
    MigDemand,
    MigInstance,
    MigRequest,
    ProfileChoice,
    plan_demand,
)
from gpudra.planning.migmodels import FleetMigModels

_GPU_NAME_PREFIX = "gpu-"


@dataclass
class _GpuSeen:
    node: str
    model: MigModel
    uuid: str
    minor: int
    template: DeviceEntry  # one published device of the GPU (its attributes describe the GPU)
    slice_: ResourceSlice
    enabled: bool = False
    instances: list[tuple[str, int, str]] = field(default_factory=list)  # (profile, start, MIG uuid)
    in_use: set[str] = field(default_factory=set)
    dynamic: bool = False

    def demand_gpu(self) -> DemandGpu:
        instances = tuple(
            MigInstance(profile, start, gi, mig_uuid)
            for gi, (profile, start, mig_uuid) in enumerate(sorted(self.instances, key=lambda i: i[1]), 1)
        )
        state = GpuMigState(self.model.model_id, self.minor, self.enabled, instances, self.uuid)
        return DemandGpu(self.model, state, frozenset(self.in_use), node=self.node)


def _attr(entry: DeviceEntry, name: str) -> str:
    value = entry.attributes.get(f"{entry.id.driver}/{name}")
    return str(value[1]) if value is not None else ""


def _minor(name: str) -> int | None:
    parsed = parse_mig_device_name(name)
    if parsed is not None:
        return parsed[0]
    digits = name.removeprefix(_GPU_NAME_PREFIX)
    return int(digits) if name.startswith(_GPU_NAME_PREFIX) and digits.isdigit() else None


def _scan(snapshot: ClusterSnapshot, driver: str, models: FleetMigModels) -> list[_GpuSeen]:
    """The MIG-capable GPUs of the snapshot's node-local pools of ``driver``, by node and minor."""
    seen: dict[str, _GpuSeen] = {}
    for pool in snapshot.pools():
        if pool.key.driver != driver:
            continue
        slices = {s.metadata.name: s for s in pool.slices}
        for entry in pool.entries:
            kind, minor = _attr(entry, "type"), _minor(entry.id.device)
            model = models.by_product_name(entry.node_name or "", _attr(entry, "productName"))
            uuid = _attr(entry, "uuid" if kind == TYPE_GPU else "parentUUID")
            slice_ = slices.get(entry.slice_name)
            if kind not in (TYPE_GPU, TYPE_MIG) or minor is None or model is None or model.mig is None:
                continue
            if not uuid or not entry.node_name or slice_ is None:
                continue
            gpu = seen.setdefault(uuid, _GpuSeen(entry.node_name, model, uuid, minor, entry, slice_))
            gpu.dynamic = gpu.dynamic or bool(entry.consumes)
            busy = snapshot.in_use(entry.id) or bool(snapshot.shares(entry.id))
            parsed = parse_mig_device_name(entry.id.device)
            if kind == TYPE_MIG and parsed is not None:
                gpu.enabled = True
                mig_uuid = _attr(entry, "uuid") or str(entry.id)
                gpu.instances.append((_attr(entry, "profile"), parsed[2], mig_uuid))
                if busy:
                    gpu.in_use.add(mig_uuid)
            elif busy:
                gpu.in_use.add(uuid)
    return sorted((g for g in seen.values() if not g.dynamic), key=lambda g: (g.node, g.minor))


def fleet_gpus(
    snapshot: ClusterSnapshot, driver: str, models: FleetMigModels | None = None
) -> list[DemandGpu]:
    """The MIG-capable GPUs the snapshot publishes for ``driver`` (see the module docstring)."""
    return [g.demand_gpu() for g in _scan(snapshot, driver, models or FleetMigModels())]


def _virtual(gpu: _GpuSeen, profile: MigProfile) -> DeviceEntry:
    """A MIG device of ``profile`` on ``gpu`` as the agent would publish it (attributes of the GPU)."""
    source = gpu.template.device.attributes or {}
    attributes = {k: v for k, v in source.items() if not k.startswith(f"{EXTENSION_DOMAIN}/")}
    attributes.update(
        type=DeviceAttribute(string=TYPE_MIG),
        uuid=DeviceAttribute(string=f"MIG-planned-{profile.name}"),
        parentUUID=DeviceAttribute(string=gpu.uuid),
        profile=DeviceAttribute(string=profile.name),
    )
    amounts = {
        "multiprocessors": profile.multiprocessors,
        "copyEngines": profile.copy_engines,
        "decoders": profile.decoders,
        "encoders": profile.encoders,
        "jpegEngines": profile.jpeg_engines,
        "ofaEngines": profile.ofa_engines,
        "memory": profile.memory_bytes,
    }
    start = profile.starts[0]
    amounts.update({f"memorySlice{i}": 1 for i in range(start, start + profile.placement_size)})
    device = Device(
        name=mig_device_name(gpu.minor, profile.name, profile.profile_id, start),
        attributes=attributes,
        capacity={k: DeviceCapacity(value=format_quantity(v)) for k, v in amounts.items()},
    )
    return make_entry(gpu.slice_, device)


@dataclass
class VirtualFleet:
    """One virtual MIG device per (GPU model, profile) of the fleet, to test request selectors on."""

    devices: list[tuple[MigModel, MigProfile, DeviceEntry]]

    @classmethod
    def of(cls, gpus: Iterable[_GpuSeen]) -> VirtualFleet:
        firsts: dict[str, _GpuSeen] = {}
        for gpu in gpus:
            firsts.setdefault(gpu.model.model_id, gpu)
        devices = [
            (seen.model, profile, _virtual(seen, profile))
            for seen in firsts.values()
            for profile in (seen.model.mig.profiles if seen.model.mig else ())
        ]
        return cls(devices)


def virtual_fleet(
    snapshot: ClusterSnapshot, driver: str, models: FleetMigModels | None = None
) -> VirtualFleet:
    """The virtual MIG devices of the GPU models the snapshot publishes for ``driver``."""
    return VirtualFleet.of(_scan(snapshot, driver, models or FleetMigModels()))


def _choices(spec: RequestSpec, fleet: VirtualFleet, allocator: Allocator) -> tuple[ProfileChoice, ...]:
    models: dict[str, set[str]] = defaultdict(set)
    order: dict[str, tuple[int, int, str]] = {}
    for model, profile, entry in fleet.devices:
        try:
            ok = all(evaluate(s, entry, allocator.device_view) for s in spec.selectors)
        except GpudraError:
            ok = False
        if ok:
            models[profile.name].add(model.model_id)
            key = (profile.slice_count, profile.memory_mib, profile.name)
            order[profile.name] = min(order.get(profile.name, key), key)
    return tuple(ProfileChoice(p, frozenset(models[p])) for p in sorted(models, key=order.__getitem__))


def claim_demand(claim: ResourceClaim, fleet: VirtualFleet, allocator: Allocator) -> MigDemand | None:
    """The claim's MIG demand, or None when some request is not for MIG devices (see the module docstring)."""
    labels = allocator.namespace_labels.get(claim.metadata.namespace or "default")
    try:
        spec = build_claim(0, claim, allocator.classes, allocator.compile_selector, labels)
    except (RequestProblem, GpudraError):
        return None
    requests: list[MigRequest] = []
    for group in spec.groups:
        for sub in group:  # firstAvailable: the first subrequest MIG devices can serve
            if sub.all_mode or sub.admin or sub.capacity_requests:
                continue
            choices = _choices(sub, fleet, allocator)
            if choices:
                requests.append(MigRequest(sub.full, sub.count, choices))
                break
        else:
            return None
    return MigDemand(claim_key(claim), tuple(requests)) if requests else None


def _created(claim: ResourceClaim) -> tuple[float, str]:
    stamp = claim.metadata.creation_timestamp
    when = epoch_seconds(str(stamp)) if stamp else float("inf")
    return when, claim_key(claim)


def plan_pending(
    allocator: Allocator,
    claims: Iterable[ResourceClaim],
    driver: str,
    models: FleetMigModels | None = None,
    kept_off: Mapping[str, Collection[str]] | None = None,
) -> DemandPlan:
    """The planner's suggestions for these pending claims (oldest first) over the allocator's snapshot;
    ``models``: the MIG facts the nodes reported (the catalog's alone without); ``kept_off``: claim key -> the nodes
    its pod may not go to, where nothing is planned for it. Claims that ask for no MIG device cost no scan of the
    fleet's GPUs (a controller explains them at every pending interval, and at 8,000 GPUs a scan took about
    0.4 s)."""
    models = models or FleetMigModels()
    fleet = _virtual_fleet(allocator.snapshot, driver, models)
    if not fleet.devices:
        return DemandPlan()
    known = _not_mig.get(allocator)
    if known is None or known[0] is not fleet or len(known[1]) > _NOT_MIG_LIMIT:
        known = _not_mig[allocator] = (fleet, set())
    unknown: list[tuple[ResourceClaim, tuple[str, object, str]]] = []
    for claim in claims:  # the shapes known to want no MIG device first: most pending claims, every round
        namespace = claim.metadata.namespace or "default"
        labels = allocator.namespace_labels.get(namespace) or {}
        shape: tuple[str, object, str] = (namespace, tuple(sorted(labels.items())), spec_json(claim))
        if shape not in known[1]:
            unknown.append((claim, shape))
    demands: list[MigDemand] = []
    for claim, claim_shape in sorted(unknown, key=lambda pair: _created(pair[0])):
        if claim_shape in known[1]:  # a claim of the same shape before it wanted none
            continue
        demand = claim_demand(claim, fleet, allocator)
        if demand is None:
            known[1].add(claim_shape)
        else:
            off = (kept_off or {}).get(demand.claim)
            demands.append(replace(demand, kept_off=frozenset(off)) if off else demand)
    if not demands:
        return DemandPlan()
    return plan_demand([g.demand_gpu() for g in _scan(allocator.snapshot, driver, models)], demands)


_fleets: weakref.WeakKeyDictionary[ClusterSnapshot, tuple[int, str, FleetMigModels, VirtualFleet]] = (
    weakref.WeakKeyDictionary()
)
"""Per snapshot, its virtual MIG fleet while its slices are unchanged (``version``): the fleet depends on the
published GPUs alone, not on which devices are in use."""


_NOT_MIG_LIMIT = 10_000
_not_mig: weakref.WeakKeyDictionary[Allocator, tuple[VirtualFleet, set[tuple[str, object, str]]]] = (
    weakref.WeakKeyDictionary()
)
"""Per allocator, the claim shapes (namespace, its labels, spec) with no MIG demand on its current virtual fleet:
the same pending claims are planned for round after round."""


def _virtual_fleet(snapshot: ClusterSnapshot, driver: str, models: FleetMigModels) -> VirtualFleet:
    known = _fleets.get(snapshot)
    if known is not None and known[0] == snapshot.version and known[1] == driver and known[2] == models:
        return known[3]
    fleet = VirtualFleet.of(_scan(snapshot, driver, models))
    _fleets[snapshot] = (snapshot.version, driver, models, fleet)
    return fleet
