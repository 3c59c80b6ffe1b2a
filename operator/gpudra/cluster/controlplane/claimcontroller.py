"""The stand-in resourceclaim controller's making of claims: a pod's ResourceClaims created from its
ResourceClaimTemplates, and its one claim for extended resources backed by DRA (kube-scheduler makes that one in
Kubernetes), both recorded in the pod's status; and the names of all the claims of a pod, found in the caches.

What the claims look like is decided by the pure ``claims`` and ``extended`` modules; this class reads the caches,
creates, and writes the pod's status.
"""

from __future__ import annotations

from typing import Any

from gpudra.api.core import Pod, PodResourceClaim
from gpudra.api.dra import ResourceClaimTemplate
from gpudra.api.meta import ObjectMeta
from gpudra.cluster.controlplane.claims import claim_from_template
from gpudra.cluster.controlplane.extended import class_for_resource, extended_claim, extended_status
from gpudra.cluster.controlplane.state import ClusterState
from gpudra.errors import KubeError, is_transient
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.planning.claimcreation import CREATE_WARNING
from gpudra.planning.podclaims import (
    EXTENDED_CLAIM_ANNOTATION,
    ExtendedRequest,
    extended_requests,
    is_generated_for,
    pod_claim_names,
)


class ClaimController:
    def __init__(self, client: KubeClient, state: ClusterState, events: EventRecorder) -> None:
        self._client = client
        self._state = state
        self._events = events

    async def make(self, pod: Pod, body: dict[str, Any]) -> bool:
        """Create the pod's missing claims and record them in its status (one write for all); False while a
        template it names does not exist (a Warning Event on the pod says which)."""
        complete, status = await self._from_templates(pod, body)
        extended = self.extended_requests(pod)
        if complete and extended:
            name = await self._extended_claim(pod, extended)
            status["extendedResourceClaimStatus"] = extended_status(name, extended)
        await self._record(pod, body, status)
        return complete

    async def make_for_bound(self, pod: Pod, body: dict[str, Any]) -> bool:
        """The claims of a pod bound to a node from its creation (``spec.nodeName``), as kube-controller-manager
        makes them: those of its templates, recorded in its status (no scheduler will allocate them, and none makes
        its extended-resource claim); False while a template it names does not exist."""
        complete, status = await self._from_templates(pod, body)
        await self._record(pod, body, status)
        return complete

    async def _record(self, pod: Pod, body: dict[str, Any], status: dict[str, Any]) -> None:
        have = body.get("status") or {}
        changed = {k: v for k, v in status.items() if have.get(k) != v}
        if changed:
            await self._client.patch(
                PODS,
                pod.metadata.name or "",
                {"status": changed},
                pod.metadata.namespace,
                subresource="status",
            )

    def names(self, pod: Pod) -> list[str] | None:
        """The names of every claim of the pod, from the caches; None if one of those made for it is missing."""
        names = []
        for pod_claim_name, name in pod_claim_names(pod).items():
            found = name or self._find_generated(pod, pod_claim_name)
            if found is None:
                return None
            names.append(found)
        if self.extended_requests(pod):
            extended = self._find_extended(pod)
            if extended is None:
                return None
            names.append(extended)
        return names

    def extended_requests(self, pod: Pod) -> list[ExtendedRequest]:
        return extended_requests(pod, class_for_resource(list(self._state.classes.cache.values())))

    async def _from_templates(self, pod: Pod, body: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Create missing claims from templates: whether every template was there, and the pod status
        (``resourceClaimStatuses``) that records the claims made so far."""
        recorded = pod_claim_names(pod)
        statuses = []
        complete = True
        for pod_claim in pod.spec.resource_claims or []:
            if not pod_claim.resource_claim_template_name:
                continue
            name = recorded[pod_claim.name] or self._find_generated(pod, pod_claim.name)
            if name is None:
                name = await self._create_from_template(pod, pod_claim, body)
                if name is None:
                    complete = False
                    continue
            statuses.append({"name": pod_claim.name, "resourceClaimName": name})
        return complete, ({"resourceClaimStatuses": statuses} if statuses else {})

    async def _create_from_template(
        self, pod: Pod, pod_claim: PodResourceClaim, body: dict[str, Any]
    ) -> str | None:
        """The name of the claim created for ``pod_claim``; None, and a Warning in a 1.37 kube-controller-manager's
        words, when its template is missing or the API server refuses the claim."""
        namespace = pod.metadata.namespace or "default"
        template_name = pod_claim.resource_claim_template_name or ""
        template_body = self._state.templates.cache.get((namespace, template_name))
        failed = f"PodResourceClaim {pod_claim.name}: "
        if template_body is None:
            await self._events.post(
                body,
                "Warning",
                CREATE_WARNING,
                f'{failed}resource claim template "{template_name}": resourceclaimtemplate.resource.k8s.io'
                f' "{template_name}" not found',
            )
            return None
        template = ResourceClaimTemplate.model_validate(template_body)
        try:
            created = await self._client.create(
                RESOURCE_CLAIMS, claim_from_template(pod, pod_claim, template), namespace
            )
        except KubeError as exc:
            if is_transient(exc):
                raise
            await self._events.post(
                body, "Warning", CREATE_WARNING, f"{failed}create ResourceClaim : {exc.detail}"
            )
            return None
        self._state.remember_claim(created)
        return str(created["metadata"]["name"])

    async def _extended_claim(self, pod: Pod, requests: list[ExtendedRequest]) -> str:
        """The name of the pod's one claim for extended resources backed by DRA, created once."""
        name = self._find_extended(pod)
        if name is None:
            namespace = pod.metadata.namespace or "default"
            created = await self._client.create(RESOURCE_CLAIMS, extended_claim(pod, requests), namespace)
            self._state.remember_claim(created)
            name = str(created["metadata"]["name"])
        return name

    def _owned(self, pod: Pod) -> list[ObjectMeta]:
        """The metadata of the cached claims the pod owns, in its namespace."""
        metas = [
            ObjectMeta.model_validate(c["metadata"]) for c in self._state.owned_claims(pod.metadata.uid or "")
        ]
        return [m for m in metas if m.namespace == pod.metadata.namespace]

    def _find_extended(self, pod: Pod) -> str | None:
        for meta in self._owned(pod):
            if (meta.annotations or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true":
                return meta.name
        return None

    def _find_generated(self, pod: Pod, pod_claim_name: str) -> str | None:
        for meta in self._owned(pod):
            if is_generated_for(meta, pod, pod_claim_name):
                return meta.name
        return None
