"""On kube-apiserver and kube-scheduler 1.37.2, `kubectl describe pod` says why a pod waits in gpudra's words, not
only kube-scheduler's "cannot allocate all claims": the controller posts the explanation of the pod's claim on the
pod, and for a pod asking for an extended resource (which kube-scheduler gives a claim only once a node fits) the
explanation of the claim kube-scheduler would make."""

from __future__ import annotations

import json
from typing import Any

from _realkit import StartKubernetes, admin, checkpoint_claims, claim_specs, claims, events_of, pods

from clusterkit import eventually, kubectl
from gpudra.kube.resources import RESOURCE_CLAIMS
from podexplainkit import (
    MIG_1G_12GB_NAMESPACE,
    check_mig_1g_12gb_pod_is_explained,
    check_missing_claim_is_said_as_a_kubelet_says,
    check_prebound_pod_is_explained,
    check_waiting_pod_is_explained,
    check_web_view_shows_the_mig_1g_12gb_claim,
    controller_events,
    explanations,
    gpudra_explain,
    gpus_pod,
)


async def test_a_waiting_pod_carries_its_claims_explanation(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("dgx-h100:1")
    await check_waiting_pod_is_explained(cluster)
    # kube-scheduler's own word is there too
    assert any(e["reason"] == "FailedScheduling" for e in await events_of(cluster, "eight"))


async def test_a_pod_created_on_a_node_says_its_claim_will_not_be_allocated(
    start_kubernetes: StartKubernetes,
) -> None:
    """kube-controller-manager makes the claim of a pod created with spec.nodeName; kube-scheduler never allocates
    it. The node's kubelet is a real one: its Warnings are what the stand-in kubelet's must say."""
    cluster = await start_kubernetes("dgx-h100:1", web_port=0, real_kubelets=1)
    await check_prebound_pod_is_explained(cluster)
    await check_missing_claim_is_said_as_a_kubelet_says(cluster)


async def test_nvidias_mig_1g_12gb_spec_is_explained_though_it_has_no_claim(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1", web_port=0)
    await check_mig_1g_12gb_pod_is_explained(cluster)
    # explained as the claim kube-scheduler would make: there is none
    assert await claims(cluster, MIG_1G_12GB_NAMESPACE) == {}
    await check_web_view_shows_the_mig_1g_12gb_claim(cluster)


async def test_a_claim_made_twice_for_a_running_pod_names_the_first_which_the_kubelet_unprepares(
    start_kubernetes: StartKubernetes,
) -> None:
    """kubernetes/kubernetes#140217 by hand: a running pod's status is switched to a second claim for the same entry,
    as kube-controller-manager does when it made the entry's claim twice. The second claim is said to wait on
    nothing, naming the first, which the pod runs with; at the pod's end a real kubelet unprepares the first (it
    unprepares the claims it prepared for the pod, whatever the status names) and both claims go with the pod."""
    cluster = await start_kubernetes("dgx-h100:1", real_kubelets=1)
    node = "dgx-h100-0"
    client = admin(cluster)
    await kubectl(cluster, "apply", "-f", "-", stdin=gpus_pod("twice", 1))

    async def first_claim() -> dict[str, Any] | None:
        pod = (await pods(cluster)).get("twice") or {}
        ready = [s.get("ready") for s in (pod.get("status") or {}).get("containerStatuses") or []]
        found = [c for n, c in (await claims(cluster)).items() if n.startswith("twice-gpus-")]
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
    assert not checkpoint_claims(cluster, node) and not claim_specs(cluster, node)

    async def collected() -> bool:
        return not [n for n in await claims(cluster) if n.startswith("twice-gpus-")]

    await eventually(collected, timeout=60, what="both claims deleted with their pod")
