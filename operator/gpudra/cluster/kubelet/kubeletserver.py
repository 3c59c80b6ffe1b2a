"""The stand-in kubelets' node endpoint: ``GET /containerLogs/<namespace>/<pod>/<container>``, as a kubelet serves
it on its port (10250 on a real node), for the API server's ``pods/log``.

One listener serves every stand-in kubelet of the process: each Node's ``status.daemonEndpoints.kubeletEndpoint
.Port`` names it, and its InternalIP the listener's address (127.0.0.1 for the embedded API server; on the real
control plane the machine's address, over TLS with a certificate of the cluster CA, as kube-apiserver dials a
kubelet). The kubelets write what their pods' containers would log
into a shared :class:`PodLogBook`; a container that has not started answers 400 with the kubelet's sentence
(``container "ctr" in pod "p" is waiting to start: ContainerCreating``). ``follow`` keeps the stream open until
the pod stops; ``timestamps``, ``tailLines``, ``limitBytes`` and ``sinceSeconds`` work as on a kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from gpudra.api.timestamps import parse_rfc3339

_IDLE_CHECK = 5.0  # seconds between checks for a gone client while following


@dataclass
class PodLogs:
    """What one pod's containers logged, or why they have not started."""

    uid: str
    containers: dict[str, list[str]] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # container -> reason, while it has not started
    started_at: str = ""  # RFC 3339
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class PodLogBook:
    """Pods by (namespace, name), written by the stand-in kubelets, read by the node endpoint."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], PodLogs] = {}

    def waiting(self, namespace: str, name: str, uid: str, reasons: dict[str, str]) -> None:
        self._pods[(namespace, name)] = PodLogs(uid, waiting=dict(reasons))

    def started(
        self, namespace: str, name: str, uid: str, logs: dict[str, list[str]], started_at: str
    ) -> None:
        self._pods[(namespace, name)] = PodLogs(uid, containers=logs, started_at=started_at)

    def stopped(self, uid: str, *, keep: bool = False) -> None:
        """The pod's containers stopped: followers end; ``keep``: what they logged stays readable (a pod whose
        containers ended is still there), else it goes with the pod."""
        for key, pod in list(self._pods.items()):
            if pod.uid == uid:
                pod.stopped.set()
                if not keep:
                    del self._pods[key]

    def get(self, namespace: str, name: str) -> PodLogs | None:
        return self._pods.get((namespace, name))


def _int(request: web.Request, key: str) -> int | None:
    value = request.query.get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        raise web.HTTPBadRequest(text=f"{key} must be an integer, not {value!r}") from None


def _select(lines: list[str], request: web.Request, started_at: str) -> bytes:
    since = _int(request, "sinceSeconds")
    if since is not None and started_at:
        started = parse_rfc3339(started_at)
        if (datetime.now(UTC) - started).total_seconds() > since:
            lines = []
    tail = _int(request, "tailLines")
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    if request.query.get("timestamps") == "true":
        stamp = started_at.replace("Z", ".000000000Z")
        lines = [f"{stamp} {line}" for line in lines]
    data = "".join(f"{line}\n" for line in lines).encode()
    limit = _int(request, "limitBytes")
    return data[:limit] if limit is not None else data


class KubeletServer:
    """Serves the node endpoint of every stand-in kubelet sharing ``book``."""

    def __init__(self, book: PodLogBook, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.book = book
        self.host = host
        self._tls = tls
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, ssl_context=self._tls)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        pod = self.book.get(namespace, name)
        if pod is None:
            raise web.HTTPNotFound(text=f'pod "{namespace}/{name}" is not on this node')
        if request.query.get("previous") == "true":
            raise web.HTTPBadRequest(
                text=f'previous terminated container "{container}" in pod "{name}" not found'
            )
        if container in pod.waiting:
            raise web.HTTPBadRequest(
                text=f'container "{container}" in pod "{name}" is waiting to start: {pod.waiting[container]}'
            )
        if container not in pod.containers:
            raise web.HTTPBadRequest(
                text=f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
            )
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(_select(pod.containers[container], request, pod.started_at))
        if request.query.get("follow") == "true":
            while not pod.stopped.is_set():
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pod.stopped.wait(), _IDLE_CHECK)
        await response.write_eof()
        return response


def with_kubelet_endpoint(node: dict[str, Any], address: str, port: int) -> dict[str, Any]:
    """A Node object with the addresses and kubelet endpoint a kubelet registers."""
    status = node.setdefault("status", {})
    status["addresses"] = [
        {"type": "InternalIP", "address": address},
        {"type": "Hostname", "address": node["metadata"]["name"]},
    ]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    return node
