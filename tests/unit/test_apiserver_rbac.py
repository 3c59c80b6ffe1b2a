"""The embedded API server decides RBAC as kube-apiserver's RBAC authorizer does: a RoleBinding grants a
ClusterRole's rules in its own namespace only, resourceNames and subresources narrow a rule, ServiceAccount and
Group subjects match by the authenticated user's name and groups, and nonResourceURLs match exactly or by a
trailing ``*``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpudra.cluster.apiserver.identity import ADMIN, Identity, TokenIssuer, node_identity, service_account
from gpudra.cluster.apiserver.rbac import Attributes, Policy, forbidden
from gpudra.cluster.apiserver.requestinfo import request_info

AGENT = service_account("gpudra", "gpudra-agent")
READER: dict[str, Any] = {
    "kind": "ClusterRole",
    "metadata": {"name": "reader"},
    "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["mine"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch"]},
    ],
}


def bound(kind: str, namespace: str | None, subject: dict[str, str]) -> dict[str, Any]:
    meta = {"name": "b", **({"namespace": namespace} if namespace else {})}
    return {
        "kind": kind,
        "metadata": meta,
        "roleRef": {"kind": "ClusterRole", "name": "reader"},
        "subjects": [subject],
    }


def test_a_rolebinding_grants_a_clusterroles_rules_in_its_namespace_only() -> None:
    policy = Policy(
        [READER, bound("RoleBinding", "gpudra", {"kind": "ServiceAccount", "name": "gpudra-agent"})]
    )
    mine = Attributes("get", resource="configmaps", namespace="gpudra", name="mine")
    assert policy.allows(AGENT, mine)
    assert not policy.allows(
        AGENT, Attributes("get", resource="configmaps", namespace="default", name="mine")
    )
    assert not policy.allows(
        AGENT, Attributes("get", resource="configmaps", namespace="gpudra", name="other")
    )
    assert not policy.allows(AGENT, Attributes("list", resource="configmaps", namespace="gpudra"))
    assert not policy.allows(service_account("other", "gpudra-agent"), mine)


def test_a_subresource_is_granted_by_its_own_name_only() -> None:
    policy = Policy([READER, bound("ClusterRoleBinding", None, {"kind": "Group", "name": "team"})])
    status = Attributes("patch", group="resource.k8s.io", resource="resourceclaims", subresource="status")
    member = Identity("someone", ("team",))
    assert policy.allows(member, replace(status, namespace="default"))
    assert not policy.allows(member, Attributes("patch", group="resource.k8s.io", resource="resourceclaims"))
    assert not policy.allows(Identity("someone"), status)


def test_the_bootstrap_policy_lets_masters_do_anything_and_everyone_read_discovery() -> None:
    policy = Policy()
    assert policy.allows(ADMIN, Attributes("delete", resource="nodes", name="x"))
    assert policy.allows(AGENT, Attributes("get", path="/apis/resource.k8s.io/v1"))
    assert not policy.allows(AGENT, Attributes("get", path="/debug/gpudra/conflicts"))
    assert not policy.allows(AGENT, Attributes("list", resource="secrets", namespace="gpudra"))
    assert policy.allows(node_identity("n"), Attributes("create", resource="pods", namespace="x"))


def test_the_403_is_kube_apiservers() -> None:
    refused = forbidden(AGENT, Attributes("patch", resource="nodes", subresource="status", name="b"))
    assert refused.status == 403
    assert refused.message == (
        'nodes "b" is forbidden: User "system:serviceaccount:gpudra:gpudra-agent" cannot patch resource '
        '"nodes/status" in API group "" at the cluster scope'
    )


def test_a_token_is_accepted_only_from_its_issuer_and_unchanged() -> None:
    issuer = TokenIssuer()
    token = issuer.issue(AGENT)
    assert issuer.verify(token) == AGENT
    prefix, _, signature = token.split(".")
    admin_payload = issuer.issue(ADMIN).split(".")[1]
    assert issuer.verify(f"{prefix}.{admin_payload}.{signature}") is None
    assert TokenIssuer().verify(token) is None
    assert issuer.verify("gpudra.x") is None


def test_a_request_is_read_from_its_url_as_kube_apiservers_request_info_reads_it() -> None:
    def info(method: str, path: str, **query: str) -> Attributes:
        return request_info(method, path, query)

    assert info("GET", "/api/v1/namespaces/ns1") == Attributes(
        "get", resource="namespaces", namespace="ns1", name="ns1"
    )
    assert info("PUT", "/api/v1/namespaces/ns1/finalize") == Attributes(
        "update", resource="namespaces", subresource="finalize", namespace="ns1", name="ns1"
    )
    assert info("GET", "/api/v1/namespaces/ns1/pods", watch="true") == Attributes(
        "watch", resource="pods", namespace="ns1"
    )
    assert info(
        "GET", "/apis/resource.k8s.io/v1/resourceslices", fieldSelector="metadata.name==s"
    ) == Attributes("list", group="resource.k8s.io", resource="resourceslices", name="s")
    assert info("GET", "/api/v1/watch/namespaces/ns1/pods/p") == Attributes(
        "watch", resource="pods", namespace="ns1", name="p"
    )
    assert info("GET", "/api/v1/namespaces/ns1/pods/p", watch="true") == Attributes(
        "get", resource="pods", namespace="ns1", name="p"
    )
    assert info("POST", "/api/v1/namespaces/ns1/pods/p/binding") == Attributes(
        "create", resource="pods", subresource="binding", namespace="ns1", name="p"
    )
    assert info("DELETE", "/apis/apps/v1/namespaces/ns1/daemonsets") == Attributes(
        "deletecollection", group="apps", resource="daemonsets", namespace="ns1"
    )
    assert info("GET", "/apis/resource.k8s.io/v1") == Attributes("get", path="/apis/resource.k8s.io/v1")
    assert info("GET", "/healthz") == Attributes("get", path="/healthz")
