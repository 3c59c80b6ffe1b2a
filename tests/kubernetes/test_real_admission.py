"""RBAC and admission enforced for real: each agent holds the gpudra-agent ServiceAccount's token bound to its
node, and the base's ValidatingAdmissionPolicy keeps it to its own node's ResourceSlices and its own node's pool."""

from __future__ import annotations

from typing import Any

import pytest
from _realkit import StartKubernetes, admin

from clusterkit import eventually
from gpudra.errors import KubeError
from gpudra.kube.resources import RESOURCE_SLICES


def a_slice(name: str, node: str, pool: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-99", "attributes": {"type": {"string": "gpu"}}}],
        },
    }


async def test_an_agent_may_write_only_its_own_nodes_slices(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("l4x4:2")
    agent_a = cluster.agent_clients["l4x4-0"]

    async def refused() -> KubeError | None:
        """The policy, once kube-apiserver has loaded it (policies take effect a moment after they are created)."""
        try:
            await agent_a.create(RESOURCE_SLICES, a_slice("forged", "l4x4-1"))
        except KubeError as exc:
            return exc
        await admin(cluster).delete(RESOURCE_SLICES, "forged")
        return None

    error = await eventually(refused, timeout=60)
    assert error.status == 422
    assert "gpudra-agent-own-node-slices" in str(error)
    assert "the gpudra agent on node l4x4-0 may not write ResourceSlices of node l4x4-1" in str(error)
    # its own node's name with another node's pool, at a higher generation: the scheduler would take it for node
    # B's pool and hand out B's devices to pods on A
    forged = a_slice("forged-pool", "l4x4-0", pool="l4x4-1")
    forged["spec"]["pool"]["generation"] = 1000
    with pytest.raises(KubeError) as caught:
        await agent_a.create(RESOURCE_SLICES, forged)
    assert caught.value.status == 422
    assert "may publish only its own node's pool l4x4-0, not pool l4x4-1" in str(caught.value)
    created = await agent_a.create(RESOURCE_SLICES, a_slice("own", "l4x4-0"))
    assert created["spec"]["nodeName"] == "l4x4-0"
    await agent_a.delete(RESOURCE_SLICES, "own")
