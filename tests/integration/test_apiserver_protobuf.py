"""The embedded API server speaks kube-apiserver's protobuf for the built-in kinds: request bodies, responses
(objects, lists, Status errors) and watch streams, chosen by content negotiation; custom resources stay JSON."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.kubeproto import wire

PB = wire.PROTOBUF
SEND = {"Content-Type": PB, "Accept": f"{PB},application/json"}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
        "versions": [
            {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}}
        ],
    },
}


def namespace(name: str) -> bytes:
    return wire.encode(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"a": "b"}}}
    )


async def test_a_protobuf_create_answers_in_protobuf_and_reads_back_as_json(
    http: aiohttp.ClientSession,
) -> None:
    async with http.post("/api/v1/namespaces", data=namespace("team"), headers=SEND) as rsp:
        assert rsp.status == 201 and rsp.content_type == PB
        created = wire.decode(await rsp.read())
    assert created["kind"] == "Namespace" and created["metadata"]["uid"]
    async with http.get("/api/v1/namespaces/team") as rsp:
        assert rsp.content_type == "application/json"
        stored = await rsp.json()
    assert (
        stored["metadata"]["labels"] == {"a": "b"} and stored["metadata"]["uid"] == created["metadata"]["uid"]
    )


async def test_lists_and_errors_come_in_protobuf_when_preferred(http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/namespaces", data=namespace("team"), headers=SEND):
        pass
    async with http.get("/api/v1/namespaces", headers={"Accept": PB}) as rsp:
        listing = wire.decode(await rsp.read())
    assert listing["kind"] == "NamespaceList" and "team" in {n["metadata"]["name"] for n in listing["items"]}
    async with http.get("/api/v1/namespaces/ghost", headers={"Accept": PB}) as rsp:
        assert rsp.status == 404 and rsp.content_type == PB
        status = wire.decode(await rsp.read())
    assert status["kind"] == "Status" and status["reason"] == "NotFound" and status["code"] == 404
    async with http.post("/api/v1/namespaces", data=namespace("team"), headers=SEND) as rsp:
        assert rsp.status == 409 and wire.decode(await rsp.read())["reason"] == "AlreadyExists"


async def test_delete_takes_protobuf_delete_options(http: aiohttp.ClientSession) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},  # an image: a pod without one is invalid
    }
    async with http.post("/api/v1/namespaces/default/pods", data=wire.encode(pod), headers=SEND) as rsp:
        assert rsp.status == 201
    options = wire.encode({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "wrong"}})
    async with http.delete("/api/v1/namespaces/default/pods/p", data=options, headers=SEND) as rsp:
        assert rsp.status == 409  # the precondition in the protobuf body was read
    async with http.delete("/api/v1/namespaces/default/pods/p", headers=SEND) as rsp:
        assert rsp.status == 200


async def test_malformed_and_misplaced_protobuf_bodies_are_refused(http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/namespaces", data=b"k8s\x00\xff\xff", headers=SEND) as rsp:
        status: dict[str, Any] = wire.decode(await rsp.read())
    assert rsp.status == 400 and status["reason"] == "BadRequest"
    async with http.patch("/api/v1/namespaces/default", data=namespace("default"), headers=SEND) as rsp:
        assert rsp.status == 415
    async with http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD) as rsp:
        assert rsp.status == 201
    gizmo = wire.encode({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "g"}})
    async with http.post("/apis/example.com/v1/gizmos", data=gizmo, headers=SEND) as rsp:
        assert rsp.status == 415 and rsp.content_type == "application/json"
        assert (await rsp.json())["message"] == (
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml"
        )
    body = {"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "g"}}
    async with http.post("/apis/example.com/v1/gizmos", json=body, headers={"Accept": SEND["Accept"]}) as rsp:
        assert rsp.status == 201 and rsp.content_type == "application/json"  # no protobuf form: JSON


async def _frames(response: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    events = []
    for _ in range(count):
        size = int.from_bytes(await response.content.readexactly(4), "big")
        event = wire.message_type("v1", "WatchEvent")
        assert event is not None
        message: Any = event.FromString(await response.content.readexactly(size))
        events.append({"type": message.type, "object": wire.decode(message.object.raw)})
    return events


async def test_a_protobuf_watch_streams_length_prefixed_events(
    http: aiohttp.ClientSession, apiserver: EmbeddedAPIServer
) -> None:
    async with http.get(
        "/api/v1/namespaces?watch=true&allowWatchBookmarks=true", headers={"Accept": PB}
    ) as rsp:
        assert rsp.content_type == PB and rsp.headers["Content-Type"] == wire.WATCH_STREAM
        initial = await asyncio.wait_for(
            _frames(rsp, 4), 10
        )  # default, kube-system, kube-public, kube-node-lease
        assert {e["type"] for e in initial} == {"ADDED"}
        async with http.post("/api/v1/namespaces", data=namespace("later"), headers=SEND):
            pass
        (added,) = await asyncio.wait_for(_frames(rsp, 1), 10)
    assert added["type"] == "ADDED" and added["object"]["metadata"]["name"] == "later"
    assert added["object"]["kind"] == "Namespace"
