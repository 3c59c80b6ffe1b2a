"""Pure decisions of prepare / unprepare: which allocation results are ours, which hardware each names, what the
CDI spec and the sharing settings are, whether a device is already held by another claim, and what the claim's
``status.devices`` becomes. No I/O: :mod:`gpudra.agent.claimpreparer` (the steps and the checkpoint),
:mod:`gpudra.agent.claimeffects` (the changes on the node) and :mod:`gpudra.agent.reservations` (who holds what) do
the reading and writing around these.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpudra.agent.cdi import (
    CONTROL_DEVICE_NODES,
    ClaimDevice,
    ContainerEdits,
    DeviceNode,
    Mount,
    build_claim_spec,
    claim_device_id,
    gpu_device_nodes,
    mig_device_nodes,
)
from gpudra.agent.checkpoint import ClaimEntry, DeviceRecord
from gpudra.agent.health import DeviceProblem
from gpudra.agent.kubeletplugin.messages import ClaimRef, PreparedDevice
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.api.nvidia import (
    TIME_SLICE_VALUES,
    AllocatedDevice,
    GpuConfig,
    MigDeviceConfig,
    MpsConfig,
    OpaqueConfig,
    SharingFeatures,
    VfioDeviceConfig,
    resolve_configs,
)
from gpudra.devices import gpu_device_name, in_pci_order, mig_device_name, passthrough_uuid, vfio_device_name
from gpudra.errors import InvalidInputError, PrepareError
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu
from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER, VFIO_DRIVER

MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
MPS_LOG_DIRECTORY = "/var/log/nvidia-mps"
READY = "Ready"
HEALTHY = "Healthy"
DeviceKey = tuple[str, str]
"""(pool, device) of an allocated device."""

# /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then per GPU 15 GPU instances of 9 minors each
# (the GI's access capability, then its compute instances 0..7).
_CAPS_FIRST = 3
_CAPS_PER_GI = 9
_CAPS_PER_GPU = 15 * _CAPS_PER_GI


def gpu_cap_minors(parent_minor: int) -> range:
    """Every nvidia-caps minor a MIG device of the GPU with this minor may have (a simulated node creates them)."""
    first = _CAPS_FIRST + parent_minor * _CAPS_PER_GPU
    return range(first, first + _CAPS_PER_GPU)


def mig_cap_minors(parent_minor: int, gi_id: int, ci_id: int) -> tuple[int, int]:
    """The nvidia-caps minors of a MIG device's GPU-instance and compute-instance access files."""
    gi_minor = _CAPS_FIRST + parent_minor * _CAPS_PER_GPU + gi_id * _CAPS_PER_GI
    return gi_minor, gi_minor + 1 + ci_id


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """The hardware behind one published device name."""

    name: str
    device_type: Literal["gpu", "mig", "vfio"]
    uuid: str
    gpu_uuid: str  # the device itself for a GPU or passthrough device, the parent for a MIG device
    device_nodes: tuple[DeviceNode, ...]
    pci_bus_id: str | None = None  # a passthrough device: the GPU prepare binds to vfio-pci


def device_targets(
    inventory: NodeInventory, dynamic: Collection[str] = (), pci_gpus: Sequence[PciGpu] = ()
) -> dict[str, DeviceTarget]:
    """Device name -> hardware, for every device the node publishes now. A GPU in dynamic MIG mode (UUID in
    ``dynamic``) is a target as a whole GPU as well as through the MIG instances that exist on it; with
    ``pci_gpus`` (passthrough on), every GPU in an IOMMU group is a ``gpu-vfio-<i>`` target whose container gets
    ``/dev/vfio/<group>``."""
    targets: dict[str, DeviceTarget] = {}
    for index, pci in enumerate(in_pci_order(pci_gpus)):
        if pci.iommu_group is None or pci.driver not in (NVIDIA_DRIVER, VFIO_DRIVER):
            continue
        name, uuid = vfio_device_name(index), passthrough_uuid(pci.pci_bus_id)
        group = (DeviceNode(path=f"/dev/vfio/{pci.iommu_group}"),)
        targets[name] = DeviceTarget(name, "vfio", uuid, uuid, group, pci.pci_bus_id)
    for gpu in inventory.gpus:
        if not gpu.mig_enabled or gpu.uuid in dynamic:
            name = gpu_device_name(gpu.minor)
            targets[name] = DeviceTarget(name, "gpu", gpu.uuid, gpu.uuid, gpu_device_nodes(gpu.minor))
            if not gpu.mig_enabled:
                continue
        for mig in gpu.mig_devices:
            name = mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.placement_start)
            nodes = mig_device_nodes(gpu.minor, *mig_cap_minors(gpu.minor, mig.gi_id, mig.ci_id))
            targets[name] = DeviceTarget(name, "mig", mig.uuid, gpu.uuid, nodes)
    return targets


def select_results(
    claim: ResourceClaim,
    ref: ClaimRef,
    *,
    driver: str,
    node: str,
    shared_pool: Callable[[str], bool] | None = None,
) -> list[DeviceRequestAllocationResult]:
    """The allocation results this node's driver must prepare; PrepareError when the claim cannot be prepared.
    Results of this node's pool are this node's, and those of a pool ``shared_pool`` says is not node-local (a
    PodGroup-scoped ComputeDomain's channel: every node where a pod sharing the claim runs prepares it)."""
    what = f"ResourceClaim {ref.namespace}/{ref.name}"
    if claim.metadata.uid != ref.uid:
        raise PrepareError(
            f"{what}: claim got replaced (the kubelet asked for UID {ref.uid}, the API has "
            f"{claim.metadata.uid})",
            reason="ClaimReplaced",
        )
    allocation = claim.status.allocation if claim.status is not None else None
    if allocation is None or allocation.devices is None:
        raise PrepareError(f"{what} is not allocated (status.allocation is missing)", reason="NotAllocated")
    results = [r for r in allocation.devices.results or [] if r.driver == driver]
    mine = [r for r in results if r.pool == node or (shared_pool is not None and shared_pool(r.pool))]
    if results and not mine:
        pools = sorted({r.pool for r in results})
        raise PrepareError(
            f"{what} is allocated devices of {driver} on {', '.join(pools)}, not on this node {node}",
            reason="WrongNode",
        )
    return mine


def _sharing_features(features: SharingFeatures | None) -> SharingFeatures:
    return features or SharingFeatures()


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """Everything prepare will do for one claim, decided before any side effect."""

    devices: tuple[DeviceRecord, ...]
    configs: dict[str, dict[str, Any]]
    cdi_document: dict[str, Any]
    gpu_uuids: dict[str, str]  # device name -> the full GPU it lives on (sharing settings apply there)
    metadata_files: Mapping[str, bytes] = field(default_factory=dict)
    """Device metadata files (KEP-5304) to write before the CDI spec that mounts them: path -> content."""
    directories: tuple[str, ...] = ()
    """Host directories the CDI spec mounts, created before it is written (an MPS claim's pipe and log
    directories: a runtime refuses a bind mount whose source is missing)."""


def plan_claim(
    uid: str,
    claim: ResourceClaim,
    results: Sequence[DeviceRequestAllocationResult],
    targets: Mapping[str, DeviceTarget],
    *,
    driver: str,
    features: SharingFeatures | None = None,
    mps_root: str = "/var/lib/kubelet/plugins/gpu.nvidia.com/mps",
    dev_root: str = "/",
    caps_major: int | None = None,
) -> ClaimPlan:
    """Map results to hardware, resolve the opaque configs, and build the CDI document (its NVIDIA device nodes
    read from under ``dev_root`` on the host, MIG capabilities numbered with ``caps_major``:
    :func:`build_claim_spec`)."""
    chosen: list[tuple[DeviceRequestAllocationResult, DeviceTarget]] = []
    for result in results:
        target = targets.get(result.device)
        if target is None:
            raise PrepareError(
                f"device {result.device} of request {result.request!r} is not on this node now "
                f"(devices: {', '.join(sorted(targets)) or 'none'})",
                reason="UnknownDevice",
            )
        chosen.append((result, target))
    allocation = claim.status.allocation if claim.status is not None else None
    configs = (allocation.devices.config if allocation and allocation.devices else None) or []
    try:
        effective = resolve_configs(
            configs,
            [AllocatedDevice(r.request, t.name, t.device_type) for r, t in chosen],
            driver=driver,
            features=_sharing_features(features),
        )
        mps_devices, mps = mps_edits(
            uid, [(t, c) for (_, t), c in zip(chosen, effective, strict=True)], mps_root
        )
    except InvalidInputError as exc:
        raise PrepareError(f"invalid opaque config: {exc}", reason="InvalidConfig") from exc
    common = _common_edits([t for _, t in chosen], effective)
    records = []
    applied: dict[str, dict[str, Any]] = {}
    for (result, target), config in zip(chosen, effective, strict=True):
        records.append(
            DeviceRecord(
                pool_name=result.pool,
                device_name=result.device,
                request_names=[result.request.split("/", 1)[0]],
                cdi_device_ids=[claim_device_id(uid, target.name)],
                share_id=result.share_id,
                uuid=target.uuid,
                device_type=target.device_type,
            )
        )
        if config is not None:
            applied[target.name] = config.to_wire()
    # MPS setup goes with the MPS devices only: the kubelet gives a container the CDI ids of the requests it names,
    # so a container of the same claim given only a time-sliced request never becomes an MPS client
    spec = build_claim_spec(
        uid,
        [
            ClaimDevice(
                t.name,
                [t.uuid] if t.device_type != "vfio" else [],  # a VM's GPU: NVIDIA_VISIBLE_DEVICES=void
                ContainerEdits(device_nodes=t.device_nodes)
                + (mps if t.name in mps_devices else ContainerEdits()),
            )
            for _, t in chosen
        ],
        common_edits=common,
        dev_root=dev_root,
        caps_major=caps_major,
    )
    return ClaimPlan(
        devices=tuple(records),
        configs=applied,
        cdi_document=spec.to_json(),
        gpu_uuids={t.name: t.gpu_uuid for _, t in chosen},
        directories=tuple(m.host_path for m in mps.mounts),
    )


def _common_edits(targets: Sequence[DeviceTarget], configs: Sequence[OpaqueConfig | None]) -> ContainerEdits:
    """What every container of the claim gets: the NVIDIA control nodes, or, for a claim of passthrough devices
    (which must not mix with container devices: the container gets no nvidia driver), the VFIO container node
    ``/dev/vfio/vfio`` when a VfioDeviceConfig asks for the API device (``iommu.enableAPIDevice``; NVIDIA's
    default is false). IOMMUFD (``PreferIommuFD``) is not offered: gpudra falls back to the legacy nodes."""
    passthrough = [t.name for t in targets if t.device_type == "vfio"]
    if not passthrough:
        return ContainerEdits(device_nodes=CONTROL_DEVICE_NODES)
    if len(passthrough) != len(targets):
        others = sorted(t.name for t in targets if t.device_type != "vfio")
        raise PrepareError(
            f"the claim mixes passthrough devices ({', '.join(passthrough)}) with devices for containers "
            f"({', '.join(others)}); use one claim for each",
            reason="InvalidConfig",
        )
    api = any(isinstance(c, VfioDeviceConfig) and c.iommu and c.iommu.enable_api_device for c in configs)
    return ContainerEdits(device_nodes=(DeviceNode(path="/dev/vfio/vfio"),) if api else ())


def mps_edits(
    uid: str, devices: Sequence[tuple[DeviceTarget, OpaqueConfig | None]], mps_root: str
) -> tuple[frozenset[str], ContainerEdits]:
    """The devices shared through MPS, and the edits each of them carries for its MPS clients: the claim's control
    daemon's pipe and log directories and the limits (the same for each: one daemon serves the claim)."""
    mps: list[tuple[DeviceTarget, MpsConfig | None]] = []
    for target, config in devices:
        if (
            isinstance(config, GpuConfig | MigDeviceConfig)
            and config.sharing
            and config.sharing.strategy == "MPS"
        ):
            mps.append((target, config.sharing.mps_config))
    if not mps:
        return frozenset(), ContainerEdits()
    percentages = {m.default_active_thread_percentage for _, m in mps if m is not None} - {None}
    if len(percentages) > 1:
        raise InvalidInputError(
            f"sharing.mpsConfig.defaultActiveThreadPercentage: the MPS configs of one claim disagree "
            f"({sorted(p for p in percentages if p is not None)}); one MPS daemon serves the claim"
        )
    limits: dict[str, str] = {}
    uuids = [t.uuid for t, _ in mps]
    for target, mps_config in mps:
        if mps_config is not None:
            # keys name a device by UUID or by its index among the claim's MPS devices
            own = mps_config.pinned_memory_limits(uuids).get(target.uuid)
            if own is not None:
                limits[target.uuid] = own
    env = [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIRECTORY}", f"CUDA_MPS_LOG_DIRECTORY={MPS_LOG_DIRECTORY}"]
    if percentages:
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percentages.pop()}")
    if limits:
        env.append(
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + ",".join(f"{u}={v}" for u, v in sorted(limits.items()))
        )
    options = ["rw", "nosuid", "nodev", "bind"]
    mounts = [
        Mount(f"{mps_root}/{uid}/pipe", MPS_PIPE_DIRECTORY, options),
        Mount(f"{mps_root}/{uid}/log", MPS_LOG_DIRECTORY, options),
    ]
    return frozenset(t.name for t, _ in mps), ContainerEdits(env=env, mounts=mounts)


@dataclass(frozen=True, slots=True)
class SharingAction:
    """A setting on one full GPU: EXCLUSIVE_PROCESS compute mode (MPS) and/or a time slice (0..3)."""

    gpu_uuid: str
    exclusive_process: bool = False
    time_slice: int | None = None


def only_its_spec(plan: ClaimPlan) -> bool:
    """Whether the plan changes nothing on the node but the claim's CDI spec: no sharing settings, device
    metadata files or directories (dynamic MIG instances and vfio bindings are recorded before the plan)."""
    return not (plan.metadata_files or plan.directories or sharing_actions(plan.devices, plan.configs))


def recorded_only_its_spec(entry: ClaimEntry) -> bool:
    """Whether a prepared claim changed nothing on the node but its CDI spec (the checkpoint's side of
    :func:`only_its_spec`): no MIG instances, vfio bindings or sharing settings recorded, and a spec that mounts
    nothing (device metadata files and an MPS claim's directories are mounted)."""
    document = entry.cdi_document
    if entry.state != "PrepareCompleted" or document is None:
        return False
    edits = [
        document.get("containerEdits") or {},
        *(d.get("containerEdits") or {} for d in document["devices"]),
    ]
    return not (
        entry.mig_instances_created
        or entry.vfio_bindings
        or any(e.get("mounts") for e in edits)
        or sharing_actions(entry.devices, entry.configs)
    )


def sharing_actions(
    devices: Sequence[DeviceRecord], configs: Mapping[str, Mapping[str, Any]]
) -> list[SharingAction]:
    """What to apply (and later undo) for a claim's full GPUs. MIG devices change nothing GPU-wide (their
    parent may serve other claims); a Default time slice is the GPU's state already and is not applied."""
    actions = []
    for device in devices:
        config = configs.get(device.device_name) or {}
        sharing = config.get("sharing") or {}
        if device.device_type != "gpu" or device.uuid is None or config.get("kind") != "GpuConfig":
            continue
        if sharing.get("strategy") == "MPS":
            actions.append(SharingAction(device.uuid, exclusive_process=True))
        elif sharing.get("strategy") == "TimeSlicing":
            interval = (sharing.get("timeSlicingConfig") or {}).get("interval") or "Default"
            if interval != "Default":
                actions.append(SharingAction(device.uuid, time_slice=TIME_SLICE_VALUES[interval]))
    return actions


def conflicts(
    uid: str,
    wanted: Iterable[DeviceKey],
    holders: Mapping[str, Iterable[DeviceKey]],
    *,
    shareable: frozenset[str] = frozenset(),
) -> list[str]:
    """Why devices cannot be prepared for ``uid``: each one already prepared (or being prepared) for another
    claim, unless the device allows multiple allocations (kubernetes #136269)."""
    problems = []
    for pool, device in wanted:
        if device in shareable:
            continue
        for other, keys in holders.items():
            if other != uid and (pool, device) in set(keys):
                problems.append(f"device {device} is already prepared for claim {other}")
    return problems


def prepared_devices(devices: Sequence[DeviceRecord]) -> list[PreparedDevice]:
    return [
        PreparedDevice(
            pool_name=d.pool_name,
            device_name=d.device_name,
            request_names=tuple(d.request_names),
            cdi_device_ids=tuple(d.cdi_device_ids),
            share_id=d.share_id,
        )
        for d in devices
    ]


def device_status(
    driver: str, pool: str, device: str, *, ready: bool, reason: str, message: str, now: str,
    share_id: str | None = None, data: Mapping[str, Any] | None = None,
    health: DeviceProblem | Literal["Healthy"] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One ``status.devices[]`` entry with its Ready condition and, when the agent watches health, a Healthy
    condition (False with the problem's reason while the device is unhealthy)."""
    conditions = [_condition(READY, ready, reason, message, now)]
    if isinstance(health, DeviceProblem):
        conditions.append(_condition(HEALTHY, False, health.reason, health.message, now))
    elif health == "Healthy":
        conditions.append(_condition(HEALTHY, True, "Healthy", "no outstanding health events", now))
    entry: dict[str, Any] = {"driver": driver, "pool": pool, "device": device, "conditions": conditions}
    if share_id:
        entry["shareID"] = share_id
    if data:
        entry["data"] = dict(data)
    return entry


def _condition(type_: str, status: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now,
    }


def merge_device_statuses(
    existing: Sequence[Mapping[str, Any]], *, driver: str, pool: str, ours: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``status.devices`` with this node's entries of ``driver`` replaced by ``ours``, others' kept in order.
    A condition whose status did not change keeps its lastTransitionTime."""
    previous = {
        (e.get("device"), e.get("shareID")): e
        for e in existing
        if e.get("driver") == driver and e.get("pool") == pool
    }
    merged = [dict(e) for e in existing if not (e.get("driver") == driver and e.get("pool") == pool)]
    for entry in ours:
        new = dict(entry)
        old = previous.get((entry.get("device"), entry.get("shareID")))
        old_conditions = {c.get("type"): c for c in (old or {}).get("conditions") or []}
        conditions = []
        for condition in new["conditions"]:
            before = old_conditions.get(condition["type"])
            if before is not None and before.get("status") == condition["status"]:
                condition = dict(condition, lastTransitionTime=before.get("lastTransitionTime"))
            conditions.append(condition)
        new["conditions"] = conditions
        merged.append(new)
    return merged
