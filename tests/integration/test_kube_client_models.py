"""The client layer hands product code models, not wire dicts: reads come back parsed, and an object that does not
parse as the model asked for is a clear error naming it, not a KeyError deep in a handler."""

from __future__ import annotations

import pytest

from gpudra.api.dra import ResourceSlice
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.errors import InvalidInputError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import CONFIGMAPS, NODES, RESOURCE_CLAIMS, TypedResource


async def test_reads_come_back_as_models_and_a_mismatch_names_the_object(
    apiserver: EmbeddedAPIServer,
) -> None:
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        claim = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c1", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        }  # fmt: skip
        await client.create(RESOURCE_CLAIMS, claim, "default")
        nodes, version = await client.list(NODES)
        assert [n.metadata.name for n in nodes] == ["n1"] and version
        read = await client.get(RESOURCE_CLAIMS, "c1", "default")
        assert read.metadata.namespaced_name == "default/c1" and read.allocation is None
        await client.create(CONFIGMAPS, {"metadata": {"name": "not-a-slice"}, "data": {}}, "default")
        configmaps_as_slices = TypedResource(
            "", "v1", "configmaps", "ConfigMap", namespaced=True, model=ResourceSlice
        )
        with pytest.raises(InvalidInputError, match="ConfigMap default/not-a-slice does not parse: spec: "):
            await client.list(configmaps_as_slices, "default")
    finally:
        await client.close()
