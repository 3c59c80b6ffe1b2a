"""The embedded cluster's own components call its API server in-process (InProcessTransport): the same requests
must get the same answers, errors and watch events as over HTTP, and a watch must end like a connection does."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.identity import ADMIN
from gpudra.cluster.apiserver.local import InProcessTransport
from gpudra.errors import KubeConnectionError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES, PODS, Resource
from gpudra.testing import eventually

Outcome = tuple[str, Any]

_VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "cuda"}]},
    }


def _stable(body: Any, suffix: str) -> Any:
    """``body`` without what differs between two runs of the same requests (uids, versions, times, the name, the
    token volume's random suffix)."""
    if isinstance(body, dict):
        return {k: _stable(v, suffix) for k, v in body.items() if k not in _VOLATILE}
    if isinstance(body, list):
        return [_stable(v, suffix) for v in body]
    if not isinstance(body, str):
        return body
    return re.sub(r"^kube-api-access-\w{5}$", "kube-api-access-*", body.replace(suffix, "*"))


async def _outcome(call: Awaitable[Any], suffix: str) -> Outcome:
    try:
        return ("ok", _stable(await call, suffix))
    except KubeError as exc:
        return (type(exc).__name__, (exc.status, exc.reason, str(exc).replace(suffix, "*")))


async def _items(listing: Awaitable[tuple[list[Any], str]]) -> list[Any]:
    items, _ = await listing  # the list's resourceVersion differs between the runs
    return items


async def _requests(client: KubeClient, suffix: str) -> list[Outcome]:
    """Each verb, answered and refused: the outcomes a component acts on."""
    name = f"p-{suffix}"
    created = await client.create(PODS, _pod(name, run=suffix), "default")
    stale = {**created, "metadata": {**created["metadata"], "labels": {"run": suffix, "stale": "yes"}}}
    steps: list[Callable[[], Awaitable[Any]]] = [
        lambda: client.get_raw(PODS, name, "default"),
        lambda: client.get_raw(PODS, f"missing-{suffix}", "default"),
        lambda: client.create(PODS, _pod(name), "default"),  # exists
        lambda: client.create(PODS, {**_pod(f"bad-{suffix}"), "spec": {"containers": []}}, "default"),
        lambda: client.patch(PODS, name, {"metadata": {"labels": {"patched": "merge"}}}, "default"),
        lambda: client.replace(PODS, stale),  # its resourceVersion is older than the patch's
        lambda: client.patch(
            PODS,
            name,
            [{"op": "test", "path": "/metadata/labels/patched", "value": "no"}],
            "default",
            patch_type="json",
        ),
        lambda: client.patch(
            PODS,
            name,
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"applied": "yes"}}},
            "default",
            patch_type="apply",
            force=True,
        ),
        lambda: _items(client.list_raw(PODS, "default", label_selector=f"run={suffix}")),
        lambda: _items(client.list_raw(PODS, "default", label_selector="run in (")),  # does not parse
        lambda: client.delete(PODS, name, "default", missing_ok=False),
        lambda: client.delete(PODS, name, "default", missing_ok=False),  # gone already
    ]
    return [await _outcome(step(), suffix) for step in steps]


@pytest.fixture
async def clients(apiserver: EmbeddedAPIServer) -> AsyncIterator[tuple[KubeClient, KubeClient]]:
    http = KubeClient.for_url(apiserver.url, token=apiserver.token())
    try:
        yield http, KubeClient(InProcessTransport(apiserver, ADMIN))
    finally:
        await http.close()


async def test_every_verb_answers_in_process_as_it_does_over_http(
    clients: tuple[KubeClient, KubeClient],
) -> None:
    http, local = clients
    over_http = await asyncio.wait_for(_requests(http, "zq1"), 30)
    in_process = await asyncio.wait_for(_requests(local, "zq2"), 30)
    assert in_process == over_http
    kinds = [kind for kind, _ in in_process]
    assert kinds == [
        "ok",
        "NotFoundError",
        "ConflictError",
        "KubeError",  # 422 Invalid, with the field path
        "ok",
        "ConflictError",
        "KubeError",  # the failed test
        "ok",
        "ok",
        "KubeError",  # 400 for the selector
        "ok",
        "NotFoundError",
    ]
    invalid = in_process[3][1]
    assert invalid[0] == 422 and "spec.containers" in invalid[2]


async def _events(client: KubeClient, res: Resource, seen: list[tuple[str, str]], count: int) -> None:
    async for kind, obj in client.watch(res, "default", resource_version="0"):
        seen.append((kind, obj["metadata"]["name"]))
        if len(seen) == count:
            return


async def test_a_watch_in_process_sees_each_change_and_leaving_it_frees_the_server_side(
    apiserver: EmbeddedAPIServer,
) -> None:
    client = KubeClient(InProcessTransport(apiserver, ADMIN))
    pods = apiserver.database.registry.get("", "v1", "pods")
    assert pods is not None
    store = apiserver.database.store(pods)
    seen: list[tuple[str, str]] = []
    watching = asyncio.create_task(_events(client, PODS, seen, 3))
    await eventually(lambda: len(store.watchers) == 1, what="the watch registered")
    await client.create(PODS, _pod("w"), "default")
    await client.patch(PODS, "w", {"metadata": {"labels": {"a": "b"}}}, "default")
    await client.delete(PODS, "w", "default")
    await asyncio.wait_for(watching, 10)
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    await eventually(lambda: not store.watchers, what="the watch gone from the server")


async def test_a_stopped_server_ends_in_process_watches_and_refuses_requests_as_a_lost_connection() -> None:
    server = EmbeddedAPIServer()
    await server.start()
    client = KubeClient(InProcessTransport(server, ADMIN))
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    seen: list[tuple[str, str]] = []

    async def watch_nodes() -> None:
        async for kind, obj in client.watch(NODES, resource_version="0"):
            seen.append((kind, obj["metadata"]["name"]))

    watching = asyncio.create_task(watch_nodes())
    await eventually(lambda: seen == [("ADDED", "n")], what="the node listed")
    await server.stop()
    await asyncio.wait_for(watching, 10)  # ended, as when the connection closes
    with pytest.raises(KubeConnectionError, match="get nodes/n: the API server connection failed"):
        await client.get_raw(NODES, "n")


async def test_a_failing_request_is_a_500_in_process_and_the_server_goes_on(
    apiserver: EmbeddedAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = KubeClient(InProcessTransport(apiserver, ADMIN))
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug")

    with monkeypatch.context() as patched:
        patched.setattr(apiserver.database, "get", broken)
        with pytest.raises(KubeError, match="500 InternalError: RuntimeError: a bug") as failed:
            await client.get_raw(NODES, "n")
    assert failed.value.status == 500
    assert (await client.get_raw(NODES, "n"))["metadata"]["name"] == "n"
