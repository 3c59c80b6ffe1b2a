"""On kube-apiserver and kube-scheduler 1.37.2, `kubectl describe pod` says why a pod waits in gpudra's words, not
only kube-scheduler's "cannot allocate all claims": the controller posts the explanation of the pod's claim on the
pod, and for a pod asking for an extended resource (which kube-scheduler gives a claim only once a node fits) the
explanation of the claim kube-scheduler would make."""

from __future__ import annotations

from _realkit import StartKubernetes, claims, events_of

from clusterkit import eventually
from podexplainkit import (
    MIG_1G_12GB_NAMESPACE,
    check_claim_made_twice_names_the_first,
    check_claim_not_made_is_explained,
    check_gated_pod_is_explained,
    check_mig_1g_12gb_pod_is_explained,
    check_missing_claim_is_said_as_a_kubelet_says,
    check_node_filters_are_explained,
    check_pod_kept_off_by_cpu_says_kube_schedulers_words,
    check_prebound_pod_is_explained,
    check_unprepared_claim_is_explained,
    check_unregistered_driver_is_explained,
    check_waiting_pod_is_explained,
    check_web_view_shows_the_mig_1g_12gb_claim,
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


async def test_a_claim_its_driver_refused_to_prepare_is_explained_as_a_real_kubelet_retries_it(
    start_kubernetes: StartKubernetes,
) -> None:
    """The real kubelet's Warning in its own words; `gpudra explain` and the web view read the refusal from the
    claim's status, where the agent writes it after answering that kubelet."""
    cluster = await start_kubernetes(
        "dgx-h100:1", web_port=0, real_kubelets=1, agent_settings={"mps_support": False}
    )
    await check_unprepared_claim_is_explained(cluster, "dgx-h100-0")


async def test_a_pod_whose_node_has_no_agent_says_what_the_real_kubelet_says(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1", real_kubelets=1, agent_processes=True)
    await check_unregistered_driver_is_explained(cluster, "dgx-h100-0")


async def test_a_pod_is_explained_over_the_nodes_kube_schedulers_filters_let_it_go_to(
    start_kubernetes: StartKubernetes,
) -> None:
    """gpudra explain names the nodes the pod cannot go to as kube-scheduler counts them."""
    cluster = await start_kubernetes("dgx-h100:1,l4x4:1", web_port=0)
    await check_node_filters_are_explained(cluster)

    async def scheduler_said(pod: str) -> list[str]:
        return [e["message"] for e in await events_of(cluster, pod) if e["reason"] == "FailedScheduling"]

    picky = await eventually(lambda: scheduler_said("picky"), timeout=60, what="kube-scheduler on picky")
    assert any("1 node(s) had untolerated taint(s)" in m for m in picky), picky
    nowhere = await eventually(
        lambda: scheduler_said("nowhere"), timeout=60, what="kube-scheduler on nowhere"
    )
    assert any(
        m.startswith(
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector,"
            " 1 node(s) had untolerated taint(s)."
        )
        for m in nowhere
    ), nowhere


async def test_a_claim_made_twice_for_a_running_pod_names_the_first_which_the_kubelet_unprepares(
    start_kubernetes: StartKubernetes,
) -> None:
    """With a real kubelet: it unprepares the claims it prepared for the pod, whatever the status names."""
    await check_claim_made_twice_names_the_first(await start_kubernetes("dgx-h100:1", real_kubelets=1))


async def test_a_pod_whose_claim_kube_controller_manager_cannot_make_says_its_words(
    start_kubernetes: StartKubernetes,
) -> None:
    """The template missing, and a namespace's device quota (kube-controller-manager's quota controller counts it,
    kube-apiserver's ResourceQuota admission refuses the claim)."""
    await check_claim_not_made_is_explained(await start_kubernetes("dgx-h100:1", web_port=0), quota=True)


async def test_a_pod_held_by_a_scheduling_gate_says_so_and_runs_once_it_is_removed(
    start_kubernetes: StartKubernetes,
) -> None:
    await check_gated_pod_is_explained(await start_kubernetes("dgx-h100:1", web_port=0))


async def test_a_pod_whose_claims_fit_ends_with_what_kube_scheduler_says(
    start_kubernetes: StartKubernetes,
) -> None:
    await check_pod_kept_off_by_cpu_says_kube_schedulers_words(
        await start_kubernetes("dgx-h100:1", web_port=0)
    )
