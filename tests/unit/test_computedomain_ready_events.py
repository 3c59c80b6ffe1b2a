"""The ComputeDomain status writer's DomainReady Events: one when a domain becomes Ready, and one when it is Ready
over more nodes than its stored status had. With ``numNodes: 0`` nodes whose pods land and whose daemons register
within one batch join a Ready domain without a NotReady write in between: the newest DomainReady must still say
how many nodes the domain has (the integration test of the examples waited for "all 4 nodes ready" and, once in a
while, only "all 2 nodes ready" was ever posted)."""

from __future__ import annotations

from typing import Any, cast

from domainviewkit import C1, claim, clique, domain, node
from gpudra.cluster.apiserver.patches import merge_patch
from gpudra.computedomain.view import DomainView
from gpudra.config import ControllerSettings
from gpudra.controller.domainstatus import DomainStatusWriter
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import Resource
from gpudra.metrics import Metrics

UID = "uid-a"


class Api:
    """What the status writer calls: a status patch answered with the domain as patched, Events kept in order."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.domain = body
        self.events: list[dict[str, Any]] = []

    async def patch(
        self, res: Resource, name: str, patch: Any, namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.domain = merge_patch(self.domain, patch)
        meta = self.domain["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return self.domain

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.events.append(body)
        return body

    def ready_events(self) -> list[str]:
        return [e["message"] for e in self.events if e["reason"] == "DomainReady"]


def writer_of(api: Api, view: DomainView) -> DomainStatusWriter:
    client = cast(KubeClient, api)
    return DomainStatusWriter(
        client, Metrics(), view, ControllerSettings(), EventRecorder(client, "gpudra-controller")
    )


def join(view: DomainView, *nodes: str) -> None:
    """Pods of the domain landed on ``nodes`` and their daemons registered, Ready, with those before."""
    for name in nodes:
        view.claim_changed(claim(UID, name), f"claim-{name}")
        view.node_changed(node(name, C1), name)
    view.clique_changed(clique(UID, *sorted(view.workload_nodes(UID))), f"gpudra/{UID}.{C1}")


async def test_a_domain_ready_over_more_nodes_says_so_once_and_neither_a_smaller_one_nor_a_restart_does() -> (
    None
):
    view = DomainView()
    api = Api(domain("train", UID).to_wire())
    view.domain_changed(domain("train", UID), UID)
    writer = writer_of(api, view)

    await writer.flush(UID)
    assert api.domain["status"]["status"] == "Ready" and api.ready_events() == []  # no node yet: no news

    join(view, "n1", "n2")
    await writer.flush(UID)
    assert api.ready_events() == ["all 2 nodes ready"]

    join(view, "n3", "n4")  # both ready before the next write: the domain never read NotReady
    await writer.flush(UID)
    await writer.flush(UID)
    assert len(api.domain["status"]["nodes"]) == 4
    assert api.ready_events() == ["all 2 nodes ready", "all 4 nodes ready"]

    view.claim_changed(None, "claim-n4")  # a pod ended and its daemon left: Ready over fewer nodes is no news
    view.clique_changed(clique(UID, "n1", "n2", "n3"), f"gpudra/{UID}.{C1}")
    await writer.flush(UID)
    assert len(api.domain["status"]["nodes"]) == 3
    assert api.ready_events() == ["all 2 nodes ready", "all 4 nodes ready"]

    restarted = writer_of(api, view)  # a new controller reads the stored Ready status: nothing to announce
    await restarted.flush(UID)
    assert api.ready_events() == ["all 2 nodes ready", "all 4 nodes ready"]
