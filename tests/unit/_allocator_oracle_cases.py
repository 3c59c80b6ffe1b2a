"""Table cases for the divergences the differential test (tests/differential) found between gpudra's allocator and
Kubernetes' own; each expectation is what k8s.io/dynamic-resource-allocation v0.37.2 answered (hack/oracle).
They run with gpudra's real CEL, so selectors fail at runtime exactly where Kubernetes' do."""

from __future__ import annotations

from _allocator_kit import (
    DRIVER,
    Case,
    claim,
    counter_set,
    first_available,
    gpu,
    gpus,
    match,
    mig,
    req,
    slice_,
    sub,
)

from gpudra.api.dra import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    Device,
    DeviceCapacity,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from gpudra.api.meta import ObjectMeta

MODEL_1 = 'device.attributes["gpu.nvidia.com"].model == 1'
ONLY_GPU_2 = 'device.attributes["gpu.nvidia.com"].uuid == "GPU-gpu-2"'
PARENT_0 = 'device.attributes["gpu.nvidia.com"].parentUUID == "GPU-gpu-0"'
GROUP = "gpu.nvidia.com/group"
STEP = CapacityRequestPolicy(default="10Gi", valid_range=CapacityRequestPolicyRange(min="10Gi", step="10Gi"))


def per_device(devices: list[tuple[Device, str]]) -> ResourceSlice:
    """A perDeviceNodeSelection slice: each device with the node it belongs to."""
    placed = [d.model_copy(update={"node_name": node}) for d, node in devices]
    return ResourceSlice(
        metadata=ObjectMeta(name="per-device"),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            pool=ResourcePool(name="spread", generation=1, resource_slice_count=1),
            per_device_node_selection=True,
            devices=placed,
        ),
    )


def overdrawn() -> list[ResourceSlice]:
    """Two counter sets (1.35 layout); the allocated gpu-1 MIG devices consume 2 of gpu-1's 1 memory slice."""
    counters = [
        counter_set("gpu-0-counter-set", memory_slices=4),
        counter_set("gpu-1-counter-set", memory_slices=1),
    ]
    devices = [
        mig("gpu-0-mig-0", "gpu-0", "1g.5gb", memory_slices=1),
        mig("gpu-1-mig-0", "gpu-1", "1g.5gb", memory_slices=1),
        mig("gpu-1-mig-1", "gpu-1", "1g.5gb", memory_slices=1),
    ]
    return [
        slice_("n1", [], counters=counters, count=2, name="n1-counters"),
        slice_("n1", devices, count=2, name="n1-devices"),
    ]


def shared_gpu() -> ResourceSlice:
    return slice_(
        "n1",
        [gpu("gpu-0", multi=True, capacity={"memory": DeviceCapacity(value="80Gi", request_policy=STEP)})],
    )


ORACLE_CASES = [
    Case(
        "cel-lazy-done-before-error",
        "a selector failing at runtime on a later device does not matter: Kubernetes evaluates selectors lazily, "
        "device by device in its order, and stops at the first solution",
        [slice_("n1", [gpu("gpu-0", model=1), gpu("gpu-1")])],
        [claim("c", req("gpu", "gpu.nvidia.com", MODEL_1))],
        ["gpu:gpu-0"],
        real_cel=True,
    ),
    Case(
        "cel-lazy-error-reached",
        "the search reaches the device the selector fails on: the allocation fails with the CEL error",
        [slice_("n1", [gpu("gpu-0", model=2), gpu("gpu-1"), gpu("gpu-2", model=1)])],
        [claim("c", req("gpu", "gpu.nvidia.com", MODEL_1))],
        "!InvalidSelector",
        real_cel=True,
    ),
    Case(
        "cel-lazy-in-use-skipped",
        "devices in use are skipped before any selector is evaluated on them",
        [slice_("n1", [gpu("gpu-0"), gpu("gpu-1", model=1)])],
        [claim("c", req("gpu", "gpu.nvidia.com", MODEL_1))],
        ["gpu:gpu-1"],
        allocated=["gpu-0"],
        real_cel=True,
    ),
    Case(
        "cel-all-mode-eager",
        "an All request (here a firstAvailable alternative) evaluates its selectors on every device before the "
        "search: a runtime error fails the allocation, the next alternative is not tried",
        [slice_("n1", [gpu("gpu-0", model=1), gpu("gpu-1")])],
        [claim("c", first_available("g", sub("every", "gpu.nvidia.com", MODEL_1, mode="All"), sub("one")))],
        "!InvalidSelector",
        real_cel=True,
    ),
    Case(
        "cel-per-device-other-node",
        "in a perDeviceNodeSelection slice Kubernetes evaluates selectors before it checks the device's node, "
        "so a runtime error on another node's device counts",
        [per_device([(gpu("gpu-0"), "n2"), (gpu("gpu-1", model=1), "n1")])],
        [claim("c", req("gpu", "gpu.nvidia.com", MODEL_1))],
        "!InvalidSelector",
        real_cel=True,
    ),
    Case(
        "all-mode-incomplete-first-available",
        "an All alternative of firstAvailable with an incomplete pool on the node fails the whole allocation",
        [gpus("n1", 2), slice_("n1", [gpu("x-0")], pool="other", count=2)],
        [claim("c", first_available("g", sub("every", mode="All"), sub("one")))],
        "!PoolIncomplete",
        real_cel=True,
    ),
    Case(
        "all-mode-incomplete-empty-slices",
        "slices without devices count for completeness: two of three announced slices, both empty, make the pool "
        "incomplete and fail an All request",
        [
            gpus("n1", 2),
            slice_("n1", [], pool="other", count=3, name="other-a"),
            slice_("n1", [], pool="other", count=3, name="other-b"),
        ],
        [claim("c", req(mode="All"))],
        "!PoolIncomplete",
        real_cel=True,
    ),
    Case(
        "all-mode-constraint-aborts",
        "a device of an All request breaking a constraint stops the allocation; Kubernetes does not try another "
        "device for the earlier request (gpu-1 would have fit)",
        [slice_("n1", [gpu("gpu-0", group=0), gpu("gpu-1", group=1), gpu("gpu-2", group=1)])],
        [
            claim(
                "c", req("a"), req("b", "gpu.nvidia.com", ONLY_GPU_2, mode="All"), constraints=[match(GROUP)]
            )
        ],
        "!ConstraintConflict",
        real_cel=True,
    ),
    Case(
        "all-mode-constraint-missing-attribute",
        "an All request under a matchAttribute its devices lack fails (gpudra crashed with a KeyError here)",
        [gpus("n1", 2)],
        [claim("c", req(mode="All"), constraints=[match("gpu.nvidia.com/parentUUID")])],
        "!ConstraintConflict",
        real_cel=True,
    ),
    Case(
        "all-mode-capacity-left-out",
        "an All request leaves out devices whose capacity can never hold its capacity request",
        [slice_("n1", [gpu("gpu-0", memory="40Gi"), gpu("gpu-1", memory="80Gi")])],
        [claim("c", req(mode="All", capacity={"memory": "60Gi"}))],
        ["gpu:gpu-1"],
        real_cel=True,
    ),
    Case(
        "multi-device-once-per-request",
        "a request's devices are distinct, multi-allocatable ones too: two shares of one device need two requests",
        [shared_gpu()],
        [claim("c", req(count=2, capacity={"memory": "10Gi"}))],
        "!InsufficientDevices",
        real_cel=True,
    ),
    Case(
        "capacity-name-exact",
        "a capacity request names the capacity exactly: gpu.nvidia.com/memory is not the device's memory",
        [shared_gpu()],
        [claim("c", req(capacity={"gpu.nvidia.com/memory": "10Gi"}))],
        "!InsufficientCapacity",
        real_cel=True,
    ),
    Case(
        "pool-over-counted",
        "a pool with more slices than resourceSliceCount is incomplete",
        [
            slice_("n1", [gpu("gpu-0")], count=1, name="n1-a"),
            slice_("n1", [gpu("gpu-1")], count=1, name="n1-b"),
        ],
        [claim("c", req())],
        "!PoolIncomplete",
        real_cel=True,
    ),
    Case(
        "pool-complete-from-the-node",
        "completeness counts the slices that reach the node: one of two slices announcing 1 is complete for n1",
        [
            slice_("n1", [gpu("gpu-0")], pool="shared", count=1, name="shared-a"),
            slice_("n2", [gpu("gpu-9")], pool="shared", count=1, name="shared-b"),
        ],
        [claim("c", req())],
        ["gpu:gpu-0"],
        real_cel=True,
    ),
    Case(
        "pool-older-generation-from-the-node",
        "a node whose slices of a pool are all of an older, complete generation allocates from it",
        [
            slice_("n1", [gpu("gpu-0")], pool="shared", generation=1, count=1, name="shared-a"),
            slice_("n2", [gpu("gpu-9")], pool="shared", generation=2, count=1, name="shared-b"),
        ],
        [claim("c", req())],
        ["gpu:gpu-0"],
        real_cel=True,
    ),
    Case(
        "pool-invalid-from-another-node",
        "a pool complete only with other nodes' slices is invalid when a device there consumes an unknown "
        "counter set, though the node never sees that device",
        [
            slice_(
                "n1",
                [mig("gpu-0-mig-0", "gpu-0", "1g.5gb", memory_slices=1)],
                pool="shared",
                count=3,
                name="s-a",
            ),
            slice_(
                "n2",
                [mig("gpu-9-mig-0", "gpu-9", "1g.5gb", memory_slices=1)],
                pool="shared",
                count=3,
                name="s-b",
            ),
            slice_(
                "n1",
                [],
                pool="shared",
                count=3,
                name="s-counters",
                counters=[counter_set("gpu-0-counter-set", memory_slices=4)],
            ),
        ],
        [claim("c", req("m", "mig.nvidia.com"))],
        "!PoolInvalid",
        real_cel=True,
    ),
    Case(
        "counters-overdrawn",
        "a pool whose counters allocated devices overdraw (gpu-1's) takes no counter-consuming device, even one "
        "consuming other counters (gpu-0's)",
        overdrawn(),
        [claim("c", req("m", "mig.nvidia.com", PARENT_0))],
        "!CounterExhausted",
        allocated=["gpu-1-mig-0", "gpu-1-mig-1"],
        real_cel=True,
    ),
]
