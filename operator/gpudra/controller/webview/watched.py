"""What the web view watches, through the process's shared informers (``gpudra.kube.informer.Informers``: in the
controller, the same informers as its caches; the optional custom resources watched once the server serves them),
and each object read as its model (parsed once per resourceVersion)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from gpudra.api.base import WireModel
from gpudra.api.computedomain import ComputeDomain, ComputeDomainClique
from gpudra.api.core import Namespace, Node, Pod
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpudra.api.miglayout import MigLayout
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.kube.informer import Informer, Informers, Key, Parse
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

Body = dict[str, Any]
M = TypeVar("M", bound=WireModel)

WATCHED: dict[str, tuple[Resource, Parse]] = {
    "nodes": (NODES, Node.model_validate),
    "slices": (RESOURCE_SLICES, ResourceSlice.model_validate),
    "claims": (RESOURCE_CLAIMS, ResourceClaim.model_validate),
    "classes": (DEVICE_CLASSES, DeviceClass.model_validate),
    "namespaces": (NAMESPACES, Namespace.model_validate),
    "domains": (COMPUTE_DOMAINS, ComputeDomain.model_validate),
    "cliques": (COMPUTE_DOMAIN_CLIQUES, ComputeDomainClique.model_validate),
    "layouts": (MIGLAYOUTS, MigLayout.model_validate),
    "pods": (PODS, Pod.model_validate),
    "templates": (RESOURCE_CLAIM_TEMPLATES, ResourceClaimTemplate.model_validate),
}
"""What the view watches, each with the model an object must parse as (one that does not is left out, as absent)."""
SELECTED = {"pods": "spec.nodeName="}
"""Field selectors of the kinds watched in part: pods not bound to a node (a pod asking for an extended resource
that has no claim yet is shown as the claim kube-scheduler would make, a template's claim not made yet as such:
whether its template exists is why the templates are watched)."""
OPTIONAL = frozenset({"domains", "cliques", "layouts"})
"""Custom resources a cluster may not serve (CRDs not installed): their sections stay empty meanwhile."""
IN_DRIVER_NAMESPACE = frozenset({"cliques"})
"""Watched in the driver's namespace only, where they live and the controller's Role lets it read them."""


def _rv(obj: Body) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


@dataclass
class Watched:
    informers: Informers
    """The process's informers: the view subscribes to them, and their owner runs them."""
    namespace: str
    """The driver's namespace (``IN_DRIVER_NAMESPACE``)."""
    changed: Callable[[str], None]
    """Told the name (a key of ``WATCHED``) of each kind whose objects changed."""
    _informers: dict[str, Informer] = field(default_factory=dict)
    _models: dict[str, dict[Key, tuple[str, WireModel]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, (resource, parse) in WATCHED.items():
            informer = self.informers.informer(
                resource,
                namespace=self.namespace if name in IN_DRIVER_NAMESPACE else None,
                field_selector=SELECTED.get(name),
                parse=parse,
                optional=name in OPTIONAL,
            )
            informer.subscribe(self._handler(name))
            self._informers[name] = informer

    def _handler(self, name: str) -> Callable[[str, Body], Any]:
        async def handler(kind: str, obj: Body) -> None:
            self.changed(name)

        return handler

    async def synced(self) -> None:
        """Until every informer of the view that is not optional has listed once."""
        await asyncio.gather(*(i.synced.wait() for n, i in self._informers.items() if n not in OPTIONAL))

    def wire(self, name: str) -> list[Body]:
        """The watched objects of ``name`` in their wire form (what a worker process is sent)."""
        return list(self._informers[name].cache.values())

    def parsed(self, name: str, model: type[M]) -> list[M]:
        """The watched objects of ``name`` as ``model`` (each parsed once per resourceVersion)."""
        memo = self._models.setdefault(name, {})
        out: dict[Key, M] = {}
        for key, obj in self._informers[name].cache.items():
            version = _rv(obj)
            known = memo.get(key)
            if known is None or known[0] != version:
                known = memo[key] = (version, model.model_validate(obj))
            out[key] = cast(M, known[1])  # each name is parsed as one model only
        for key in set(memo) - set(out):
            del memo[key]
        return list(out.values())
