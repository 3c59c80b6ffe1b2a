"""ComputeDomain watch objects as the controller's DomainView meets them: a domain, a channel claim allocated on a
node, a node with its NVLink clique label, and the clique object its daemons registered in (all Ready)."""

from __future__ import annotations

from typing import Any

from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.core import Node
from gpudra.api.dra import ResourceClaim
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.computedomain.names import OBJECT_LABEL, node_label_key

C1 = "cluster-1.1"


def domain(name: str, uid: str, version: str = "1") -> ComputeDomain:
    return ComputeDomain.model_validate({
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": "team", "uid": uid, "resourceVersion": version},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    })  # fmt: skip


def claim(
    uid: str, node: str | None, device_class: str = "compute-domain-default-channel.nvidia.com"
) -> ResourceClaim:
    body: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "team", "labels": {OBJECT_LABEL: uid}},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}},
    }
    if node is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        body["status"] = {"allocation": {"nodeSelector": {"nodeSelectorTerms": [term]}}}
    return ResourceClaim.model_validate(body)


def node(name: str, clique: str | None, *domains: str) -> Node:
    labels = {node_label_key(uid): "true" for uid in domains}
    if clique is not None:
        labels[CLIQUE_LABEL] = clique
    return Node.model_validate({"metadata": {"name": name, "labels": labels}})


def clique(uid: str, *nodes: str) -> ComputeDomainClique:
    daemons = [
        {"nodeName": n, "ipAddress": "10.0.0.1", "cliqueID": C1, "index": i, "status": "Ready"}
        for i, n in enumerate(nodes)
    ]
    return ComputeDomainClique.model_validate(
        {"metadata": {"name": f"{uid}.{C1}", "namespace": "gpudra"}, "daemons": daemons}
    )
