"""The stand-in DaemonSet controller: one pod per node that matches the DaemonSet's nodeSelector.

Like kube-controller-manager's, it reacts to DaemonSets and to Node label changes (a ComputeDomain's node
label is what schedules its IMEX daemon). Pods are made from the template, owned by the DaemonSet, and pinned
to their node by adding ``kubernetes.io/hostname`` to the pod's nodeSelector (the real controller uses node
affinity on metadata.name), so the stand-in scheduler still allocates the pod's claims and binds it. Pods
on nodes that no longer match, and pods of a deleted DaemonSet, are deleted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpudra.api.core import Workload
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informer
from gpudra.kube.resources import DAEMONSETS, PODS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
HOSTNAME_LABEL = "kubernetes.io/hostname"


def matching_nodes(daemon_set: dict[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    """Pure: the nodes whose labels satisfy the pod template's nodeSelector (sorted)."""
    selector = (((daemon_set.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "nodeSelector"
    ) or {}
    found = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            found.append(node["metadata"]["name"])
    return sorted(found)


DAEMON_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
]
"""What the DaemonSet controller adds to every daemon pod: it runs on nodes that are cordoned or under pressure."""


def daemon_pod(daemon_set: dict[str, Any], node: str) -> dict[str, Any]:
    """Pure: the DaemonSet's pod for ``node``."""
    meta = daemon_set["metadata"]
    template = (daemon_set.get("spec") or {}).get("template") or {}
    spec = dict(template.get("spec") or {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), HOSTNAME_LABEL: node}
    spec["tolerations"] = [*(spec.get("tolerations") or []), *DAEMON_TOLERATIONS]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def pod_node(pod: dict[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL) or "")


class DaemonSets:
    def __init__(self, client: KubeClient, pods: Informer, nodes: Informer) -> None:
        """``pods`` and ``nodes``: the control plane's informers (not run yet), shared: one cache of each."""
        self._client = client
        self._pods = pods
        self.daemonsets = Informer(client, DAEMONSETS, self._on_daemon_set, parse=Workload.model_validate)
        self.nodes = nodes
        nodes.subscribe(self._on_node)
        self._lock = asyncio.Lock()

    @property
    def informers(self) -> list[Informer]:
        """The informers of its own (the shared ones run with the control plane's)."""
        return [self.daemonsets]

    async def _on_daemon_set(self, kind: str, body: dict[str, Any]) -> None:
        await self.reconcile(body, deleted=kind == "DELETED")

    async def _on_node(self, kind: str, body: dict[str, Any]) -> None:
        for daemon_set in list(self.daemonsets.cache.values()):
            await self.reconcile(daemon_set)

    def _owned(self, daemon_set: dict[str, Any]) -> list[dict[str, Any]]:
        uid = daemon_set["metadata"]["uid"]
        return [
            p
            for p in self._pods.cache.values()
            if not p["metadata"].get("deletionTimestamp")
            and any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    async def reconcile(self, daemon_set: dict[str, Any], *, deleted: bool = False) -> None:
        async with self._lock:  # node and DaemonSet events must not both create the same pod
            namespace = daemon_set["metadata"]["namespace"]
            wanted = set() if deleted else set(matching_nodes(daemon_set, list(self.nodes.cache.values())))
            have: dict[str, dict[str, Any]] = {}
            for pod in self._owned(daemon_set):
                node = pod_node(pod)
                if node in wanted and node not in have:
                    have[node] = pod
                else:
                    await self._client.delete(PODS, pod["metadata"]["name"], namespace)
                    self._pods.cache.pop((namespace, pod["metadata"]["name"]), None)
                    log.info("daemon pod deleted", daemonset=daemon_set["metadata"]["name"], node=node)
            for node in sorted(wanted - set(have)):
                created = await self._client.create(PODS, daemon_pod(daemon_set, node), namespace)
                self._pods.cache[(namespace, created["metadata"]["name"])] = created
                log.info("daemon pod created", daemonset=daemon_set["metadata"]["name"], node=node)
