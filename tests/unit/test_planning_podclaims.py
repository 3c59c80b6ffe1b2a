"""`gpudra explain pod` explains a template's claim not made yet as the claim its template makes (pure; which claims a
pod waits on: tests/unit/test_pod_claims.py)."""

from __future__ import annotations

from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaimTemplate
from gpudra.planning.podclaims import claim_from_template

POD = Pod.model_validate(
    {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "main", "image": "cuda"}],
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "eight"},
                {"name": "spare", "resourceClaimName": "one-gpu"},
                {"name": "later", "resourceClaimTemplateName": "mig"},
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "trainer-gpus-x7k2p"}]},
    }
)


def test_a_claim_not_made_yet_is_the_templates_in_the_pods_namespace() -> None:
    template = ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": "mig", "namespace": "ml"},
            "spec": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "devices": {
                        "requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]
                    }
                },
            },
        }
    )
    claim = claim_from_template(POD, "later", template)
    assert (claim.metadata.namespace, claim.metadata.name, claim.metadata.labels) == (
        "ml",
        "trainer-later",
        {"team": "ml"},
    )
    assert claim.spec == template.spec.spec and claim.allocation is None
