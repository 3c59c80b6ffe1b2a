"""KubeClient: typed, minimal verbs over a transport (HTTP, or the embedded cluster's in-process one; see
:mod:`gpudra.kube.transport`), with errors mapped to gpudra's.

Reads are typed: ``get`` and ``list`` of a :class:`TypedResource` return its ``gpudra.api`` model, so product code
reads fields through the models, never by indexing the wire form. ``get_raw`` and ``list_raw`` return the wire form
(dicts) for what has no model of its own and for the few who move objects through unchanged (the embedded
cluster's stand-ins, the cluster copy); watches and writes' answers are wire dicts too.
Using the generic transport instead of the generated per-kind APIs keeps one code path for built-ins and CRDs, and
lets the caller choose the exact patch content type.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import ValidationError

from gpudra.api.base import WireModel
from gpudra.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    KubeConnectionError,
    KubeError,
    NotFoundError,
)
from gpudra.kube.kubeconfig import Credentials, in_cluster_credentials, read_credentials
from gpudra.kube.resources import Resource, TypedResource
from gpudra.kube.session import SessionTransport
from gpudra.kube.transport import WATCH_READ_BUFFER, Call, Reply, Transport

M = TypeVar("M", bound=WireModel)
Body = dict[str, Any]
PatchType = Literal["merge", "json", "apply"]

_PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


def _map_error(code: int, http_reason: str, body: Any, what: str) -> KubeError:
    """The error for an answer with HTTP status ``code``, from the Status object in its ``body``."""
    reason, message = "", http_reason
    try:
        status = json.loads(body or "{}")
        reason, message = status.get("reason", ""), status.get("message", message)
    except (TypeError, ValueError):
        pass
    text = f"{what}: {code} {reason}: {message}".rstrip(": ")
    cls = {404: NotFoundError, 409: ConflictError}.get(code, KubeError)
    return cls(text, status=code, reason=reason, detail=message)


_TRANSPORT_ERRORS = (OSError,)
"""What every transport raises when the server is down or the connection breaks (TimeoutError included)."""


def _lost(exc: BaseException, what: str) -> KubeConnectionError:
    return KubeConnectionError(f"{what}: the API server connection failed: {exc!r}")


def fault(error: Exception) -> tuple[str, str]:
    """(field path, what is wrong) of a parse error: the first of a ValidationError's, else ('', the message)."""
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        path = ""
        for part in first["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        return path, str(first["msg"])
    return "", str(error)


def _parse(res: TypedResource[M], body: Body) -> M:
    """``body`` as the resource's model; an object that does not parse raises InvalidInputError naming the object,
    the field at fault and what is wrong with it."""
    try:
        return res.model.from_wire(body)
    except ValidationError as exc:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p) or "(no name)"
        field, problem = fault(exc)
        raise InvalidInputError(
            f"{res.kind} {name} does not parse: {field or 'the object'}: {problem}"
        ) from exc


async def _lines(chunks: AsyncIterator[bytes], what: str) -> AsyncIterator[bytes]:
    """The lines of a watch stream (the last one also without its newline), split from each chunk as it arrives:
    reading it line by line cost a round of aiohttp's reader per event, the most of a watch's reading at hundreds
    of events a second. A line longer than WATCH_READ_BUFFER ends the watch as a lost connection."""
    too_long = _lost(ValueError(f"an event longer than {WATCH_READ_BUFFER} bytes"), what)
    pending: list[bytes] = []
    size = 0
    async for chunk in chunks:
        if b"\n" not in chunk:
            pending.append(chunk)
            size += len(chunk)
            if size > WATCH_READ_BUFFER:
                raise too_long
            continue
        lines = chunk.split(b"\n")
        if pending:
            lines[0] = b"".join([*pending, lines[0]])
        tail = lines.pop()
        pending, size = ([tail], len(tail)) if tail else ([], 0)
        for line in lines:
            if len(line) > WATCH_READ_BUFFER:
                raise too_long
            yield line
    if pending:
        yield b"".join(pending)


class KubeClient:
    """One connection pool to one API server."""

    def __init__(self, transport: Transport, *, field_manager: str = "gpudra") -> None:
        self._transport = transport
        self._field_manager = field_manager

    @classmethod
    def for_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        ca: Path | None = None,
        field_manager: str = "gpudra",
        max_connections: int | None = 100,
    ) -> KubeClient:
        """A client of a server at ``url``, with ``token`` as its bearer token (None: anonymous), trusting ``ca``
        (an https URL; None: the system's CAs). Every open watch
        holds one of ``max_connections`` (None: no limit) for as long as it runs: a client shared by many
        watchers must not cap them, or the next request waits for a free connection forever."""
        from kubernetes_asyncio import client as k8s_client

        from gpudra.kube.apitransport import HTTPTransport

        configuration = k8s_client.Configuration(host=url)
        if token is not None:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        if ca is not None:
            configuration.ssl_ca_cert = str(ca)
        configuration.connection_pool_maxsize = max_connections  # type: ignore[assignment]  # None is documented
        transport = HTTPTransport.without_environment(k8s_client.ApiClient(configuration))
        return cls(transport, field_manager=field_manager)

    @classmethod
    async def from_environment(
        cls, kubeconfig: Path | None = None, *, field_manager: str = "gpudra"
    ) -> KubeClient:
        """In-cluster service account when running in a pod, else the given (or default) kubeconfig.

        Plain credentials (a service account, a kubeconfig user with a token or a client certificate) go through
        :class:`SessionTransport`; a kubeconfig that needs more (plugins, several files) through
        kubernetes_asyncio's loader."""
        if kubeconfig is None:
            in_cluster = in_cluster_credentials()
            if in_cluster is not None:
                return cls(SessionTransport(in_cluster), field_manager=field_manager)
        source = str(kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config")
        advice = "set KUBECONFIG or --kubeconfig to a cluster's, e.g. the one gpudra up prints"
        if not _any_file(source):  # said before kubernetes_asyncio logs a warning of its own
            raise ConfigurationError(f"no usable kubeconfig at {source} (no such file): {advice}")
        plain = _plain_credentials(source)
        if plain is not None:
            return cls(SessionTransport(plain), field_manager=field_manager)
        from kubernetes_asyncio import client as k8s_client
        from kubernetes_asyncio import config as k8s_config

        from gpudra.kube.apitransport import HTTPTransport

        configuration = k8s_client.Configuration()
        try:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None, client_configuration=configuration
            )
        except (k8s_config.ConfigException, OSError) as exc:
            raise ConfigurationError(f"no usable kubeconfig at {source} ({exc}): {advice}") from exc
        return cls(HTTPTransport(k8s_client.ApiClient(configuration)), field_manager=field_manager)

    async def close(self) -> None:
        await self._transport.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        what: str,
        timeout: float | None = None,
        gather: float = 0.0,
    ) -> Reply:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        call = Call(method, path, query or [], headers, body, timeout, gather)
        try:
            response = await self._transport.request(call)
            if 200 <= response.status <= 299:
                return response
            async with response:
                answer = await response.read()
        except _TRANSPORT_ERRORS as exc:
            raise _lost(exc, what) from exc
        raise _map_error(response.status, response.reason, answer, what)

    async def _json(self, method: str, path: str, *, what: str, **kwargs: Any) -> Body:
        response = await self._call(method, path, what=what, **kwargs)
        try:
            async with response:
                data: Body = json.loads(await response.read())
        except _TRANSPORT_ERRORS as exc:
            raise _lost(exc, what) from exc
        return data

    # ------------------------------------------------------------------ verbs

    async def get(self, res: TypedResource[M], name: str, namespace: str | None = None) -> M:
        """The object as the resource's model (InvalidInputError, naming the object and field, if it does not
        parse)."""
        return _parse(res, await self.get_raw(res, name, namespace))

    async def get_raw(self, res: Resource, name: str, namespace: str | None = None) -> Body:
        """The object as the server sent it."""
        return await self._json("GET", res.path(namespace, name), what=f"get {res.plural}/{name}")

    async def server_version(self) -> tuple[int, int]:
        """(major, minor) of the API server, from ``/version`` (readable by every authenticated client)."""
        info = await self._json("GET", "/version", what="get the server version")
        try:
            return int(info["major"]), int(str(info["minor"]).rstrip("+"))
        except (KeyError, TypeError, ValueError) as exc:
            raise KubeError(f"the API server reported an unreadable version: {info!r:.200}") from exc

    async def serves(self, res: Resource) -> bool:
        """Whether the API server serves ``res``: its group version's discovery document lists it (readable by
        every authenticated client); False when the group version is not served at all."""
        base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
        try:
            data = await self._json("GET", base, what=f"discover {base}")
        except NotFoundError:
            return False
        return any(r.get("name") == res.plural for r in data.get("resources") or [])

    async def list(
        self,
        res: TypedResource[M],
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[M], str]:
        """Items as the resource's model, and the list's resourceVersion. An item that does not parse raises
        InvalidInputError naming it and the field at fault (an informer, which must go on, skips such items
        instead)."""
        items, version = await self.list_raw(
            res, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [_parse(res, item) for item in items], version

    async def list_raw(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[Body], str]:
        """Items as the server sent them, and the list's resourceVersion (to start a watch from)."""
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        data = await self._json("GET", res.path(namespace), query=query, what=f"list {res.plural}")
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    @overload
    async def create(
        self, res: TypedResource[M], body: M, namespace: str | None = None, *, dry_run: bool = False
    ) -> M: ...

    @overload
    async def create(
        self, res: Resource, body: Body, namespace: str | None = None, *, dry_run: bool = False
    ) -> Body: ...

    async def create(
        self, res: Resource, body: Body | WireModel, namespace: str | None = None, *, dry_run: bool = False
    ) -> Body | WireModel:
        """POST ``body`` (a model of a typed resource: the answer is one too); with ``dry_run`` the server
        validates and admits it, stores nothing and returns the object it would have stored (``dryRun=All``)."""
        wire = body.to_wire() if isinstance(body, WireModel) else body
        name = wire.get("metadata", {}).get("name") or wire.get("metadata", {}).get("generateName", "")
        query = [("fieldManager", self._field_manager)]
        if dry_run:
            query.append(("dryRun", "All"))
        answer = await self._json(
            "POST", res.path(namespace), query=query, body=wire, what=f"create {res.plural}/{name}"
        )
        return (
            _parse(res, answer) if isinstance(body, WireModel) and isinstance(res, TypedResource) else answer
        )

    async def create_subresource(
        self, res: Resource, name: str, subresource: str, body: Body, namespace: str | None = None
    ) -> Body:
        """POST to a subresource, e.g. a pod's ``binding``."""
        return await self._json(
            "POST",
            res.path(namespace, name, subresource),
            body=body,
            what=f"create {res.plural}/{name}/{subresource}",
        )

    @overload
    async def replace(self, res: TypedResource[M], body: M, *, subresource: str | None = None) -> M: ...

    @overload
    async def replace(self, res: Resource, body: Body, *, subresource: str | None = None) -> Body: ...

    async def replace(
        self, res: Resource, body: Body | WireModel, *, subresource: str | None = None
    ) -> Body | WireModel:
        """PUT ``body`` (a model of a typed resource: the answer is one too)."""
        wire = body.to_wire() if isinstance(body, WireModel) else body
        meta = wire.get("metadata", {})
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        query = [("fieldManager", self._field_manager)]
        answer = await self._json(
            "PUT", path, query=query, body=wire, what=f"replace {res.plural}/{meta['name']}"
        )
        return (
            _parse(res, answer) if isinstance(body, WireModel) and isinstance(res, TypedResource) else answer
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
        force: bool = False,
    ) -> Body:
        query = [("fieldManager", self._field_manager)]
        if patch_type == "apply" and force:
            query.append(("force", "true"))
        return await self._json(
            "PATCH",
            res.path(namespace, name, subresource),
            query=query,
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            what=f"patch {res.plural}/{name}" + (f"/{subresource}" if subresource else ""),
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        missing_ok: bool = True,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        """DELETE, optionally with a grace period and a uid precondition (DeleteOptions, as a kubelet deletes the
        pods it finished: grace 0, only that incarnation of the name)."""
        options: Body = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options} if options else None
        try:
            await self._json(
                "DELETE", res.path(namespace, name), body=body, what=f"delete {res.plural}/{name}"
            )
        except NotFoundError:
            if not missing_ok:
                raise

    async def apply_object(self, res: Resource, body: Body | WireModel) -> Body:
        """Create the object, or merge-patch it when it exists (idempotent, kubectl-apply-like); the answer is the
        wire form."""
        wire = body.to_wire() if isinstance(body, WireModel) else body
        meta = wire["metadata"]
        try:
            return await self.create(res, wire, meta.get("namespace"))
        except ConflictError:
            return await self.patch(res, meta["name"], wire, meta.get("namespace"))

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        gather: float = 0.0,
    ) -> AsyncIterator[tuple[str, Body]]:
        """Yield (type, object) until the server ends the watch; ERROR events raise KubeError (410 = start over).
        ``gather``: while events come closer together than that (seconds), read them at most that often
        (:attr:`gpudra.kube.transport.Call.gather`)."""
        query = [("watch", "true"), ("timeoutSeconds", str(timeout_seconds)), ("allowWatchBookmarks", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = await self._call(
            "GET",
            res.path(namespace),
            query=query,
            what=f"watch {res.plural}",
            timeout=timeout_seconds + 10,
            gather=gather,
        )
        async with response:
            try:
                async for line in _lines(response.chunks(), f"watch {res.plural}"):
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type", ""), event.get("object") or {}
                    if kind == "ERROR":
                        code = int(obj.get("code", 0))
                        raise KubeError(f"watch {res.plural}: {obj.get('message', obj)}", status=code)
                    yield kind, obj
            except _TRANSPORT_ERRORS as exc:
                raise _lost(exc, f"watch {res.plural}") from exc


def _plain_credentials(source: str) -> Credentials | None:
    """The credentials of one kubeconfig file that carries nothing but them; None for a list of files or a
    kubeconfig that needs kubernetes_asyncio's loader."""
    if os.pathsep in source:
        return None
    credentials = read_credentials(Path(source).expanduser())
    return None if credentials.unsupported else credentials


def _any_file(paths: str) -> bool:
    """Whether any path of a KUBECONFIG-style list (``a:b``, ``~`` expanded) is a file."""
    return any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p)
