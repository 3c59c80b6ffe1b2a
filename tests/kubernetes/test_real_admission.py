"""RBAC and admission enforced for real: each agent holds the gpudra-agent ServiceAccount's token bound to its
node, and the base's ValidatingAdmissionPolicy keeps it to its own node's ResourceSlices."""

from __future__ import annotations

from typing import Any

from _realkit import StartKubernetes, admin

from clusterkit import eventually
from gpudra.errors import KubeError
from gpudra.kube.resources import RESOURCE_SLICES


def a_slice(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
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
    created = await agent_a.create(RESOURCE_SLICES, a_slice("own", "l4x4-0"))
    assert created["spec"]["nodeName"] == "l4x4-0"
    await agent_a.delete(RESOURCE_SLICES, "own")
