"""A real kopf operator runs in-process against the embedded API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
import kopf

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.testing import eventually

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


async def test_kopf_create_and_delete_handlers(
    apiserver: EmbeddedAPIServer, http: aiohttp.ClientSession
) -> None:
    """kopf adds its finalizer (JSON patch testing resourceVersion), runs the create handler, patches status
    through the status subresource; on delete it runs the delete handler, removes its finalizer and the object
    disappears."""
    async with http.post(CRDS, json=WIDGET_CRD) as rsp:
        assert rsp.status == 201
    registry = kopf.OperatorRegistry()
    deleted: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=apiserver.url, insecure=True, token=apiserver.token())

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.standalone = True
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 10

    @kopf.on.create("example.com", "v1", "widgets", registry=registry)
    def created(spec: Any, patch: kopf.Patch, **_: Any) -> None:
        patch.status["observedSize"] = spec.get("size")

    @kopf.on.delete("example.com", "v1", "widgets", registry=registry)
    def removed(name: str, **_: Any) -> None:
        deleted.append(name)

    stop = asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(registry=registry, standalone=True, clusterwide=True, stop_flag=stop)
    )
    try:
        body = {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 5},
        }
        async with http.post(WIDGETS, json=body) as rsp:
            assert rsp.status == 201

        async def handled() -> dict[str, Any] | None:
            async with http.get(f"{WIDGETS}/w1") as rsp:
                obj: dict[str, Any] = await rsp.json()
            return obj if (obj.get("status") or {}).get("observedSize") == 5 else None

        obj = await eventually(handled, 10.0, interval=0.02, what="the create handler's status")
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        await http.delete(f"{WIDGETS}/w1")

        async def gone() -> bool:
            async with http.get(f"{WIDGETS}/w1") as rsp:
                return rsp.status == 404

        await eventually(gone, 10.0, interval=0.02, what="the object to disappear")
        assert deleted == ["w1"]
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(operator, 10)
