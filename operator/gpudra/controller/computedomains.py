"""kopf handlers of the ComputeDomain controller (thin: parse, call the pure core, apply, map errors).

- create / resume: apply the domain's children (``domainchildren.apply_children``), and warn (Event
  PodGroupsNotServed) when a PodGroup-scoped domain is on a cluster without PodGroups; kopf holds the
  finalizer ``gpudra.dev/controller`` from the first sight of the domain because a delete handler exists.
- delete: ``remove_children``; a pass that could not remove everything is retried a bounded number of
  times (``computedomain_cleanup_attempts``), then the finalizer is released anyway with a Warning Event
  naming what is left, so a domain never hangs in Terminating (NVIDIA #380).
- events of domains (kopf) and, from the process's shared informers, their claims, Nodes, and (in the driver's
  namespace) their ComputeDomainClique objects and daemon pods feed the ``DomainView``;
  the ``DomainStatusWriter`` recomputes and writes status for the domains an event touched.
"""

from __future__ import annotations

from typing import Any

import kopf

from gpudra.api.computedomain import GROUP, VERSION, ComputeDomain, ComputeDomainClique
from gpudra.api.core import Node, Pod
from gpudra.computedomain import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, DomainView
from gpudra.config import ControllerSettings
from gpudra.controller.bodies import body_key, parse_body
from gpudra.controller.domainchildren import apply_children, cleanup_verdict, remove_children, scope_warning
from gpudra.controller.domainstatus import DomainStatusWriter
from gpudra.errors import InvalidInputError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informers
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, NODES, PODS
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CLEANUP_RETRY_SECONDS = 1.0
CHANGE_HANDLED_KINDS = frozenset({"ComputeDomain"})
"""The kinds the controller has kopf change handlers for (create, resume, delete below): the only ones whose
last handled state kopf must keep (controller/diffbase.py)."""
DAEMON_POD_SELECTOR = f"{COMPONENT_LABEL}=daemon,{MANAGED_BY_LABEL}={MANAGED_BY}"


def register_compute_domains(
    registry: kopf.OperatorRegistry,
    informers: Informers,
    settings: ControllerSettings,
    metrics: Metrics,
    client: KubeClient,
) -> DomainStatusWriter:
    """The ComputeDomain handlers, and the informers' changes that feed the returned writer (run it beside kopf:
    ``writer.run()``). Claims are not watched here: the controller's one claim handler hands each change to the
    writer (``claim_changed``)."""
    events = EventRecorder(client, "gpudra-controller")
    view = DomainView(mode=settings.imex_daemon_mode, span_cliques=settings.computedomain_span_cliques)
    writer = DomainStatusWriter(client, metrics, view, settings, events)

    # The informers hand over only objects that parse.
    async def daemon_pod_event(kind: str, body: dict[str, Any]) -> None:
        pod = None if kind == "DELETED" else Pod.model_validate(body)
        writer.mark(writer.view.daemon_pod_changed(pod, body_key(body)))

    async def clique_event(kind: str, body: dict[str, Any]) -> None:
        clique = None if kind == "DELETED" else ComputeDomainClique.model_validate(body)
        writer.mark(writer.view.clique_changed(clique, body_key(body)))

    async def node_event(kind: str, body: dict[str, Any]) -> None:
        node = None if kind == "DELETED" else Node.model_validate(body)
        writer.mark(writer.view.node_changed(node, str(body["metadata"]["name"])))

    # Both live in the driver's namespace only, where the controller's Role lets it read them. The domains'
    # daemon pods (server-side label selector): what they say while their daemon has not registered (pending,
    # image pull failure, crash loop) goes into the domain's conditions (NVIDIA #289).
    namespace = settings.namespace
    informers.informer(
        PODS, namespace=namespace, label_selector=DAEMON_POD_SELECTOR, parse=Pod.model_validate
    ).subscribe(daemon_pod_event)
    informers.informer(
        COMPUTE_DOMAIN_CLIQUES, namespace=namespace, parse=ComputeDomainClique.model_validate, optional=True
    ).subscribe(clique_event)
    informers.informer(NODES, parse=Node.model_validate).subscribe(node_event)

    @kopf.on.resume(GROUP, VERSION, "computedomains", registry=registry)
    @kopf.on.create(GROUP, VERSION, "computedomains", registry=registry)
    async def ensure_children(body: kopf.Body, **_: Any) -> None:
        domain = ComputeDomain.from_wire(dict(body))
        try:
            applied = await apply_children(client, domain, settings)
        except InvalidInputError as exc:
            await events.post(dict(body), "Warning", "InvalidComputeDomain", str(exc))
            raise kopf.PermanentError(str(exc)) from exc
        except KubeError as exc:
            raise kopf.TemporaryError(f"applying the domain's children failed: {exc}", delay=2) from exc
        log.info("ComputeDomain children applied", domain=domain.metadata.name, children=applied)
        try:
            warning = await scope_warning(client, domain)
        except KubeError as exc:
            log.warning(
                "could not tell whether PodGroups are served", domain=domain.metadata.name, error=str(exc)
            )
            return
        if warning is not None:
            log.warning(
                "ComputeDomain channel scope not usable here", domain=domain.metadata.name, why=warning
            )
            await events.post(dict(body), "Warning", "PodGroupsNotServed", warning)

    @kopf.on.delete(GROUP, VERSION, "computedomains", registry=registry)
    async def delete_children(body: kopf.Body, uid: str, retry: int, **_: Any) -> None:
        writer.deleting.add(uid)
        outcome = await remove_children(client, uid, settings.namespace)
        verdict = cleanup_verdict(outcome, retry, settings.computedomain_cleanup_attempts)
        if verdict == "retry":
            metrics.computedomain_cleanups.labels("retried").inc()
            raise kopf.TemporaryError(outcome.summary(), delay=CLEANUP_RETRY_SECONDS)
        metrics.computedomain_cleanups.labels(verdict).inc()
        if verdict == "incomplete":
            message = (
                f"gave up after {retry + 1} attempt(s) and released the finalizer: {outcome.summary()}; "
                "remove what is left by hand"
            )
            await events.post(dict(body), "Warning", "CleanupIncomplete", message)
        else:
            await events.post(dict(body), "Normal", "CleanedUp", outcome.summary())
        log.info("ComputeDomain deleted", uid=uid, result=verdict, summary=outcome.summary())

    @kopf.on.event(GROUP, VERSION, "computedomains", registry=registry)
    async def domain_event(type: str, body: kopf.Body, uid: str, **_: Any) -> None:
        if type == "DELETED":
            writer.view.domain_changed(None, uid)
            writer.deleting.discard(uid)
            writer.forget(uid)
            return
        domain = parse_body(ComputeDomain, body)
        if domain is not None:
            writer.mark(writer.view.domain_changed(domain, uid))

    return writer
