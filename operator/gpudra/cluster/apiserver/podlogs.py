"""The pod subresources that reach a node: ``pods/log`` through the node's kubelet, as kube-apiserver does it, and
``pods/exec``, ``pods/attach`` and ``pods/portforward``, which get one sentence: nothing runs containers here.

For ``pods/log`` the server checks the container as kube-apiserver does (the only container when none is named, a
400 naming the choices otherwise), finds the pod's node, and streams
``GET /containerLogs/<namespace>/<pod>/<container>`` from the port in the Node's
``status.daemonEndpoints.kubeletEndpoint``. Every kubelet of the embedded cluster listens on the loopback, so the
node's address is not used. A kubelet's refusal (``container ... is waiting to start: ContainerCreating``) comes
back with its code and sentence; a pod not yet on a node has an empty log.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from .database import Database
from .routing import Target
from .status import APIStatusError, bad_request

KUBELET_HOST = "127.0.0.1"
_LOG_PARAMS = ("follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes")
_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound"}
NO_CONTAINERS = (
    "the embedded cluster runs no containers, so there is no process to exec into, attach to or forward a port "
    "from (kubectl logs shows what the container would be given)"
)


def no_containers() -> APIStatusError:
    return bad_request(NO_CONTAINERS)


def _names(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    groups = ("initContainers", "containers", "ephemeralContainers")
    return [str(c.get("name", "")) for group in groups for c in spec.get(group) or []]


def log_container(pod: dict[str, Any], container: str) -> str:
    """The container whose log is asked for, checked as kube-apiserver checks it."""
    name = pod["metadata"]["name"]
    if container:
        if container not in _names(pod):
            raise bad_request(f"container {container} is not valid for pod {name}")
        return container
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) == 1:
        return str(containers[0].get("name", ""))
    if not containers:
        raise bad_request(f"a container name must be specified for pod {name}")
    choices = "[" + " ".join(_names(pod)) + "]"
    raise bad_request(f"a container name must be specified for pod {name}, choose one of: {choices}")


class PodLogProxy:
    """Streams container logs from the kubelets; owns the HTTP session it opens for that."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _kubelet_url(self, node: str) -> str:
        rt = self._db.registry.get("", "v1", "nodes")
        assert rt is not None
        status = self._db.get(rt, "", node).obj.get("status") or {}
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        if not port:
            raise APIStatusError(
                500,
                "InternalError",
                f"node {node} has no kubelet endpoint (status.daemonEndpoints.kubeletEndpoint.Port)",
            )
        return f"http://{KUBELET_HOST}:{port}"

    async def serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        if request.method != "GET":
            raise APIStatusError(
                405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}"
            )
        pod = self._db.get(target.rt, target.ns, target.name).obj
        container = log_container(pod, request.query.get("container", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        if not node:
            await response.prepare(request)
            await response.write_eof()
            return response
        url = f"{self._kubelet_url(str(node))}/containerLogs/{target.ns}/{target.name}/{container}"
        params = {k: request.query[k] for k in _LOG_PARAMS if k in request.query}
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10))
        try:
            async with self._session.get(url, params=params) as upstream:
                if upstream.status != 200:
                    text = (await upstream.text()).strip()
                    raise APIStatusError(
                        upstream.status, _REASONS.get(upstream.status, "InternalError"), text
                    )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
        except aiohttp.ClientError as exc:
            if response.prepared:
                return response
            raise APIStatusError(500, "InternalError", f"Get {url}: {exc}") from exc
        await response.write_eof()
        return response
