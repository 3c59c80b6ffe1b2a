"""Device taints that evict, on the real control plane: kube-scheduler honours an admin's DeviceTaintRule and
kube-controller-manager's device-taint-eviction-controller evicts the pods that do not tolerate a NoExecute taint,
whether from a rule or from gpudra's own health taint raised to NoExecute (the same scenarios as the embedded
cluster's tests/integration/test_device_taints.py)."""

from __future__ import annotations

from _realkit import StartKubernetes

from taintkit import (
    a_dead_gpu_xid_evicts_the_pod_using_it,
    a_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource,
    a_taint_rule_evicts_what_does_not_tolerate_it,
)


async def test_a_device_taint_rule_evicts_pods_that_do_not_tolerate_it(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1")
    await a_taint_rule_evicts_what_does_not_tolerate_it(cluster, "dgx-h100-0")


async def test_an_xid_configured_as_fatal_evicts_the_pod_on_that_gpu(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1", agent_settings={"health_noexecute_xids": [79]})
    await a_dead_gpu_xid_evicts_the_pod_using_it(cluster, "dgx-h100-0")


async def test_a_device_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1")
    await a_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource(cluster, "dgx-h100-0")
