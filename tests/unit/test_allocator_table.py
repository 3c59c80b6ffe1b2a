"""Table of allocator cases; each states the Kubernetes behaviour it mirrors."""

from __future__ import annotations

import pytest
from _allocator_kit import (
    CLASSES,
    DRIVER,
    Case,
    claim,
    counter_set,
    device_class,
    distinct,
    first_available,
    gpu,
    gpus,
    make_allocator,
    match,
    mig,
    req,
    slice_,
    sub,
)
from _allocator_oracle_cases import ORACLE_CASES

from gpudra.allocator import Allocation, DeviceId, Failure, NodeInfo
from gpudra.allocator import snapshot as snapshot_module
from gpudra.api.dra import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    DeviceCapacity,
    DeviceClaimConfiguration,
    DeviceCounterConsumption,
    DeviceTaint,
    DeviceToleration,
    OpaqueDeviceConfiguration,
    ResourceSlice,
)

H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
A100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB"'
NOPE = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B300"'
PARENT = "gpu.nvidia.com/parentUUID"
FOUR_G = 'device.attributes["gpu.nvidia.com"].profile == "4g.20gb"'
THREE_G = 'device.attributes["gpu.nvidia.com"].profile == "3g.20gb"'


def mig_slices(node: str = "n1", used_slices: int = 7) -> list[ResourceSlice]:
    """Two A100s with static MIG devices: 1g x3 + 2g on gpu-0, 3g + 2g on gpu-1."""
    return [
        slice_(
            node,
            [
                mig("gpu-0-mig-1g5gb-0", "gpu-0", "1g.5gb"),
                mig("gpu-0-mig-1g5gb-1", "gpu-0", "1g.5gb"),
                mig("gpu-0-mig-1g5gb-2", "gpu-0", "1g.5gb"),
                mig("gpu-0-mig-2g10gb-4", "gpu-0", "2g.10gb"),
                mig("gpu-1-mig-3g20gb-0", "gpu-1", "3g.20gb"),
                mig("gpu-1-mig-2g10gb-4", "gpu-1", "2g.10gb"),
            ],
        )
    ]


def partitionable(layout: str) -> list[ResourceSlice]:
    """One A100 with 7 memory slices as counters; 1g devices use 1 slice, the 4g uses 4."""
    cs = [counter_set("gpu-0-counter-set", memory_slices=7)]
    devices = [mig(f"gpu-0-mig-1g-{i}", "gpu-0", "1g.5gb", memory_slices=1) for i in range(7)] + [
        mig("gpu-0-mig-4g-0", "gpu-0", "4g.20gb", memory_slices=4)
    ]
    if layout == "1.34":
        return [slice_("n1", devices, counters=cs)]
    return [
        slice_("n1", [], counters=cs, count=2, name="n1-counters"),
        slice_("n1", devices, count=2, name="n1-devices"),
    ]


def shared_gpu(policy: CapacityRequestPolicy | None = None) -> ResourceSlice:
    cap = {"memory": DeviceCapacity(value="80Gi", request_policy=policy)}
    return slice_("n1", [gpu("gpu-0", multi=True, capacity=cap)])


STEP = CapacityRequestPolicy(default="10Gi", valid_range=CapacityRequestPolicyRange(min="10Gi", step="10Gi"))
TAINT = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect="NoSchedule")
CFG = OpaqueDeviceConfiguration(driver=DRIVER, parameters={"kind": "GpuConfig"})

CASES = [
    Case(
        "exact-default-count",
        "ExactCount with no count allocates one device, the first in slice order",
        [gpus("n1", 4)],
        [claim("c", req())],
        ["gpu:gpu-0"],
    ),
    Case(
        "exact-count-3",
        "ExactCount count=3 takes the first three devices",
        [gpus("n1", 4)],
        [claim("c", req(count=3))],
        ["gpu:gpu-0", "gpu:gpu-1", "gpu:gpu-2"],
    ),
    Case(
        "exact-too-many",
        "asking for more devices than exist fails",
        [gpus("n1", 4)],
        [claim("c", req(count=5))],
        "!InsufficientDevices",
    ),
    Case(
        "skips-allocated",
        "devices in the allocated set are skipped",
        [gpus("n1", 4)],
        [claim("c", req(count=2))],
        ["gpu:gpu-2", "gpu:gpu-3"],
        allocated=["gpu-0", "gpu-1"],
    ),
    Case(
        "all-in-use",
        "no free device: allocation fails",
        [gpus("n1", 2)],
        [claim("c", req())],
        "!DevicesInUse",
        allocated=["gpu-0", "gpu-1"],
    ),
    Case(
        "all-mode",
        "allocationMode All takes every matching device of the node",
        [gpus("n1", 3)],
        [claim("c", req(mode="All"))],
        ["gpu:gpu-0", "gpu:gpu-1", "gpu:gpu-2"],
    ),
    Case(
        "all-mode-one-busy",
        "All fails when one matching device is already allocated",
        [gpus("n1", 3)],
        [claim("c", req(mode="All"))],
        "!DevicesInUse",
        allocated=["gpu-1"],
    ),
    Case(
        "all-mode-zero",
        "All fails when nothing matches",
        [gpus("n1", 3)],
        [claim("c", req("gpu", "gpu.nvidia.com", NOPE, mode="All"))],
        "!NoMatchingDevice",
    ),
    Case(
        "all-mode-incomplete",
        "All fails while any pool of the node is incomplete",
        [gpus("n1", 2), slice_("n1", [gpu("x-0")], pool="other", count=2)],
        [claim("c", req(mode="All"))],
        "!PoolIncomplete",
    ),
    Case(
        "class-selector",
        "class selectors filter devices (mig class never sees full GPUs)",
        [slice_("n1", [gpu("gpu-0"), mig("gpu-1-mig-0", "gpu-1", "1g.5gb")])],
        [claim("c", req("m", "mig.nvidia.com"))],
        ["m:gpu-1-mig-0"],
    ),
    Case(
        "request-selector",
        "request selectors filter after the class",
        [slice_("n1", [gpu("gpu-0", "NVIDIA A100-SXM4-40GB"), gpu("gpu-1")])],
        [claim("c", req("gpu", "gpu.nvidia.com", H100))],
        ["gpu:gpu-1"],
    ),
    Case(
        "selector-none",
        "no device matches: unsatisfiable on this node",
        [gpus("n1", 2)],
        [claim("c", req("gpu", "gpu.nvidia.com", NOPE))],
        "!NoMatchingDevice",
    ),
    Case(
        "capacity-selector",
        "selectors can test capacity",
        [slice_("n1", [gpu("gpu-0", memory="40Gi"), gpu("gpu-1", memory="80Gi")])],
        [claim("c", req("gpu", "gpu.nvidia.com", 'device.capacity["gpu.nvidia.com"].memory >= 64Gi'))],
        ["gpu:gpu-1"],
    ),
    Case(
        "two-requests",
        "requests are served in order, each from the remaining devices",
        [gpus("n1", 3)],
        [claim("c", req("a"), req("b", count=2))],
        ["a:gpu-0", "b:gpu-1", "b:gpu-2"],
    ),
    Case(
        "two-claims",
        "a pod's claims are allocated together and never share a device",
        [gpus("n1", 2)],
        [claim("c1", req()), claim("c2", req())],
        ["gpu:gpu-0", "gpu:gpu-1"],
    ),
    Case(
        "two-claims-short",
        "all claims of the pod or none",
        [gpus("n1", 1)],
        [claim("c1", req()), claim("c2", req())],
        "!InsufficientDevices",
    ),
    Case(
        "match-attribute",
        "matchAttribute parentUUID keeps MIG devices on one GPU (backtracks past gpu-0)",
        mig_slices(),
        [
            claim(
                "c",
                req("a", "mig.nvidia.com", count=2),
                req("b", "mig.nvidia.com"),
                constraints=[match(PARENT)],
            )
        ],
        ["a:gpu-0-mig-1g5gb-0", "a:gpu-0-mig-1g5gb-1", "b:gpu-0-mig-1g5gb-2"],
    ),
    Case(
        "match-attribute-backtrack",
        "the first device alone does not decide the constraint value",
        mig_slices(),
        [
            claim(
                "c",
                req("a", "mig.nvidia.com"),
                req("b", "mig.nvidia.com", THREE_G),
                constraints=[match(PARENT)],
            )
        ],
        ["a:gpu-1-mig-2g10gb-4", "b:gpu-1-mig-3g20gb-0"],
    ),
    Case(
        "match-attribute-impossible",
        "no GPU has 5 MIG devices: constraint conflict",
        mig_slices(),
        [claim("c", req("a", "mig.nvidia.com", count=5), constraints=[match(PARENT)])],
        "!ConstraintConflict",
    ),
    Case(
        "match-attribute-missing",
        "a device lacking the attribute never satisfies matchAttribute",
        [gpus("n1", 2)],
        [claim("c", req(count=2), constraints=[match(PARENT)])],
        "!ConstraintConflict",
    ),
    Case(
        "match-scoped",
        "a constraint naming requests leaves the others free",
        mig_slices(),
        [
            claim(
                "c",
                req("a", "mig.nvidia.com", count=2),
                req("b", "mig.nvidia.com"),
                constraints=[match(PARENT, "a")],
            )
        ],
        ["a:gpu-0-mig-1g5gb-0", "a:gpu-0-mig-1g5gb-1", "b:gpu-0-mig-1g5gb-2"],
    ),
    Case(
        "distinct-attribute",
        "distinctAttribute picks devices with different values",
        mig_slices(),
        [claim("c", req("a", "mig.nvidia.com", count=2), constraints=[distinct(PARENT)])],
        ["a:gpu-0-mig-1g5gb-0", "a:gpu-1-mig-3g20gb-0"],
    ),
    Case(
        "first-available-first",
        "firstAvailable uses the first subrequest that fits, named req/sub",
        [gpus("n1", 2)],
        [claim("c", first_available("g", sub("big", count=2), sub("small")))],
        ["g/big:gpu-0", "g/big:gpu-1"],
    ),
    Case(
        "first-available-fallback",
        "firstAvailable falls back to the next subrequest",
        [gpus("n1", 2)],
        [claim("c", first_available("g", sub("big", count=4), sub("small", count=1)))],
        ["g/small:gpu-0"],
    ),
    Case(
        "first-available-selector",
        "subrequests carry their own class and selectors",
        mig_slices(),
        [claim("c", first_available("g", sub("full"), sub("part", "mig.nvidia.com")))],
        ["g/part:gpu-0-mig-1g5gb-0"],
    ),
    Case(
        "first-available-none",
        "firstAvailable fails when no subrequest fits",
        [gpus("n1", 1)],
        [claim("c", first_available("g", sub("a", count=2), sub("b", count=3)))],
        "!InsufficientDevices",
    ),
    Case(
        "first-available-constraint",
        "a later request's constraint forces a lower-ranked subrequest",
        mig_slices(),
        [
            claim(
                "c",
                first_available(
                    "g", sub("two", "mig.nvidia.com", count=4), sub("one", "mig.nvidia.com", count=2)
                ),
                req("b", "mig.nvidia.com"),
                constraints=[match(PARENT)],
            )
        ],
        ["g/one:gpu-0-mig-1g5gb-0", "g/one:gpu-0-mig-1g5gb-1", "b:gpu-0-mig-1g5gb-2"],
    ),
    Case(
        "generation",
        "only the highest pool generation counts",
        [
            slice_("n1", [gpu("old-0")], pool="n1", generation=1),
            slice_("n1", [gpu("new-0")], pool="n1", generation=2),
        ],
        [claim("c", req())],
        ["gpu:new-0"],
    ),
    Case(
        "incomplete-pool",
        "devices of an incomplete pool are not allocated from",
        [slice_("n1", [gpu("gpu-0")], count=2)],
        [claim("c", req())],
        "!PoolIncomplete",
    ),
    Case(
        "pool-order",
        "pools are tried sorted by name",
        [slice_("n1", [gpu("b-0")], pool="pool-b"), slice_("n1", [gpu("a-0")], pool="pool-a")],
        [claim("c", req())],
        ["gpu:a-0"],
    ),
    Case(
        "slice-order",
        "slices of a pool are tried sorted by name",
        [slice_("n1", [gpu("d-1")], count=2, name="s-2"), slice_("n1", [gpu("d-0")], count=2, name="s-1")],
        [claim("c", req())],
        ["gpu:d-0"],
    ),
    Case(
        "invalid-duplicate",
        "a pool with duplicate device names is skipped",
        [
            slice_("n1", [gpu("gpu-0")], count=2, name="s-1"),
            slice_("n1", [gpu("gpu-0")], count=2, name="s-2"),
        ],
        [claim("c", req())],
        "!PoolInvalid",
    ),
    Case(
        "invalid-unknown-counter",
        "a pool whose devices consume unknown counter sets is skipped",
        [slice_("n1", [mig("m-0", "gpu-9", "1g.5gb", memory_slices=1)])],
        [claim("c", req("m", "mig.nvidia.com"))],
        "!PoolInvalid",
    ),
    Case(
        "other-node",
        "a node never sees another node's slices",
        [gpus("n2", 2)],
        [claim("c", req())],
        "!NoMatchingDevice",
    ),
    Case(
        "all-nodes",
        "allNodes slices are reachable from every node",
        [slice_(None, [gpu("net-0")], all_nodes=True)],
        [claim("c", req())],
        ["gpu:net-0"],
    ),
    Case(
        "node-selector",
        "nodeSelector slices are reachable from matching nodes only",
        [
            slice_(
                None,
                [gpu("rack-0")],
                node_selector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                    ]
                },
            )
        ],
        [claim("c", req())],
        ["gpu:rack-0"],
        labels={"rack": "r1"},
    ),
    Case(
        "node-selector-miss",
        "nodeSelector slices are invisible from other nodes",
        [
            slice_(
                None,
                [gpu("rack-0")],
                node_selector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                    ]
                },
            )
        ],
        [claim("c", req())],
        "!NoMatchingDevice",
        labels={"rack": "r2"},
    ),
    Case(
        "admin-ignores-allocated",
        "adminAccess may use devices that are allocated",
        [gpus("n1", 1)],
        [claim("c", req(admin=True), namespace="ops")],
        ["gpu:gpu-0"],
        allocated=["gpu-0"],
    ),
    Case(
        "admin-denied",
        "adminAccess needs the namespace label resource.kubernetes.io/admin-access=true",
        [gpus("n1", 1)],
        [claim("c", req(admin=True), namespace="dev")],
        "!AdminAccessDenied",
    ),
    Case(
        "taint-blocks",
        "NoSchedule taints block untolerating requests",
        [slice_("n1", [gpu("gpu-0", taints=[TAINT])])],
        [claim("c", req())],
        "!Tainted",
    ),
    Case(
        "taint-skip",
        "tainted devices are skipped in favour of clean ones",
        [slice_("n1", [gpu("gpu-0", taints=[TAINT]), gpu("gpu-1")])],
        [claim("c", req())],
        ["gpu:gpu-1"],
    ),
    Case(
        "taint-exists",
        "an Exists toleration with matching key tolerates the taint",
        [slice_("n1", [gpu("gpu-0", taints=[TAINT])])],
        [claim("c", req(tolerations=[DeviceToleration(key="gpu.nvidia.com/xid", operator="Exists")]))],
        ["gpu:gpu-0"],
    ),
    Case(
        "taint-equal-wrong",
        "an Equal toleration with another value does not tolerate",
        [slice_("n1", [gpu("gpu-0", taints=[TAINT])])],
        [claim("c", req(tolerations=[DeviceToleration(key="gpu.nvidia.com/xid", value="48")]))],
        "!Tainted",
    ),
    Case(
        "taint-effect-mismatch",
        "a toleration for NoExecute does not tolerate NoSchedule",
        [slice_("n1", [gpu("gpu-0", taints=[TAINT])])],
        [claim("c", req(tolerations=[DeviceToleration(operator="Exists", effect="NoExecute")]))],
        "!Tainted",
    ),
    Case(
        "taint-none",
        "effect None taints are informational",
        [slice_("n1", [gpu("gpu-0", taints=[DeviceTaint(key="gpu.nvidia.com/unmonitored", effect="None")])])],
        [claim("c", req())],
        ["gpu:gpu-0"],
    ),
    Case(
        "counters-1.34",
        "partitionable devices share counters (1.34: counters in the device slice)",
        partitionable("1.34"),
        [claim("c", req("m", "mig.nvidia.com", count=4))],
        ["m:gpu-0-mig-1g-0", "m:gpu-0-mig-1g-1", "m:gpu-0-mig-1g-2", "m:gpu-0-mig-1g-3"],
    ),
    Case(
        "counters-1.35",
        "1.35 layout: a counters-only slice in the same pool",
        partitionable("1.35"),
        [claim("c", req("m", "mig.nvidia.com", FOUR_G), req("n", "mig.nvidia.com", count=3))],
        ["m:gpu-0-mig-4g-0", "n:gpu-0-mig-1g-0", "n:gpu-0-mig-1g-1", "n:gpu-0-mig-1g-2"],
    ),
    Case(
        "counters-exhausted-in-claim",
        "counters consumed within the attempt count (4g + 4x1g > 7 slices)",
        partitionable("1.34"),
        [claim("c", req("m", "mig.nvidia.com", FOUR_G), req("n", "mig.nvidia.com", count=4))],
        "!CounterExhausted",
    ),
    Case(
        "counters-exhausted-allocated",
        "counters consumed by allocated devices are gone",
        partitionable("1.35"),
        [claim("c", req("m", "mig.nvidia.com", FOUR_G))],
        "!CounterExhausted",
        allocated=["gpu-0-mig-1g-0", "gpu-0-mig-1g-1", "gpu-0-mig-1g-2", "gpu-0-mig-1g-3"],
    ),
    Case(
        "consumable-share",
        "a multi-allocatable device gives a share with consumedCapacity and a shareID",
        [shared_gpu(STEP)],
        [claim("c", req(capacity={"memory": "15Gi"}))],
        ["gpu:gpu-0#share-1:memory=20Gi"],
    ),
    Case(
        "consumable-two-shares",
        "one device can serve two requests within its capacity",
        [shared_gpu(STEP)],
        [claim("c", req("a", capacity={"memory": "40Gi"}), req("b", capacity={"memory": "40Gi"}))],
        ["a:gpu-0#share-1:memory=40Gi", "b:gpu-0#share-2:memory=40Gi"],
    ),
    Case(
        "consumable-over",
        "requests beyond the remaining capacity fail",
        [shared_gpu(STEP)],
        [claim("c", req("a", capacity={"memory": "50Gi"}), req("b", capacity={"memory": "40Gi"}))],
        "!InsufficientCapacity",
    ),
    Case(
        "consumable-default",
        "no request consumes the policy default",
        [shared_gpu(STEP)],
        [claim("c", req())],
        ["gpu:gpu-0#share-1:memory=10Gi"],
    ),
    Case(
        "consumable-no-policy",
        "no policy and no request consume the whole capacity",
        [shared_gpu(None)],
        [claim("c", req("a"), req("b"))],
        "!InsufficientCapacity",
    ),
    Case(
        "class-missing",
        "a request naming an unknown DeviceClass is an error",
        [gpus("n1", 1)],
        [claim("c", req("gpu", "nope.nvidia.com"))],
        "!ClassNotFound",
    ),
    Case(
        "cel-compile",
        "a selector that does not compile is reported, not crashed on",
        [gpus("n1", 1)],
        [claim("c", req("gpu", "gpu.nvidia.com", "bad("))],
        "!InvalidSelector",
    ),
    Case(
        "cel-runtime",
        "a CEL runtime error is an error for that node",
        [gpus("n1", 1)],
        [claim("c", req("gpu", "gpu.nvidia.com", "boom"))],
        "!InvalidSelector",
    ),
]


CASES += ORACLE_CASES


def run(case: Case) -> Allocation | Failure:
    allocator = make_allocator(
        case.slices,
        namespace_labels={"ops": {"resource.kubernetes.io/admin-access": "true"}},
        real_cel=case.real_cel,
    )
    for name in case.allocated:
        pool = next(s.spec.pool.name for s in case.slices for d in s.spec.devices or () if d.name == name)
        allocator.snapshot.allocate_device(DeviceId(DRIVER, pool, name))
    return allocator.allocate(NodeInfo(case.node, case.labels), case.claims)


def summary(outcome: Allocation) -> list[str]:
    out = []
    for c in outcome.claims:
        assert c.result.devices is not None
        for r in c.result.devices.results or []:
            text = f"{r.request}:{r.device}"
            if r.share_id:
                text += f"#{r.share_id}:" + ",".join(
                    f"{k}={v}" for k, v in (r.consumed_capacity or {}).items()
                )
            out.append(text)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    outcome = run(case)
    if isinstance(case.expect, str):
        assert isinstance(outcome, Failure), f"{case.mirrors}: expected failure, got {outcome}"
        assert outcome.reason == case.expect[1:], f"{case.mirrors}: {outcome}"
    else:
        assert isinstance(outcome, Allocation), f"{case.mirrors}: {outcome}"
        assert summary(outcome) == case.expect, case.mirrors


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) >= 40 + len(ORACLE_CASES)


# ---------------------------------------------------------------- result shape


def test_result_matches_kubernetes_status_shape() -> None:
    """Kubernetes writes results, FromClass configs (requests emptied when they cover every request),
    FromClaim
    configs, and a nodeSelector pinning node-local devices to the node."""
    (selector,) = CLASSES[0].spec.selectors or []
    assert selector.cel is not None
    classes = [device_class("gpu.nvidia.com", selector.cel.expression, {"sharing": "x"})]
    allocator = make_allocator([gpus("n1", 2)], classes)
    c = claim(
        "c",
        req("a"),
        req("b"),
        config=[DeviceClaimConfiguration(requests=["b"], opaque=CFG), DeviceClaimConfiguration(opaque=CFG)],
    )
    outcome = allocator.allocate("n1", [c])
    assert isinstance(outcome, Allocation)
    wire = outcome.claims[0].result.to_wire()
    assert wire["devices"]["results"] == [
        {"request": "a", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},
        {"request": "b", "driver": DRIVER, "pool": "n1", "device": "gpu-1"},
    ]
    sources = [(c["source"], c.get("requests")) for c in wire["devices"]["config"]]
    assert sources == [("FromClass", None), ("FromClaim", ["b"]), ("FromClaim", None)]
    assert wire["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }


def test_all_nodes_slice_gives_no_node_selector_and_node_selector_slice_copies_it() -> None:
    """Devices usable everywhere need no nodeSelector; nodeSelector slices pass their selector on."""
    term = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    allocator = make_allocator(
        [
            slice_(None, [gpu("a-0")], pool="a", all_nodes=True),
            slice_(None, [gpu("b-0")], pool="b", node_selector={"nodeSelectorTerms": [term]}),
        ]
    )
    outcome = allocator.allocate(NodeInfo("n1", {"rack": "r1"}), [claim("c", req(count=2))])
    assert isinstance(outcome, Allocation)
    assert outcome.claims[0].result.to_wire()["nodeSelector"] == {"nodeSelectorTerms": [term]}
    outcome = allocator.allocate(NodeInfo("n1", {"rack": "r1"}), [claim("c", req())])
    assert isinstance(outcome, Allocation)
    assert outcome.claims[0].result.node_selector is None


def test_admin_result_and_tolerations_are_recorded() -> None:
    """adminAccess and the request's tolerations are copied into each result."""
    tol = [DeviceToleration(key="gpu.nvidia.com/xid", operator="Exists")]
    allocator = make_allocator(
        [slice_("n1", [gpu("gpu-0", taints=[TAINT])])],
        namespace_labels={"ops": {"resource.kubernetes.io/admin-access": "true"}},
    )
    outcome = allocator.allocate("n1", [claim("c", req(admin=True, tolerations=tol), namespace="ops")])
    assert isinstance(outcome, Allocation)
    result = outcome.claims[0].result.to_wire()["devices"]["results"][0]
    assert result["adminAccess"] is True
    assert result["tolerations"] == [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]


def test_commit_and_free_round_trip() -> None:
    """Committed allocations make devices busy for the next pod; freeing them makes them usable again."""
    allocator = make_allocator([gpus("n1", 1)])
    first = allocator.allocate("n1", [claim("c1", req())])
    assert isinstance(first, Allocation)
    allocator.commit(first)
    assert isinstance(allocator.allocate("n1", [claim("c2", req())]), Failure)
    allocator.snapshot.mark_free(first.claims[0].result)
    assert isinstance(allocator.allocate("n1", [claim("c2", req())]), Allocation)


def test_shares_commit_and_counters_charged_once() -> None:
    """Shares of a multi-allocatable device add up across pods; counters are charged on the first share."""
    cap = {"memory": DeviceCapacity(value="80Gi", request_policy=STEP)}
    cs = [counter_set("gpu-0-counter-set", memory_slices=8)]
    consumes = [
        DeviceCounterConsumption(counter_set="gpu-0-counter-set", counters={"memory-slices": {"value": "8"}})
    ]
    allocator = make_allocator(
        [slice_("n1", [gpu("gpu-0", multi=True, capacity=cap, consumes=consumes)], counters=cs)]
    )
    for i in range(8):
        outcome = allocator.allocate("n1", [claim(f"c{i}", req(capacity={"memory": "10Gi"}))])
        assert isinstance(outcome, Allocation), (i, outcome)
        allocator.commit(outcome)
    assert isinstance(allocator.allocate("n1", [claim("c9", req(capacity={"memory": "10Gi"}))]), Failure)


def test_find_node_takes_the_first_node_that_fits_in_order() -> None:
    """The stand-in scheduler tries nodes in a deterministic order."""
    allocator = make_allocator([gpus("n1", 1), gpus("n2", 2), gpus("n3", 2)])
    outcome = allocator.find_node([claim("c", req(count=2))])
    assert isinstance(outcome, Allocation)
    assert outcome.node == "n2"


def test_a_long_running_scheduler_keeps_a_bounded_log_of_frees_and_still_finds_freed_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every free is logged so that remembered first-fit positions can resume; a scheduler frees devices for as
    long as it runs, so the log keeps only its newest entries, and a scan remembered before the dropped ones
    looks at every node again rather than missing a device they gave back."""
    monkeypatch.setattr(snapshot_module, "FREED_KEPT", 4)
    allocator = make_allocator([gpus(f"n{i}", 2) for i in range(4)])
    placed = []
    for i in range(8):
        outcome = allocator.find_node([claim(f"c{i}", req())])
        assert isinstance(outcome, Allocation)
        allocator.commit(outcome)
        placed.append(outcome)
    assert not isinstance(allocator.find_node([claim("late", req())]), Allocation)  # remembered: full
    allocator.snapshot.mark_free(placed[0].claims[0].result)  # n0 gets a GPU back, then churn on n3
    for _ in range(10):
        allocator.snapshot.mark_free(placed[7].claims[0].result)
        allocator.snapshot.mark_allocated(placed[7].claims[0].result)
    assert len(allocator.snapshot.freed) <= 4 and allocator.snapshot.freed_total == 11
    outcome = allocator.find_node([claim("late", req())])
    assert isinstance(outcome, Allocation)
    assert outcome.node == "n0"


def test_find_node_resumes_first_fit_after_frees_and_allocations() -> None:
    """Remembered scan positions never change the answer: a freed device on an early node is found again, and
    a claim that fit nowhere fits once a device is freed."""
    allocator = make_allocator([gpus(f"n{i}", 2) for i in range(4)])
    placed = []
    for i in range(8):
        outcome = allocator.find_node([claim(f"c{i}", req())])
        assert isinstance(outcome, Allocation)
        assert outcome.node == f"n{i // 2}"
        allocator.commit(outcome)
        placed.append(outcome)
    assert not isinstance(allocator.find_node([claim("late", req())]), Allocation)
    assert not isinstance(allocator.find_node([claim("late", req())]), Allocation)  # cached failure
    allocator.snapshot.mark_free(placed[3].claims[0].result)  # n1/gpu-1
    outcome = allocator.find_node([claim("late", req())])
    assert isinstance(outcome, Allocation)
    assert outcome.node == "n1"
