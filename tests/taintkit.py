"""Device taints that evict, run the same on the embedded cluster (tests/integration/test_device_taints.py) and on
the real control plane (tests/kubernetes/test_real_device_taints.py): an admin's DeviceTaintRule, and gpudra's own
health taint raised to NoExecute for an XID that means a dead GPU."""

from __future__ import annotations

from typing import Any

from clusterkit import eventually, kubectl
from gpudra.cluster.apiserver.versions import KubeVersion, parse_minor
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS

MAINTENANCE = "example.com/maintenance"


def rule_api_version(cluster: EmbeddedCluster) -> str:
    """DeviceTaintRule is resource.k8s.io/v1 from 1.37, v1beta2 in 1.36, v1alpha3 before, on either control plane
    (the embedded one emulates 1.37 unless asked for another version)."""
    if cluster.kubernetes is not None:
        minor = cluster.kubernetes.binaries.minor
    else:
        minor = parse_minor(cluster.options.kubernetes_version)
    return "resource.k8s.io/" + KubeVersion(minor).taint_rule_version


def maintenance_rule(cluster: EmbeddedCluster, node: str) -> str:
    """A DeviceTaintRule putting a NoExecute maintenance taint on every GPU of ``node``."""
    return f"""
apiVersion: {rule_api_version(cluster)}
kind: DeviceTaintRule
metadata: {{name: maintenance}}
spec:
  deviceSelector: {{driver: gpu.nvidia.com, pool: {node}}}
  taint: {{key: {MAINTENANCE}, value: firmware, effect: NoExecute}}
"""


def one_gpu_pod(name: str, *, tolerate: bool = False) -> str:
    toleration = (
        f", tolerations: [{{key: {MAINTENANCE}, operator: Exists, effect: NoExecute}}]" if tolerate else ""
    )
    return f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: default}}
spec:
  devices:
    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com{toleration}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]
"""


async def pod_phase(cluster: EmbeddedCluster, name: str) -> str | None:
    """The pod's phase; None when it is gone (or going: a graceful deletion is under way)."""
    assert cluster.client is not None
    items, _ = await cluster.client.list_raw(PODS, "default", field_selector=f"metadata.name={name}")
    if not items or items[0]["metadata"].get("deletionTimestamp"):
        return None
    return str((items[0].get("status") or {}).get("phase", ""))


async def device_of(cluster: EmbeddedCluster, claim: str) -> dict[str, Any]:
    assert cluster.client is not None
    body = await cluster.client.get_raw(RESOURCE_CLAIMS, claim, "default")
    (result,) = body["status"]["allocation"]["devices"]["results"]
    return dict(result)


async def events(cluster: EmbeddedCluster, pod: str) -> list[tuple[str, str]]:
    assert cluster.client is not None
    items, _ = await cluster.client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={pod}")
    return [(str(e.get("reason")), str(e.get("message"))) for e in items]


async def eviction_event(cluster: EmbeddedCluster, pod: str) -> tuple[str, str] | None:
    return next((e for e in await events(cluster, pod) if e[0] == "DeviceTaintManagerEviction"), None)


async def running(cluster: EmbeddedCluster, name: str, timeout: float = 30) -> None:
    async def check() -> bool:
        return await pod_phase(cluster, name) == "Running"

    await eventually(check, timeout=timeout)


async def gone(cluster: EmbeddedCluster, name: str, timeout: float = 30) -> None:
    async def check() -> bool:
        return await pod_phase(cluster, name) is None

    await eventually(check, timeout=timeout)


def tolerations_recorded(cluster: EmbeddedCluster) -> bool:
    """Whether the scheduler copies a request's tolerations into the allocation result, where the eviction controller
    reads them: gpudra's allocator does (as 1.37's); kube-scheduler 1.34 does not, so there a claim's NoExecute
    toleration keeps its pod from being scheduled away but not from being evicted."""
    return cluster.kubernetes is None or cluster.kubernetes.binaries.minor >= 35


async def a_taint_rule_evicts_what_does_not_tolerate_it(cluster: EmbeddedCluster, node: str) -> None:
    """A NoExecute DeviceTaintRule on a node's pool: the pod that does not tolerate it is evicted (Event, gone), the
    one whose claim tolerates it keeps running, a new pod waits; deleting the rule lets it run."""
    pods = one_gpu_pod("plain") + "---" + one_gpu_pod("tolerant", tolerate=True)
    await kubectl(cluster, "apply", "-f", "-", stdin=pods)
    await running(cluster, "plain")
    await running(cluster, "tolerant")
    await kubectl(cluster, "apply", "-f", "-", stdin=maintenance_rule(cluster, node))
    await gone(cluster, "plain")
    evicted = ["plain"] if tolerations_recorded(cluster) else ["plain", "tolerant"]

    async def told() -> bool:
        return any([await eviction_event(cluster, pod) for pod in evicted])

    await eventually(told, timeout=30)
    await kubectl(cluster, "apply", "-f", "-", stdin=one_gpu_pod("newcomer"))

    async def kept_waiting() -> bool:
        assert cluster.client is not None
        events, _ = await cluster.client.list_raw(
            EVENTS, "default", field_selector="involvedObject.name=newcomer"
        )
        pod = await cluster.client.get_raw(PODS, "newcomer", "default")
        return not pod["spec"].get("nodeName") and any(e.get("reason") == "FailedScheduling" for e in events)

    await eventually(kept_waiting, timeout=30)
    if tolerations_recorded(cluster):
        assert await pod_phase(cluster, "tolerant") == "Running"
    else:
        await gone(cluster, "tolerant")
    await kubectl(
        cluster, "delete", f"devicetaintrules.{rule_api_version(cluster).split('/')[0]}", "maintenance"
    )
    await running(cluster, "newcomer", timeout=60)
    if tolerations_recorded(cluster):
        assert await pod_phase(cluster, "tolerant") == "Running"


def extended_claims_evicted(cluster: EmbeddedCluster) -> bool:
    """Whether the device-taint eviction controller looks at a pod's extended-resource claim
    (``status.extendedResourceClaimStatus``, made by the scheduler for ``nvidia.com/gpu: 1``) besides the claims its
    spec names: kube-controller-manager from 1.37.2 (resourceclaim.PodClaims, kubernetes#142289, listed for 1.38);
    1.34.4, 1.35.4 and 1.36.3 look at the spec's claims only. The embedded cluster follows the version it emulates."""
    if cluster.kubernetes is not None:
        minor = cluster.kubernetes.binaries.minor
    else:
        minor = parse_minor(cluster.options.kubernetes_version)
    return KubeVersion(minor).evicts_extended_resource_claims


async def a_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource(
    cluster: EmbeddedCluster, node: str
) -> None:
    """A pod asking for ``nvidia.com/gpu: 1`` holds its GPU through the claim the scheduler made for it. A NoExecute
    DeviceTaintRule on the node's pool evicts it where the eviction controller reads that claim (1.37+); before, it
    keeps running on the tainted GPU while a newcomer is kept off it."""
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: extended, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}]
"""
    await kubectl(cluster, "apply", "-f", "-", stdin=pod)
    await running(cluster, "extended")
    await kubectl(cluster, "apply", "-f", "-", stdin=maintenance_rule(cluster, node))
    if extended_claims_evicted(cluster):
        await gone(cluster, "extended")
        assert await eventually(lambda: eviction_event(cluster, "extended"), timeout=30)
        return
    await kubectl(cluster, "apply", "-f", "-", stdin=one_gpu_pod("newcomer"))

    async def newcomer_refused() -> bool:
        return any(reason == "FailedScheduling" for reason, _ in await events(cluster, "newcomer"))

    await eventually(newcomer_refused, timeout=30)  # the rule is in force
    assert await pod_phase(cluster, "extended") == "Running"
    assert await eviction_event(cluster, "extended") is None


async def a_dead_gpu_xid_evicts_the_pod_using_it(cluster: EmbeddedCluster, node: str) -> None:
    """With ``health_noexecute_xids`` naming XID 79, the GPU that reports it is tainted NoExecute: the pod using it
    is evicted, and a new one gets another GPU."""
    await kubectl(cluster, "apply", "-f", "-", stdin=one_gpu_pod("victim"))
    await running(cluster, "victim")
    device = (await device_of(cluster, "victim"))["device"]
    fake = cluster.simulated[node]
    index = int(device.removeprefix("gpu-"))
    await eventually(lambda: fake.inject_xid(index, 79) > 0)
    await gone(cluster, "victim")
    assert await eventually(lambda: eviction_event(cluster, "victim"), timeout=30)
    await kubectl(cluster, "delete", "resourceclaim", "victim")
    await kubectl(cluster, "apply", "-f", "-", stdin=one_gpu_pod("survivor"))
    await running(cluster, "survivor")
    assert (await device_of(cluster, "survivor"))["device"] != device
