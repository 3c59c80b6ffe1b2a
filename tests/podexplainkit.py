"""What the pod-explanation tests share on both control planes: NVIDIA's `extended-resources/mig-1g-12gb` demo spec
(demo/specs/extended-resources in kubernetes-sigs/dra-driver-nvidia-gpu), restated with the same namespace, class,
selector, extended resource name and pod; a pod whose claim template asks for more GPUs than a node has; and the
Events gpudra's controller posts on an object."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import sys
from typing import Any

import aiohttp

from clusterkit import checkpoint_claims, claim_specs, eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS

MIG_1G_12GB_NAMESPACE = "extended-resource-mig-1g12gb"
_MIG_1G_12GB_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    " && device.attributes['gpu.nvidia.com'].profile == '1g.12gb'"
)
MIG_1G_12GB = f"""
apiVersion: v1
kind: Namespace
metadata:
  name: {MIG_1G_12GB_NAMESPACE}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: mig-1g-12gb.gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: "{_MIG_1G_12GB_SELECTOR}"
  extendedResourceName: nvidia.com/mig-1g.12gb
---
apiVersion: v1
kind: Pod
metadata:
  namespace: {MIG_1G_12GB_NAMESPACE}
  name: mig-1g12gb-pod
spec:
  restartPolicy: Never
  containers:
  - name: cuda-container
    image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
    command: ["sh", "-c", "nvidia-smi; sleep 3600"]
    resources:
      limits:
        nvidia.com/mig-1g.12gb: 1
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
"""


ORPHAN_POD = """
apiVersion: v1
kind: Pod
metadata: {name: orphan, namespace: default}
spec:
  nodeName: dgx-h100-0
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, resourceClaimName: does-not-exist}]
"""


def gpus_pod(name: str, count: int, namespace: str = "default") -> str:
    """A claim template for ``count`` whole GPUs and a pod that uses it."""
    return f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}-gpus, namespace: {namespace}}}
spec:
  spec:
    devices:
      requests: [{{name: gpus, exactly: {{deviceClassName: gpu.nvidia.com, count: {count}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  containers: [{{name: main, image: cuda, resources: {{claims: [{{name: gpus}}]}}}}]
  resourceClaims: [{{name: gpus, resourceClaimTemplateName: {name}-gpus}}]
"""


async def controller_events(
    cluster: EmbeddedCluster, kind: str, name: str, namespace: str = "default"
) -> list[dict[str, Any]]:
    """The Events gpudra's controller posted on the object, oldest first."""
    assert cluster.client is not None
    items, _ = await cluster.client.list_raw(
        EVENTS, namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}"
    )
    ours = [e for e in items if (e.get("source") or {}).get("component") == "gpudra-controller"]
    return sorted(ours, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))


async def explanations(
    cluster: EmbeddedCluster, pod: str, count: int, namespace: str = "default"
) -> list[dict[str, Any]]:
    """Once the pod carries ``count`` Events from gpudra's controller: those Events."""

    async def posted() -> list[dict[str, Any]]:
        found = await controller_events(cluster, "Pod", pod, namespace)
        return found if len(found) >= count else []

    return await eventually(posted, timeout=60, what=f"{count} explanation(s) on pod {namespace}/{pod}")


async def bound(cluster: EmbeddedCluster, pod: str, namespace: str = "default") -> None:
    assert cluster.client is not None
    client = cluster.client

    async def on_a_node() -> bool:
        return bool((await client.get_raw(PODS, pod, namespace))["spec"].get("nodeName"))

    await eventually(on_a_node, timeout=60, what=f"pod {namespace}/{pod} bound")


async def claim_of(cluster: EmbeddedCluster, pod: str, namespace: str = "default") -> str:
    """The name of the claim made for the pod from its template."""
    assert cluster.client is not None
    client = cluster.client

    async def recorded() -> str:
        status = (await client.get_raw(PODS, pod, namespace)).get("status") or {}
        return next((s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or []), "")

    return await eventually(recorded, timeout=60, what=f"pod {namespace}/{pod}'s claim")


async def check_waiting_pod_is_explained(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1. A pod waiting for 8 GPUs while another holds one carries its claim's explanation (the same reason
    and text as the claim's Event, naming the claim it waits for), visible in `kubectl describe pod`; when the
    explanation changes (a second holder) a new Event says so, and neither is repeated."""
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("one", 1))
    await bound(cluster, "one")
    one = await claim_of(cluster, "one")
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("eight", 8))
    (first,) = await explanations(cluster, "eight", 1)
    assert first["type"] == "Warning" and first["reason"] == "DevicesInUse", first
    head = "needs 8 NVIDIA H100 80GB HBM3 on one node; dgx-h100-0 has 8 but gpu-"
    assert first["message"].startswith(head), first["message"]
    assert f" is in use by default/{one}" in first["message"], first["message"]
    on_claim = await controller_events(cluster, "ResourceClaim", await claim_of(cluster, "eight"))
    assert [(e["reason"], e["message"]) for e in on_claim] == [(first["reason"], first["message"])]
    described = " ".join((await kubectl(cluster, "describe", "pod", "eight")).split())
    assert " ".join(first["message"].split()) in described

    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("two", 1))
    await bound(cluster, "two")
    two = await claim_of(cluster, "two")
    old, new = await explanations(cluster, "eight", 2)
    assert old["metadata"]["name"] == first["metadata"]["name"]
    assert new["reason"] == "DevicesInUse" and f"default/{two}" in new["message"], new["message"]
    assert [e.get("count") for e in (old, new)] == [1, 1]  # each posted once


async def check_prebound_pod_is_explained(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1. A pod created with spec.nodeName set never gets its claim allocated (the scheduler allocates only
    for pods it schedules), though a GPU is free: the claim and the pod say so, naming the node, instead of an
    explanation of where the claim would fit."""
    manifest = gpus_pod("pinned", 1).replace(
        "spec:\n  containers:", "spec:\n  nodeName: dgx-h100-0\n  containers:"
    )
    assert "nodeName: dgx-h100-0" in manifest
    await kubectl(cluster, "apply", "-f", "-", stdin=manifest)
    claim = await claim_of(cluster, "pinned")
    (said,) = await explanations(cluster, "pinned", 1)
    assert said["type"] == "Warning" and said["reason"] == "PodAlreadyBound", said
    assert said["message"].startswith(
        "pod default/pinned is bound to node dgx-h100-0 and this claim is not allocated: kube-scheduler allocates"
    ), said["message"]
    on_claim = await controller_events(cluster, "ResourceClaim", claim)
    assert [(e["reason"], e["message"]) for e in on_claim] == [(said["reason"], said["message"])]
    described = " ".join((await kubectl(cluster, "describe", "resourceclaim", claim)).split())
    assert " ".join(said["message"].split()) in described
    for target in (["pod", "pinned"], ["claim", claim]):  # gpudra explain says the same, and exits 1
        code, out = await gpudra_explain(cluster, *target)
        assert code == 1, out
        assert out.startswith(f"claim default/{claim} will not be allocated (PodAlreadyBound)\n"), out
        assert " ".join(said["message"].split()) in " ".join(out.split()), out
    code, out = await gpudra_explain(cluster, "pod", "pinned", "-o", "json")
    answer = json.loads(out)["claims"][0]
    assert (code, answer["state"], answer["fits"], answer["reason"]) == (
        1,
        "stranded",
        False,
        "PodAlreadyBound",
    )
    assert answer["text"] == said["message"]
    assert cluster.client is not None
    client = cluster.client
    pod = await client.get_raw(PODS, "pinned", "default")
    claim_uid = (await client.get_raw(RESOURCE_CLAIMS, claim, "default"))["metadata"]["uid"]
    await kubelet_says(  # before the claim is recorded in the pod's status, and after
        cluster,
        "pinned",
        'pod "default/pinned": ResourceClaim not created yet',
        f"pod pinned ({pod['metadata']['uid']}) is not allowed to use ResourceClaim {claim} ({claim_uid})",
    )
    if cluster.web_url:
        await check_web_view_shows_the_stranded_claim(cluster, claim, said["message"])


async def kubelet_says(cluster: EmbeddedCluster, pod: str, *why: str) -> None:
    """Until the pod (in default) has the kubelet's Warning that it cannot prepare the pod's claims because of the
    last of ``why``, and each such Warning is one of ``why``, whole, in a 1.37 kubelet's words
    (pkg/kubelet/cm/dra/manager.go and kuberuntime). A real kubelet tries again only at its next periodic sync of
    the pod (a minute: a change of the pod's status alone does not wake it), the stand-in kubelet sooner."""
    assert cluster.client is not None
    client = cluster.client
    wanted = [f"Failed to prepare dynamic resources: prepare dynamic resources: {w}" for w in why]

    async def said() -> list[str]:
        items, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={pod}")
        return [e["message"] for e in items if e["reason"] == "FailedPrepareDynamicResources"]

    async def last_said() -> bool:
        messages = await said()
        assert set(messages) <= set(wanted), (messages, wanted)
        return wanted[-1] in messages

    await eventually(last_said, timeout=150, what=f"the kubelet's Warning on pod {pod}")


async def check_missing_claim_is_said_as_a_kubelet_says(cluster: EmbeddedCluster) -> None:
    """A pod created on a node that names a ResourceClaim that does not exist: the kubelet's Warning says so, in
    the words of a 1.37 kubelet and of the API server."""
    await kubectl(cluster, "apply", "-f", "-", stdin=ORPHAN_POD)
    await kubelet_says(
        cluster,
        "orphan",
        'fetch ResourceClaim does-not-exist: resourceclaims.resource.k8s.io "does-not-exist" not found',
    )


async def web_view_card(cluster: EmbeddedCluster, fragment: str, reason: str, saying: str = "") -> str:
    """The web view's (`web_port=0`) pending card whose key starts with ``fragment`` (``pending/NS/NAME``), once it
    shows ``reason`` and says ``saying`` (its text unescaped): a card the view drew before it saw the last change
    (its explanations come at most once a second) is waited past."""
    assert cluster.web_url
    url = cluster.web_url

    async def card() -> str:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            page = await response.text()
        start = page.find(f'data-frag="{fragment}')
        ends = [i for i in (page.find("data-frag=", start + 1), page.find("</section>", start)) if i >= 0]
        found = page[start : min(ends)] if start >= 0 else ""  # up to the next fragment or the section's end
        return found if f'data-reason="{reason}"' in found and saying in html.unescape(found) else ""

    return await eventually(
        card, timeout=60, interval=0.5, what=f"the web view's card {fragment} saying {reason}"
    )


async def check_web_view_shows_the_stranded_claim(cluster: EmbeddedCluster, claim: str, words: str) -> None:
    """The web view shows the claim of the pod created bound as one no scheduler will allocate, with the Event's
    words (``words``), not where it would fit."""
    found = await web_view_card(cluster, f"pending/default/{claim}", "PodAlreadyBound")
    assert "will not be allocated" in found and "fits on node" not in found, found
    assert html.escape(words, quote=True) in found, found


MPS_POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mps, namespace: default}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing: {strategy: MPS, mpsConfig: {defaultActiveThreadPercentage: 50}}
---
apiVersion: v1
kind: Pod
metadata: {name: mps-user, namespace: default}
spec:
  containers: [{name: main, image: cuda, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimName: mps}]
"""
MPS_REFUSED = (
    "invalid opaque config: config from claim #0: GpuConfig: sharing.strategy: MPS is disabled on this node"
    " (the agent's GPUDRA_MPS_SUPPORT)"
)


async def check_unprepared_claim_is_explained(cluster: EmbeddedCluster, node: str) -> None:
    """A cluster whose agents run with ``mps_support=False`` and whose only node is ``node``. An MPS claim is
    allocated there, and its prepare refused: the kubelet says so on the pod, `gpudra explain pod` says the claim
    is allocated but not prepared, why, and when the kubelet tries again (exit 0: nothing to schedule), and the
    web view (if any) lists it with the pending claims in the same words."""
    await kubectl(cluster, "apply", "-f", "-", stdin=MPS_POD)
    await kubelet_says(
        cluster, "mps-user", f"NodePrepareResources failed for ResourceClaim mps: {MPS_REFUSED}"
    )

    async def explained() -> str:  # the agent writes the claim's status after the kubelet's answer
        status, out = await gpudra_explain(cluster, "pod", "mps-user")
        return " ".join(out.split()) if status == 0 and "not prepared" in out else ""

    out = await eventually(explained, timeout=60, what="gpudra explain saying the claim is not prepared")
    assert f"claim default/mps is allocated on node {node}" in out, out
    assert re.search(rf"not prepared \(gpu-\d\): InvalidConfig: {re.escape(MPS_REFUSED)}", out), out
    assert "the kubelet tries the prepare again at its next sync of the pod" in out, out
    if not cluster.web_url:
        return
    card = await web_view_card(cluster, "pending/default/mps", "InvalidConfig")
    assert f"allocated on node {node}, not prepared: its pods wait in ContainerCreating" in card, card
    assert html.escape(MPS_REFUSED, quote=True) in card, card
    assert "the kubelet tries the prepare again at its next sync of the pod" in card, card


async def check_unregistered_driver_is_explained(cluster: EmbeddedCluster, node: str) -> None:
    """A one-node cluster with agents in processes of their own (``agent_processes=True``). With the node's agent
    stopped, a pod's claim is still allocated there (its slices stay published), and the kubelet cannot prepare it:
    `gpudra explain pod` says what the kubelet says, that no plugin of the driver is registered on the node, and
    when the kubelet tries again."""
    await cluster.agent_processes[node].stop()
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("lonely", 1))
    await kubelet_says(cluster, "lonely", "DRA driver gpu.nvidia.com is not registered")
    status, out = await gpudra_explain(cluster, "pod", "lonely")
    said = " ".join(out.split())
    assert status == 0 and "is allocated on node" in said, out
    assert re.search(
        rf"the kubelet on node {node} says \((\d+ times, )?last at [0-9T:Z-]+\): Failed to prepare dynamic"
        r" resources: prepare dynamic resources: DRA driver gpu.nvidia.com is not registered",
        said,
    ), out
    assert (
        f"no kubelet plugin of gpu.nvidia.com is registered on node {node}: is gpudra's agent running" in said
    )
    assert "the kubelet tries the prepare again at its next sync of the pod" in said, out
    status, out = await gpudra_explain(cluster, "pod", "lonely", "-o", "json")
    warning = json.loads(out)["kubelet"]
    assert (status, warning["node"]) == (0, node), out
    assert warning["message"].endswith("DRA driver gpu.nvidia.com is not registered"), out


async def check_node_filters_are_explained(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1,l4x4:1. `gpudra explain pod` explains a waiting pod's claims over the nodes kube-scheduler's node
    filters let the pod go to, and names what keeps it off the others: a claim of 8 GPUs fits only dgx-h100-0,
    which carries a taint the pod does not tolerate, so it does not fit for that pod (before: "fits now on node
    dgx-h100-0", exit 0); a pod whose nodeSelector matches no node gets no claim allocated at all. gpudra's
    controller says the same on the pods and their claims in Events (before: nothing, the claims fitting some
    node)."""
    await kubectl(cluster, "taint", "nodes", "dgx-h100-0", "dedicated=train:NoSchedule")
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("picky", 8))
    picky = await claim_of(cluster, "picky")
    status, out = await gpudra_explain(cluster, "pod", "picky")
    lines = out.splitlines()
    assert status == 1, out
    assert lines[:2] == [
        "kube-scheduler's node filters keep the pod off 1 of 2 nodes with devices:",
        "  dgx-h100-0: taint dedicated=train:NoSchedule not tolerated",
    ], out
    assert "does not fit" in out and "l4x4-0" in out and "fits now" not in out, out
    # the claim alone is explained for its pod too
    status, by_claim = await gpudra_explain(cluster, "claim", picky)
    assert status == 1 and by_claim.splitlines()[:2] == lines[:2], by_claim
    said = " ".join(by_claim.split())
    assert f"claim default/{picky}: explained for its pod picky, over the nodes that pod may go to" in said

    manifest = gpus_pod("nowhere", 1).replace(
        "spec:\n  containers:", "spec:\n  nodeSelector: {pool: none}\n  containers:"
    )
    assert "nodeSelector" in manifest
    await kubectl(cluster, "apply", "-f", "-", stdin=manifest)
    claim = await claim_of(cluster, "nowhere")
    status, out = await gpudra_explain(cluster, "pod", "nowhere", "-o", "json")
    answer = json.loads(out)
    assert status == 1, out
    assert answer["keptOff"] == [
        {"node": "dgx-h100-0", "reason": "taint dedicated=train:NoSchedule not tolerated"},
        {"node": "l4x4-0", "reason": "does not match the pod's nodeSelector pool=none"},
    ], out
    (said,) = answer["claims"]
    assert (said["claim"], said["state"], said["reason"]) == (
        f"default/{claim}",
        "stranded",
        "NoNodeForPod",
    ), out
    status, out = await gpudra_explain(cluster, "pod", "nowhere")
    assert out.startswith("kube-scheduler's node filters keep the pod off all 2 nodes with devices:\n"), out
    condition = await scheduler_said(cluster, "nowhere")  # kube-scheduler's condition on the pod says it too
    assert (condition["type"], condition["status"]) == ("PodScheduled", "False"), condition
    assert condition["message"].startswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector"
    )
    assert f"claim default/{claim} will not be allocated (NoNodeForPod)" in out, out
    status, out = await gpudra_explain(cluster, "claim", claim)
    assert status == 1 and f"claim default/{claim} will not be allocated (NoNodeForPod)" in out, out

    said = await controller_said(cluster, "picky", picky, "InsufficientDevices")
    assert said == (
        "needs 8 NVIDIA L4 on one node; the most on any node is 4 (l4x4-0). kube-scheduler's node filters keep the"
        " pod off 1 of 2 nodes with devices: dgx-h100-0: taint dedicated=train:NoSchedule not tolerated"
    ), said
    said = await controller_said(cluster, "nowhere", claim, "NoNodeForPod")
    assert said == (
        "kube-scheduler allocates a pod's claims only on a node the pod may go to, and its node filters leave none"
        " of the nodes that publish devices. kube-scheduler's node filters keep the pod off all 2 nodes with"
        " devices: dgx-h100-0: taint dedicated=train:NoSchedule not tolerated; l4x4-0: does not match the pod's"
        " nodeSelector pool=none"
    ), said
    if not cluster.web_url:
        return
    card = await web_view_card(cluster, f"pending/default/{claim}", "NoNodeForPod")
    assert "its pod&#x27;s node filters leave no node with devices" in card, card
    assert "<li>l4x4-0: does not match the pod&#x27;s nodeSelector pool=none</li>" in card, card
    shown = await web_view_card(cluster, f"pending/default/{picky}", "InsufficientDevices")
    assert "<li>dgx-h100-0: taint dedicated=train:NoSchedule not tolerated</li>" in shown, shown
    assert "fits on node" not in shown, shown


async def check_gated_pod_is_explained(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1. A pod Kueue holds (its scheduling gate): `gpudra explain pod` says so first, then that its claim
    fits now (before: only "fits now on node dgx-h100-0", though kube-scheduler will not look at the pod); the web
    view's card says the same. Once the gate is removed, the pod is placed and nothing is said of gates."""
    manifest = gpus_pod("queued", 1).replace(
        "spec:\n  containers:", "spec:\n  schedulingGates: [{name: kueue.x-k8s.io/admission}]\n  containers:"
    )
    assert "schedulingGates" in manifest
    await kubectl(cluster, "apply", "-f", "-", stdin=manifest)
    claim = await claim_of(cluster, "queued")
    body = json.loads(await kubectl(cluster, "get", "pod", "queued", "-o", "json"))
    (condition,) = body["status"]["conditions"]  # kube-apiserver's, from the pod's creation
    assert {k: v for k, v in condition.items() if k not in ("lastTransitionTime", "lastProbeTime")} == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }, condition
    row = (await kubectl(cluster, "get", "pod", "queued", "--no-headers")).split()
    assert row[:3] == ["queued", "0/1", "SchedulingGated"], row
    assert cluster.client is not None
    gated_events, _ = await cluster.client.list_raw(
        EVENTS, "default", field_selector="involvedObject.name=queued"
    )
    assert gated_events == [], gated_events  # the scheduler does not look at it, and says nothing
    status, out = await gpudra_explain(cluster, "pod", "queued")
    said = " ".join(out.split())
    assert status == 0, out  # its claim fits
    assert said.startswith(
        "the pod is held by its scheduling gates (kueue.x-k8s.io/admission): kube-scheduler neither places it nor"
        " allocates its claims until every gate is removed Kueue removes kueue.x-k8s.io/admission when it admits"
        " the pod's workload (`kubectl get workloads -n default` says whether it is admitted, and why not)"
        f" claim default/{claim} fits now on node dgx-h100-0: gpu-"
    ), out
    status, out = await gpudra_explain(cluster, "pod", "queued", "-o", "json")
    assert json.loads(out)["schedulingGates"] == ["kueue.x-k8s.io/admission"], out
    status, out = await gpudra_explain(cluster, "claim", claim)  # the claim alone says it too
    assert status == 0 and " ".join(out.split()).startswith("the pod is held by its scheduling gates"), out
    if cluster.web_url:
        gated = (
            "fits on node dgx-h100-0 now; the pod is held by its scheduling gates (kueue.x-k8s.io/admission)"
        )
        await web_view_card(cluster, f"pending/default/{claim}", "", saying=gated)

    await kubectl(
        cluster,
        "patch",
        "pod",
        "queued",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/schedulingGates"}]',
    )
    await bound(cluster, "queued")
    status, out = await gpudra_explain(cluster, "pod", "queued")
    assert (
        "scheduling gates" not in out and f"claim default/{claim} is allocated on node dgx-h100-0" in out
    ), out


async def check_pod_kept_off_by_cpu_says_kube_schedulers_words(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1. A pod whose claim fits but that asks for more cpu than any node has: `gpudra explain pod` says its
    claim fits, then what kube-scheduler's PodScheduled condition says (before: only "fits now", and the pod waited
    on); with `web_port=0`, the web view's card says the same."""
    manifest = gpus_pod("hungry", 1).replace(
        "resources: {claims: [{name: gpus}]}", "resources: {requests: {cpu: '1000'}, claims: [{name: gpus}]}"
    )
    assert "cpu: '1000'" in manifest
    await kubectl(cluster, "apply", "-f", "-", stdin=manifest)
    claim = await claim_of(cluster, "hungry")
    said = await scheduler_said(cluster, "hungry")
    assert said["message"].startswith("0/1 nodes are available: 1 Insufficient cpu."), said
    status, out = await gpudra_explain(cluster, "pod", "hungry")
    joined = " ".join(out.split())
    assert status == 0, out  # its claim fits
    assert f"claim default/{claim} fits now on node dgx-h100-0: gpu-" in joined, out
    assert joined.endswith(
        f"kube-scheduler could not place the pod (since {said['lastTransitionTime']}): {said['message']}"
    ), out
    status, out = await gpudra_explain(cluster, "pod", "hungry", "-o", "json")
    assert json.loads(out)["unschedulable"] == {
        "message": said["message"],
        "since": said["lastTransitionTime"],
    }
    status, out = await gpudra_explain(cluster, "claim", claim)  # the claim alone says it too
    assert status == 0 and " ".join(out.split()).endswith(said["message"]), out
    if cluster.web_url:
        words = "fits on node dgx-h100-0 now; kube-scheduler could not place the pod (since "
        card = html.unescape(await web_view_card(cluster, f"pending/default/{claim}", "", saying=words))
        assert said["message"] in card, card


DEVICE_QUOTA = """
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: default}
spec:
  hard: {gpu.nvidia.com.deviceclass.resource.k8s.io/devices: "2"}
"""


async def check_claim_not_made_is_explained(cluster: EmbeddedCluster, *, quota: bool) -> None:
    """dgx-h100:1. A pod whose ResourceClaimTemplate does not exist: kube-controller-manager's Warning in a 1.37's
    words, and `gpudra explain pod` says it, exit 1 (before: exit 2, "no ResourceClaimTemplate"); with `web_port=0`
    the web view lists the claim as not made (before: nothing, as no claim exists). With ``quota``
    (kube-apiserver: the embedded API server serves no ResourceQuota), a pod whose claim of 4 GPUs a namespace quota
    of 2 refuses: `gpudra explain pod` gives kube-controller-manager's words and where to look (before: "fits now
    on node dgx-h100-0", exit 0)."""
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("missing", 1).split("---")[1])
    refused = await creation_refused(cluster, "missing")
    assert refused == (
        'PodResourceClaim gpus: resource claim template "missing-gpus": resourceclaimtemplate.resource.k8s.io'
        ' "missing-gpus" not found'
    ), refused
    status, out = await gpudra_explain(cluster, "pod", "missing")
    said = " ".join(out.split())
    assert status == 1, out
    assert "claim default/missing-gpus: not created yet, from claim template missing-gpus" in said, out
    assert "claim default/missing-gpus will not be allocated (ClaimNotCreated)" in said, out
    assert "kube-controller-manager could not make it (" in said and refused in said, out
    if cluster.web_url:  # the web view lists the claim not made, with why where it knows (no Events watched)
        card = html.unescape(await web_view_card(cluster, "pending/default/missing-gpus", "ClaimNotCreated"))
        assert "not created yet, from claim template missing-gpus (pod missing)" in card, card
        assert "its ResourceClaimTemplate missing-gpus does not exist in namespace default" in card, card
    if not quota:
        return
    await kubectl(cluster, "apply", "-f", "-", stdin=DEVICE_QUOTA)

    async def counted() -> str:  # kube-controller-manager's quota controller has read it: it is enforced
        return await kubectl(cluster, "get", "resourcequota", "gpus", "-o", "jsonpath={.status.hard}")

    await eventually(counted, timeout=60, what="the quota's status")
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("big", 4))
    refused = await creation_refused(cluster, "big")
    assert (
        " is forbidden: exceeded quota: gpus, requested: gpu.nvidia.com.deviceclass.resource.k8s.io/devices=4,"
        in refused
    ), refused
    status, out = await gpudra_explain(cluster, "pod", "big", "-o", "json")
    (answer,) = json.loads(out)["claims"]
    assert status == 1, out
    assert (answer["claim"], answer["state"], answer["reason"]) == (
        "default/big-gpus",
        "stranded",
        "ClaimNotCreated",
    )
    exceeded = refused[refused.index(" is forbidden: ") :]  # each try's claim has a name of its own
    assert answer["text"].startswith("kube-controller-manager could not make it ("), answer
    assert (
        'PodResourceClaim gpus: create ResourceClaim : resourceclaims.resource.k8s.io "big-gpus-'
        in answer["text"]
    )
    assert exceeded in answer["text"] and "`kubectl describe resourcequota -n default`" in answer["text"], (
        answer
    )
    if cluster.web_url:
        card = html.unescape(await web_view_card(cluster, "pending/default/big-gpus", "ClaimNotCreated"))
        assert (
            "FailedResourceClaimCreation Warning on pod big: `gpudra explain pod big -n default`" in card
        ), card


async def creation_refused(cluster: EmbeddedCluster, pod: str) -> str:
    """Once kube-controller-manager said it could not make the pod's claim: what it said."""
    assert cluster.client is not None
    client = cluster.client
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedResourceClaimCreation"

    async def said() -> str:
        items, _ = await client.list_raw(EVENTS, "default", field_selector=selector)
        return str(items[0]["message"]) if items else ""

    return await eventually(said, timeout=60, what=f"FailedResourceClaimCreation on pod {pod}")


async def scheduler_said(cluster: EmbeddedCluster, pod: str) -> dict[str, Any]:
    """Once the pod's ``PodScheduled`` condition says Unschedulable: that condition, whose message is that of the
    scheduler's latest FailedScheduling Warning."""
    assert cluster.client is not None
    client = cluster.client

    async def condition() -> dict[str, Any] | None:
        status = (await client.get_raw(PODS, pod, "default")).get("status") or {}
        found = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        return found if found is not None and found.get("reason") == "Unschedulable" else None

    said: dict[str, Any] = await eventually(condition, timeout=60, what=f"pod {pod}'s PodScheduled condition")
    items, _ = await client.list_raw(
        EVENTS, "default", field_selector=f"involvedObject.name={pod},reason=FailedScheduling"
    )
    assert said["message"] in {e["message"] for e in items}, (said, items)
    return said


async def controller_said(cluster: EmbeddedCluster, pod: str, claim: str, reason: str) -> str:
    """Once gpudra's controller posted a ``reason`` Event on the pod and the same on its claim: its message."""

    async def posted() -> str:
        on_pod = [e["message"] for e in await controller_events(cluster, "Pod", pod) if e["reason"] == reason]
        on_claim = [
            e["message"]
            for e in await controller_events(cluster, "ResourceClaim", claim)
            if e["reason"] == reason
        ]
        return next((m for m in on_pod if m in on_claim), "")

    return await eventually(posted, timeout=60, what=f"a {reason} Event on pod {pod} and claim {claim}")


async def gpudra_explain(cluster: EmbeddedCluster, *args: str) -> tuple[int, str]:
    """`gpudra explain ...` as a user runs it (a pipe: no terminal; COLUMNS as a wide terminal would set it): its
    exit status and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "explain", *args, "--kubeconfig", str(cluster.options.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode()


async def check_mig_1g_12gb_pod_is_explained(cluster: EmbeddedCluster) -> dict[str, Any]:
    """dgx-h100:1. NVIDIA's `extended-resources/mig-1g-12gb` on a fleet without a 1g.12gb MIG device: the pod carries
    gpudra's explanation of the claim for its `nvidia.com/mig-1g.12gb: 1`, visible in `kubectl describe pod`.
    Returns the Event."""
    await kubectl(cluster, "apply", "-f", "-", stdin=MIG_1G_12GB)
    (said,) = await explanations(cluster, "mig-1g12gb-pod", 1, MIG_1G_12GB_NAMESPACE)
    assert said["type"] == "Warning" and said["reason"] == "NoMatchingDevice", said
    assert said["message"].startswith(
        "no device matches request container-0-request-0: class mig-1g-12gb.gpu.nvidia.com"
    ), said["message"]
    assert "leaves out all 8 devices of dgx-h100-0 (NVIDIA H100 80GB HBM3)" in said["message"]
    described = " ".join(
        (await kubectl(cluster, "describe", "pod", "mig-1g12gb-pod", "-n", MIG_1G_12GB_NAMESPACE)).split()
    )
    assert " ".join(said["message"].split()) in described
    return said


async def check_web_view_shows_the_mig_1g_12gb_claim(cluster: EmbeddedCluster) -> None:
    """The web view (`web_port=0`) lists the pod's extended-resource claim among the pending ones, explained."""
    key = f"pending/{MIG_1G_12GB_NAMESPACE}/mig-1g12gb-pod-extended-resources"
    found = await web_view_card(cluster, key, "NoMatchingDevice")
    assert "mig-1g-12gb.gpu.nvidia.com" in found, found


async def claims_by_name(client: KubeClient) -> dict[str, dict[str, Any]]:
    items, _ = await client.list_raw(RESOURCE_CLAIMS, "default")
    return {c["metadata"]["name"]: c for c in items}


async def check_claim_made_twice_names_the_first(cluster: EmbeddedCluster) -> None:
    """dgx-h100:1. kubernetes/kubernetes#140217 by hand: a running pod's status is switched to a second claim for
    the same entry, as kube-controller-manager does when it made the entry's claim twice. The second claim is said
    to wait on nothing, naming the first, which the pod runs with; at the pod's end the kubelet unprepares the first
    (the claims it prepared for the pod, whatever the status names) and both claims go with the pod."""
    node = "dgx-h100-0"
    assert cluster.client is not None
    client = cluster.client
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("twice", 1))

    async def first_claim() -> dict[str, Any] | None:
        pod = await client.get_raw(PODS, "twice", "default")
        ready = [s.get("ready") for s in (pod.get("status") or {}).get("containerStatuses") or []]
        found = [c for n, c in (await claims_by_name(client)).items() if n.startswith("twice-gpus-")]
        return found[0] if ready == [True] and len(found) == 1 else None

    first = await eventually(first_claim, timeout=90, what="pod twice running on its claim")
    meta = first["metadata"]
    second = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{meta['name']}-again",
            "namespace": "default",
            "annotations": meta["annotations"],
            "ownerReferences": meta["ownerReferences"],
        },
        "spec": first["spec"],
    }
    await client.create(RESOURCE_CLAIMS, second, "default")
    switched = {
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"{meta['name']}-again"}]}
    }
    await kubectl(
        cluster, "patch", "pod", "twice", "--subresource=status", "--type=merge", "-p", json.dumps(switched)
    )

    (said,) = await explanations(cluster, "twice", 1)
    assert said["reason"] == "PodAlreadyBound", said
    assert said["message"].startswith(
        f"pod default/twice is bound to node {node} with claim {meta['name']}, which kube-controller-manager made"
    ), said["message"]
    on_claim = await controller_events(cluster, "ResourceClaim", f"{meta['name']}-again")
    assert [(e["reason"], e["message"]) for e in on_claim] == [(said["reason"], said["message"])]
    code, out = await gpudra_explain(cluster, "pod", "twice")
    assert code == 1 and out.startswith(f"claim default/{meta['name']}-again will not be allocated"), out
    assert list(checkpoint_claims(cluster, node)) == [meta["uid"]]

    await kubectl(cluster, "delete", "pod", "twice", "--wait=true", "--timeout=60s")

    async def released() -> bool:  # a real kubelet before it lets the pod go, the stand-in kubelet after
        left = [n for n in await claims_by_name(client) if n.startswith("twice-gpus-")]
        return not left and not checkpoint_claims(cluster, node) and not claim_specs(cluster, node)

    await eventually(released, timeout=60, what="the first claim unprepared, both deleted with their pod")
