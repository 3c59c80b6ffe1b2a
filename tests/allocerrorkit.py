"""An allocator error aborts the pod's scheduling attempt, run the same on the embedded cluster
(tests/integration/test_scheduling_errors.py) and on the real control plane
(tests/kubernetes/test_real_scheduling_errors.py): the issue's two-node repro. fx-1 has d0 {numa 0} and d1 without
numa; fx-2 has e0 and e1 {numa 0}. A claim for 2 devices with ``numa == 0`` fits fx-2, but kube-scheduler filters
every node and meets the CEL runtime error on fx-1's d1: the pod stays Pending, its Event carries the error. With
the nodes' devices swapped, the node that fits comes first (the stand-in's first fit would stop there)."""

from __future__ import annotations

from typing import Any

from clusterkit import eventually, kubectl
from gpudra.cluster.fleet import FleetNode
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import EVENTS, PODS

DRIVER = "fx.example.com"
FLEET = [FleetNode("fx-1", "l4x4", 0), FleetNode("fx-2", "l4x4", 1)]


def message(bad: str, minor: int = 37) -> str:
    """kube-scheduler's FailedScheduling text for the repro (the real control plane's, word for word). Before 1.37
    it named neither the device nor a remedy (k8s.io/dynamic-resource-allocation v0.34.4 and v0.36.3:
    ``claim %s: selector #%d: CEL runtime error: %w``); the embedded stand-in words it as 1.37 at every version."""
    if minor < 37:
        return (
            'running "DynamicResources" filter plugin: claim default/numa-pair: selector #0: CEL runtime error: '
            "no such key: numa"
        )
    return (
        'running "DynamicResources" filter plugin: claim default/numa-pair: selector #0 on device '
        f"fx.example.com/{bad}/d1: CEL runtime error: no such key: numa. consider using CEL optional chaining (.? "
        "followed by orValue()) or guarding the check with has() for optional fields"
    )


def _slice(node: str, devices: dict[str, dict[str, Any]], count: int = 1) -> str:
    """The node's pool of fx devices, announcing ``count`` slices (this one of them)."""
    listed = ", ".join(f"{{name: {name}, attributes: {attributes}}}" for name, attributes in devices.items())
    return f"""
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-fx}}
spec:
  driver: {DRIVER}
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: {count}}}
  devices: [{listed}]
"""


NUMA0 = {"numa": {"int": 0}}


CLASS = f"""
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {DRIVER}}}
spec:
  selectors: [{{cel: {{expression: 'device.driver == "{DRIVER}"'}}}}]
"""


def manifests(bad: str) -> str:
    good = "fx-2" if bad == "fx-1" else "fx-1"
    return "\n---\n".join(
        [CLASS, _slice(bad, {"d0": NUMA0, "d1": {}}), _slice(good, {"e0": NUMA0, "e1": NUMA0})]
    )


POD = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: numa-pair, namespace: default}}
spec:
  devices:
    requests:
    - name: pair
      exactly:
        deviceClassName: {DRIVER}
        count: 2
        selectors: [{{cel: {{expression: 'device.attributes["{DRIVER}"].numa == 0'}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: numa-pair, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: pair}}]}}}}]
  resourceClaims: [{{name: pair, resourceClaimName: numa-pair}}]
"""


async def failed_scheduling(cluster: EmbeddedCluster) -> list[str]:
    """The messages of the pod's FailedScheduling Events."""
    assert cluster.client is not None
    events, _ = await cluster.client.list_raw(
        EVENTS, "default", field_selector="involvedObject.name=numa-pair"
    )
    return [
        str(e.get("message") or e.get("note") or "")
        for e in events
        if e.get("reason") == "FailedScheduling" and (e.get("involvedObject") or {}).get("kind") == "Pod"
    ]


async def stays_pending_with_the_error(cluster: EmbeddedCluster, bad: str = "fx-1") -> None:
    """Apply the repro (the device without numa on node ``bad``); the pod's FailedScheduling Event carries
    kube-scheduler's error and the pod is not bound (the other node would fit it)."""
    await kubectl(cluster, "apply", "-f", "-", stdin=manifests(bad))
    await kubectl(cluster, "apply", "-f", "-", stdin=POD)

    minor = cluster.kubernetes.binaries.minor if cluster.kubernetes is not None else 37

    async def told() -> bool:
        return message(bad, minor) in await failed_scheduling(cluster)

    try:
        await eventually(told, timeout=30)
    except AssertionError:
        raise AssertionError(f"FailedScheduling messages: {await failed_scheduling(cluster)}") from None
    assert cluster.client is not None
    pod = await cluster.client.get_raw(PODS, "numa-pair", "default")
    assert not (pod.get("spec") or {}).get("nodeName"), pod["spec"]
    assert (pod.get("status") or {}).get("phase") == "Pending"


# A selector that loops 10,100 times (cost 61,411, within Kubernetes' limit): kube-scheduler allocates it, gpudra's
# CEL library stops at 10,000 iterations (docs/fidelity.md).
LOOPS = "[" + ", ".join(["0"] * 100) + "]"
BUSY_POD = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: busy, namespace: default}}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors: [{{cel: {{expression: '{LOOPS}.all(x, {LOOPS}.all(y, y == x))'}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: busy, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimName: busy}}]
"""


# fx-1's pool announces two slices and has published one; fx-2's is complete. A claim for all fx devices of a node:
# Kubernetes' allocator errs on fx-1 ("currently being updated"). Through 1.37 that aborts the pod's scheduling
# attempt; from 1.38 (kubernetes#141898) it only leaves fx-1 out, and the pod goes to fx-2.
ALL_POD = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: all-fx, namespace: default}}
spec:
  devices:
    requests:
    - name: all
      exactly: {{deviceClassName: {DRIVER}, allocationMode: All}}
---
apiVersion: v1
kind: Pod
metadata: {{name: all-fx, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: all}}]}}}}]
  resourceClaims: [{{name: all, resourceClaimName: all-fx}}]
"""
UPDATING = (
    'running "DynamicResources" filter plugin: claim default/all-fx, request all: asks for all devices, but '
    "resource pool fx.example.com/fx-1 is currently being updated"
)


async def all_devices_of_an_incomplete_pool(cluster: EmbeddedCluster) -> None:
    """Through 1.37 the pod stays pending with kube-scheduler's error though fx-2 fits; from 1.38 it is bound to
    fx-2 (the embedded stand-in emulates up to 1.37)."""
    slices = [_slice("fx-1", {"d0": {}}, count=2), _slice("fx-2", {"e0": {}})]
    await kubectl(cluster, "apply", "-f", "-", stdin="\n---\n".join([CLASS, *slices]))
    await kubectl(cluster, "apply", "-f", "-", stdin=ALL_POD)
    minor = cluster.kubernetes.binaries.minor if cluster.kubernetes is not None else 37
    assert cluster.client is not None
    client = cluster.client

    async def said() -> list[str]:
        events, _ = await client.list_raw(EVENTS, "default", field_selector="involvedObject.name=all-fx")
        return [
            str(e.get("message") or e.get("note") or "")
            for e in events
            if e.get("reason") == "FailedScheduling"
        ]

    async def node() -> str | None:
        return ((await client.get_raw(PODS, "all-fx", "default")).get("spec") or {}).get("nodeName")

    async def told() -> bool:
        return UPDATING in await said()

    if minor >= 38:
        assert await eventually(node, timeout=30) == "fx-2"
        return
    try:
        await eventually(told, timeout=30)
    except AssertionError:
        raise AssertionError(f"FailedScheduling messages: {await said()}") from None
    assert await node() is None
