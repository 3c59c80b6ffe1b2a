"""Applying a ComputeDomain's children, and removing everything a domain left behind when it is deleted.

Children are applied with server-side apply (forced, field manager gpudra-controller): one request per
object whether it exists or not, and applying the same desired object twice changes nothing.

Deletion removes, in order, the domain's ResourceClaimTemplates (by the children label, in any namespace),
DaemonSet (in the driver's namespace) and shared channel ResourceSlice (PodGroup scope), its ComputeDomainClique
objects (named ``<uid>.<cliqueID>``, in the
driver's namespace), and its label on every Node.
It never waits for pods: a workload pod stuck Terminating (NVIDIA #380) keeps its own claim, which the
kubelet unprepares without the domain, so the domain's finalizer does not depend on it. Pods still holding
one of the domain's channels are named in the outcome so the user sees what is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpudra.api.computedomain import ComputeDomain
from gpudra.computedomain import (
    CHANNEL_SCOPE_ANNOTATION,
    OBJECT_LABEL,
    DaemonPodSettings,
    DriverNames,
    channel_scope,
    child_selector,
    desired_children,
    node_label_key,
)
from gpudra.config import ControllerSettings
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    DAEMONSETS,
    NODES,
    POD_GROUPS,
    POD_GROUPS_V1ALPHA2,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

_BY_KIND: dict[str, Resource] = {
    "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
    "DaemonSet": DAEMONSETS,
    "ResourceSlice": RESOURCE_SLICES,
}


def daemon_env(settings: ControllerSettings) -> tuple[tuple[str, str], ...]:
    """Pure: the more environment of a domain's IMEX daemon pods. They log as the controller does (its log format
    and level, where not the defaults: the chart's ``logFormat`` and ``logLevel`` reach them too), then
    ``GPUDRA_IMEX_DAEMON_ENV``, which may say otherwise."""
    env: dict[str, str] = {}
    if settings.log_format != "console":
        env["GPUDRA_LOG_FORMAT"] = settings.log_format
    if settings.log_level.upper() != "INFO":
        env["GPUDRA_LOG_LEVEL"] = settings.log_level
    return tuple((env | settings.imex_daemon_env).items())


async def apply_children(
    client: KubeClient, domain: ComputeDomain, settings: ControllerSettings
) -> list[str]:
    """Apply every desired child of ``domain``; the ``kind namespace/name`` of each, for the log."""
    children = desired_children(
        domain,
        drivers=DriverNames(compute_domain=settings.compute_domain_driver),
        driver_namespace=settings.namespace,
        daemon_image=settings.imex_daemon_image,
        mode=settings.imex_daemon_mode,
        pods=DaemonPodSettings(
            image_pull_secrets=tuple(settings.imex_daemon_image_pull_secrets),
            env=daemon_env(settings),
        ),
    )
    applied = []
    for child in children.objects():
        meta = child["metadata"]
        namespace = meta.get("namespace")
        await client.patch(
            _BY_KIND[child["kind"]], meta["name"], child, namespace, patch_type="apply", force=True
        )
        applied.append(f"{child['kind']} {namespace + '/' if namespace else ''}{meta['name']}")
    return applied


async def scope_warning(client: KubeClient, domain: ComputeDomain) -> str | None:
    """What a PodGroup-scoped domain cannot do on this cluster, or None: without the PodGroup API every pod's
    claim asks for the domain's one channel, so only one pod at a time can run."""
    if channel_scope(domain) != "PodGroup":
        return None
    for pod_groups in (POD_GROUPS, POD_GROUPS_V1ALPHA2):
        if await client.serves(pod_groups):
            return None
    return (
        f"{CHANNEL_SCOPE_ANNOTATION}: PodGroup needs PodGroups (scheduling.k8s.io/v1beta1, or v1alpha2 on "
        "Kubernetes 1.36), and this API server does not serve them: each pod's claim would ask for the domain's one "
        "channel, so only one pod could run. Turn on the GenericWorkload and DRAWorkloadResourceClaims feature "
        "gates (Kubernetes 1.37, with --runtime-config=scheduling.k8s.io/v1beta1=true; 1.36: v1alpha2), or remove "
        "the annotation"
    )


@dataclass
class Cleanup:
    """What one deletion pass removed, what it could not, and which pods still hold a channel."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    holding_pods: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"removed {len(self.removed)} object(s)"
        if self.removed:
            text += f" ({', '.join(self.removed)})"
        if self.failed:
            text += f"; could not remove: {'; '.join(self.failed)}"
        if self.holding_pods:
            text += (
                f"; not waited for: pod(s) {', '.join(self.holding_pods)} still hold a channel claim of this "
                "domain (they keep running until they end or are deleted)"
            )
        return text


def cleanup_verdict(
    outcome: Cleanup, attempt: int, attempts: int
) -> Literal["complete", "retry", "incomplete"]:
    """After deletion pass ``attempt`` (0-based) of at most ``attempts``: done, try again, or give up and
    release the finalizer anyway (bounded: a domain never hangs in Terminating)."""
    if not outcome.failed:
        return "complete"
    return "retry" if attempt + 1 < attempts else "incomplete"


async def _delete_all(
    client: KubeClient, res: Resource, items: list[dict[str, Any]], outcome: Cleanup
) -> None:
    for item in items:
        meta = item["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        what = f"{res.kind} {where}{meta['name']}"
        try:
            await client.delete(res, str(meta["name"]), meta.get("namespace"))
            outcome.removed.append(what)
        except KubeError as exc:
            outcome.failed.append(f"{what}: {exc}")


async def remove_children(client: KubeClient, uid: str, driver_namespace: str) -> Cleanup:
    """One pass removing everything of domain ``uid``; failures are collected, never raised."""
    outcome = Cleanup()
    selector = ",".join(f"{k}={v}" for k, v in child_selector(uid).items())
    # templates: in the domain's namespace and the driver's; the DaemonSet and cliques: the driver's only; the
    # shared channel's ResourceSlice (PodGroup scope) is cluster-scoped
    children = ((RESOURCE_CLAIM_TEMPLATES, None), (DAEMONSETS, driver_namespace), (RESOURCE_SLICES, None))
    for res, namespace in children:
        try:
            items, _ = await client.list_raw(res, namespace, label_selector=selector)
        except KubeError as exc:
            outcome.failed.append(f"listing {res.plural}: {exc}")
            continue
        await _delete_all(client, res, items, outcome)
    try:
        cliques, _ = await client.list_raw(COMPUTE_DOMAIN_CLIQUES, driver_namespace)
        mine = [c for c in cliques if str(c["metadata"]["name"]).startswith(f"{uid}.")]
        await _delete_all(client, COMPUTE_DOMAIN_CLIQUES, mine, outcome)
    except KubeError as exc:
        outcome.failed.append(f"listing computedomaincliques: {exc}")
    key = node_label_key(uid)
    try:
        nodes, _ = await client.list_raw(NODES, label_selector=key)
    except KubeError as exc:
        outcome.failed.append(f"listing nodes labelled {key}: {exc}")
        nodes = []
    for node in nodes:
        name = node["metadata"]["name"]
        try:
            await client.patch(NODES, name, {"metadata": {"labels": {key: None}}})
            outcome.removed.append(f"label {key} of node {name}")
        except KubeError as exc:
            outcome.failed.append(f"label {key} of node {name}: {exc}")
    try:
        claims, _ = await client.list_raw(RESOURCE_CLAIMS, label_selector=f"{OBJECT_LABEL}={uid}")
    except KubeError:
        claims = []  # only informative
    for claim in claims:
        namespace = claim["metadata"].get("namespace", "")
        for consumer in (claim.get("status") or {}).get("reservedFor") or []:
            outcome.holding_pods.append(f"{namespace}/{consumer.get('name', '?')}")
    outcome.holding_pods.sort()
    return outcome
