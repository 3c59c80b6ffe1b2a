"""The stand-in workload controllers: Deployments and Jobs become pods, so the seed articles' Job and Deployment
manifests run in the embedded cluster. Deliberately small: pods are created straight from the pod template, owned by
the workload (no ReplicaSet in between, no rollout), and nothing runs containers, so Jobs never complete."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from gpudra.api.core import Workload
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informer
from gpudra.kube.resources import DEPLOYMENTS, JOBS, PODS
from gpudra.telemetry import get_logger

log = get_logger(__name__)


def desired_pods(workload: dict[str, Any]) -> int:
    """Pure: how many pods the workload wants now (Deployment replicas; Job parallelism capped by completions)."""
    spec = workload.get("spec") or {}
    if workload.get("kind") == "Job":
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions", parallelism)
        return int(min(parallelism, completions if completions is not None else parallelism))
    return int(spec.get("replicas", 1))


def pod_for(workload: dict[str, Any]) -> dict[str, Any]:
    """Pure: a pod from the workload's template, owned by it (controller), named like Kubernetes names them."""
    meta = workload["metadata"]
    template = (workload.get("spec") or {}).get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    if workload["kind"] == "Deployment":
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        generate = f"{meta['name']}-{digest}-"
    else:
        generate = f"{meta['name']}-"
        labels.setdefault("job-name", meta["name"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": workload["apiVersion"],
                    "kind": workload["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.get("spec") or {},
    }


class Workloads:
    """Keeps each Deployment's and Job's pod count at what it wants."""

    def __init__(self, client: KubeClient, pods: Informer) -> None:
        self._client = client
        self._pods = pods
        self.deployments = Informer(client, DEPLOYMENTS, self._on_workload, parse=Workload.model_validate)
        self.jobs = Informer(client, JOBS, self._on_workload, parse=Workload.model_validate)

    async def _on_workload(self, kind: str, body: dict[str, Any]) -> None:
        if kind != "DELETED":
            await self.reconcile(body)

    async def _create(self, workload: dict[str, Any], count: int) -> None:
        """``count`` pods in slow-start batches (1, 2, 4, ...; each batch concurrently), as Kubernetes' workload
        controllers create them: a failing create stops the rest instead of repeating the error count times."""
        namespace = workload["metadata"]["namespace"]
        batch = 1
        while count > 0:
            size = min(batch, count)
            created = await asyncio.gather(
                *(self._client.create(PODS, pod_for(workload), namespace) for _ in range(size))
            )
            for pod in created:
                self._pods.cache[(namespace, pod["metadata"]["name"])] = pod
            count -= size
            batch *= 2

    async def reconcile(self, workload: dict[str, Any]) -> None:
        uid = workload["metadata"]["uid"]
        namespace = workload["metadata"]["namespace"]
        owned = [
            p for (ns, _), p in self._pods.cache.items()
            if ns == namespace and any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
        ]  # fmt: skip
        missing = desired_pods(workload) - len(owned)
        await self._create(workload, max(0, missing))
        for extra in sorted(owned, key=lambda p: p["metadata"]["name"])[: max(0, -missing)]:
            await self._client.delete(PODS, extra["metadata"]["name"], namespace)
        if missing:
            log.info(
                "workload scaled", kind=workload["kind"], name=workload["metadata"]["name"], change=missing
            )
