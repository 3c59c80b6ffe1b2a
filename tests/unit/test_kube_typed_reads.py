"""Reads are typed: ``get``/``list`` of a typed resource hand back its gpudra.api model, and an object from the server
that does not fit the model is a clear error naming the object and the field at fault, never a crash deep in the
caller. ``get_raw``/``list_raw`` hand back the server's JSON unchanged. Writes of a model send its wire form and
answer with a model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import pytest

from gpudra.api.core import Node
from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.errors import InvalidInputError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.kube.transport import Call, Reply


class _Answer:
    def __init__(self, body: Any) -> None:
        self._data = json.dumps(body).encode()

    @property
    def status(self) -> int:
        return 200

    @property
    def reason(self) -> str:
        return "OK"

    async def read(self) -> bytes:
        return self._data

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._data

    async def __aenter__(self) -> Reply:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class _Server:
    """Answers every read with one body, and every write with what was written (named as the server names it)."""

    def __init__(self, body: Any = None) -> None:
        self.body = body
        self.written: list[Any] = []

    async def request(self, call: Call) -> Reply:
        if call.body is None:
            return _Answer(self.body)
        self.written.append(call.body)
        meta = call.body["metadata"]
        return _Answer(
            {**call.body, "metadata": {"name": meta.get("name") or meta["generateName"] + "x1", **meta}}
        )

    async def close(self) -> None:
        return None


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c1", "namespace": "team-a", "uid": "u1"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}
BAD_CLAIM = {**CLAIM, "spec": {"devices": {"requests": [{"name": 7, "exactly": {}}]}}}


async def test_get_hands_back_the_model_and_get_raw_the_json() -> None:
    client = KubeClient(_Server(CLAIM))
    claim = await client.get(RESOURCE_CLAIMS, "c1", "team-a")
    assert isinstance(claim, ResourceClaim)
    (request,) = claim.spec.devices.requests or []
    assert claim.metadata.namespaced_name == "team-a/c1" and request.name == "gpu"
    assert await client.get_raw(RESOURCE_CLAIMS, "c1", "team-a") == CLAIM


async def test_list_hands_back_models_and_the_lists_version() -> None:
    server = _Server({"metadata": {"resourceVersion": "42"}, "items": [{"metadata": {"name": "n1"}}]})
    nodes, version = await KubeClient(server).list(NODES, label_selector="gpu=yes")
    assert [(type(n), n.metadata.name) for n in nodes] == [(Node, "n1")] and version == "42"


async def test_an_object_that_does_not_fit_its_model_names_the_object_and_the_field() -> None:
    client = KubeClient(_Server(BAD_CLAIM))
    with pytest.raises(InvalidInputError) as raised:
        await client.get(RESOURCE_CLAIMS, "c1", "team-a")
    assert str(raised.value).startswith(
        "ResourceClaim team-a/c1 does not parse: spec.devices.requests[0].name: "
    )


async def test_one_bad_item_in_a_list_is_named() -> None:
    server = _Server({"metadata": {"resourceVersion": "1"}, "items": [CLAIM, {**BAD_CLAIM, "metadata": {}}]})
    with pytest.raises(InvalidInputError, match=r"^ResourceClaim \(no name\) does not parse: spec\.devices"):
        await KubeClient(server).list(RESOURCE_CLAIMS)


async def test_a_written_model_goes_as_its_wire_form_and_the_answer_is_a_model() -> None:
    server = _Server()
    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    spec = {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": pool}
    wanted = ResourceSlice.from_wire({"metadata": {"generateName": "n1-gpu-"}, "spec": spec})
    created = await KubeClient(server).create(RESOURCE_SLICES, wanted)
    assert isinstance(created, ResourceSlice) and created.metadata.name == "n1-gpu-x1"
    assert server.written == [wanted.to_wire()]
