"""`gpudra explain pod`'s list of a pod's claims (pure): named claims, template claims by the name the pod's status
gives, and a template claim not made yet as the claim its template makes."""

from __future__ import annotations

from gpudra.api.core import Pod
from gpudra.api.dra import ResourceClaimTemplate
from gpudra.planning.podclaims import PodClaim, claim_from_template, pod_claims

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


def test_each_entry_is_its_claim_or_the_template_that_makes_it() -> None:
    assert pod_claims(POD) == [
        PodClaim("gpus", "template", name="trainer-gpus-x7k2p", template="eight"),
        PodClaim("spare", "named", name="one-gpu"),
        PodClaim("later", "template", template="mig"),
    ]
    assert pod_claims(Pod.model_validate({"metadata": {"name": "plain"}, "spec": {"containers": []}})) == []


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
