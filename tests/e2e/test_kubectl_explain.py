"""`kubectl explain` on the embedded cluster: the server's OpenAPI v3 documents carry the schemas, so every field of
the project's CRDs and of the built-in kinds is described (tests/kubernetes/test_real_kubectl.py compares the text
with the real kube-apiserver's)."""

from __future__ import annotations

import shutil

import pytest

from clusterkit import StartCluster, described_fields, first_words, kubectl
from gpudra.api.crd import CustomResource
from gpudra.api.crdgen import CRD_MODELS, openapi_schema
from gpudra.cluster.sim.gpufault import GpuFault
from gpudra.cluster.up import EmbeddedCluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("l4x4:1")


async def test_every_field_of_the_crds_is_described(cluster: EmbeddedCluster) -> None:
    models: tuple[type[CustomResource], ...] = (*CRD_MODELS, GpuFault)
    for model in models:
        plural = model.crd.plural
        described = [
            (p, d) for p, d in described_fields(openapi_schema(model)) if p not in ("apiVersion", "kind")
        ]
        assert described, plural
        for parent in sorted({p.rpartition(".")[0] for p, _ in described}):
            text = " ".join(
                (await kubectl(cluster, "explain", f"{plural}.{parent}" if parent else plural)).split()
            )
            for path, description in described:
                if path.rpartition(".")[0] == parent:
                    assert first_words(description) in text, f"kubectl explain {plural}.{path}"


async def test_built_in_kinds_are_explained_with_their_types(cluster: EmbeddedCluster) -> None:
    said = await kubectl(cluster, "explain", "resourceclaims.spec.devices.requests.exactly")
    assert "GROUP:      resource.k8s.io" in said and "FIELD: exactly <ExactDeviceRequest>" in said
    assert "count\t<integer>" in said and "deviceClassName\t<string> -required-" in said
    said = await kubectl(cluster, "explain", "pods.spec.resourceClaims")
    assert (
        "FIELD: resourceClaims <[]PodResourceClaim>" in said and "resourceClaimTemplateName\t<string>" in said
    )


async def test_an_unknown_field_is_refused_as_kubectl_refuses_it_on_a_real_cluster(
    cluster: EmbeddedCluster,
) -> None:
    said = await kubectl(cluster, "explain", "resourceclaims.spec.cout", check=False)
    assert 'field "cout" does not exist' in said
