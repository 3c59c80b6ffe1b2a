"""Device taints that evict, on the embedded cluster: the stand-in scheduler honours DeviceTaintRules as
kube-scheduler does and the stand-in eviction controller evicts as kube-controller-manager's device-taint-eviction
controller does (the same scenarios run on the real control plane: tests/kubernetes/test_real_device_taints.py)."""

from __future__ import annotations

import pytest

from clusterkit import StartCluster
from taintkit import (
    a_dead_gpu_xid_evicts_the_pod_using_it,
    a_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource,
    a_taint_rule_evicts_what_does_not_tolerate_it,
)


async def test_a_device_taint_rule_evicts_pods_that_do_not_tolerate_it(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    await a_taint_rule_evicts_what_does_not_tolerate_it(cluster, "dgx-h100-0")


async def test_an_xid_configured_as_fatal_evicts_the_pod_on_that_gpu(start_cluster: StartCluster) -> None:
    cluster = await start_cluster(
        "dgx-h100:1", hardware_poll_seconds=0.1, agent_settings={"health_noexecute_xids": [79]}
    )
    await a_dead_gpu_xid_evicts_the_pod_using_it(cluster, "dgx-h100-0")


@pytest.mark.parametrize("version", ["1.36", "1.37"])
async def test_a_device_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource(
    start_cluster: StartCluster, version: str
) -> None:
    cluster = await start_cluster("dgx-h100:1", kubernetes_version=version)
    await a_taint_rule_evicts_a_pod_holding_a_gpu_as_an_extended_resource(cluster, "dgx-h100-0")
