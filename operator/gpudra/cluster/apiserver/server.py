"""The embedded Kubernetes API server: aiohttp, plain HTTP on 127.0.0.1, no request log.

Every request authenticates, with a bearer token the server's :class:`TokenIssuer` signed (over HTTP) or an
:class:`Identity` (in-process, local.py), and is authorized by RBAC (rbac.py); without valid credentials it is
refused with 401 as kube-apiserver with ``--anonymous-auth=false`` refuses it, the health endpoints included.

Serves what kopf, kubernetes_asyncio and kubectl use (see the package docstring for the limits). Request
bodies are JSON, YAML or, for the built-in kinds, protobuf (kubectl's typed generators, ``kubectl create ns X``,
send it); responses are protobuf when the client prefers it and the kind has a protobuf form (kubeproto/).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from . import bodies, discovery
from .collector import GarbageCollector
from .database import APPLY, Database
from .fieldlabels import check_field_selector
from .identity import ADMIN, Identity, TokenIssuer, bearer_token, unauthorized
from .kubeproto import wire
from .kubeproto.convert import ConversionError
from .listoptions import check_list_options
from .local import LocalRequest
from .patches import FAILED_TEST_MESSAGE
from .podlogs import PodLogProxy, no_containers
from .rbac import Attributes, Policy, forbidden
from .requestinfo import request_info
from .routing import Discovery, Target, parse
from .scale import scale_of, write_scale
from .selectorsyntax import parse_selectors
from .servingtls import ServingTLS
from .status import APIStatusError, bad_request
from .store import Entry, encode
from .tables import table
from .typemeta import check_type_meta
from .validation import MODES, Admission
from .versions import DEFAULT_MINOR, KubeVersion
from .watching import ResponseSink, WatchRequest, object_bytes

_JSON = "application/json"
_TRUE = ("true", "True", "1")
CONFLICTS_PATH = "/debug/gpudra/conflicts"
"""409s by resource, and JSON patches refused for a failed ``test`` (422) by ``<resource>`` + FAILED_TEST, as
JSON (benchmarks read it from a server in another process)."""
FAILED_TEST = "#failed-test"
"""Suffix of the key that counts a resource's JSON patches whose ``test`` failed: the other way to lose a race."""
_PLAIN = {"/healthz", "/readyz", "/livez", "/healthz/ping", "/readyz/ping", "/livez/ping"}

Request = web.Request | LocalRequest
"""A request over HTTP, or from the server's own process (local.py): the same dispatch serves both."""


def _response(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else encode(body)
    return web.Response(body=data, status=status, content_type=_JSON)


def _reply(request: Request, body: dict[str, Any], status: int = 200) -> web.Response:
    """``body`` as protobuf when the client prefers it and its kind has a protobuf form, else as JSON."""
    if wire.prefers_protobuf(request.headers.get("Accept", "")):
        try:
            return web.Response(body=wire.encode(body), status=status, content_type=wire.PROTOBUF)
        except ConversionError:
            pass  # JSON is acceptable to every client that sends protobuf
    return _response(body, status)


def _table_mode(request: Request) -> str | None:
    accept = request.headers.get("Accept", "")
    if "as=Table" in accept and "g=meta.k8s.io" in accept:
        return request.query.get("includeObject") or "Metadata"
    return None


class EmbeddedAPIServer:
    """An in-process Kubernetes API server for tests, benchmarks and ``gpudra up``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        feature_gates: frozenset[str] = frozenset(),
        minor: int = DEFAULT_MINOR,
        tokens: TokenIssuer | None = None,
        policy: Policy | None = None,
        tls: ServingTLS | None = None,
    ) -> None:
        """``minor``: the Kubernetes 1.x version emulated (versions.py); ``feature_gates``: the gates off by default
        to turn on (``DRAListTypeAttributes``); ``tokens``: who signs the bearer tokens it accepts (None: a new
        key); ``policy``: the RBAC roles and bindings it enforces (None: its bootstrap policy only, where
        system:masters may do anything); ``tls``: serve HTTPS with this certificate (None: plain HTTP, which
        Python clients use with a token, but kubectl does not: it sends credentials only over TLS)."""
        self._host, self._port = host, port
        self.tls = tls
        self.tokens = tokens or TokenIssuer()
        self.policy = policy or Policy()
        self._url = ""
        self.database = Database(KubeVersion(minor, feature_gates))
        self._pod_logs = PodLogProxy(self.database)
        self._collector: GarbageCollector | None = None
        self._runner: web.AppRunner | None = None
        self.errors: Counter[tuple[int, str]] = Counter()
        """Failed requests by (HTTP code, reason); benchmarks read the 409 Conflicts from it."""
        self.conflicts_by_resource: Counter[str] = Counter()
        """409 Conflicts by resource (plural, ``/subresource`` appended), and failed JSON patch tests (the
        resource + FAILED_TEST), for benchmarks."""

    @property
    def conflicts(self) -> int:
        """Writes refused with 409 Conflict (a stale resourceVersion or a refused binding)."""
        return self.errors[(409, "Conflict")]

    @property
    def serving(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        if not self._url:
            raise RuntimeError("the embedded API server is not started")
        return self._url

    async def start(self) -> str:
        """Bind (port 0 picks a free port) and serve; returns the base URL."""
        self._collector = GarbageCollector(self.database)
        self._collector.start()
        app = web.Application(client_max_size=bodies.MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self._host, self._port, ssl_context=self.tls.context() if self.tls else None
        )
        await site.start()
        address = self._runner.addresses[0]
        self._url = f"{'https' if self.tls else 'http'}://{self._host}:{address[1]}"
        return self._url

    async def stop(self) -> None:
        """End every watch, the garbage collector and the listener."""
        for store in self.database.stores.values():
            store.close_watchers()
        if self._collector is not None:
            await self._collector.stop()
            self._collector = None
        await self._pod_logs.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def token(self, who: Identity = ADMIN) -> str:
        """A bearer token of ``who`` this server accepts."""
        return self.tokens.issue(who)

    def kubeconfig(self, who: Identity = ADMIN) -> dict[str, Any]:
        """A kubeconfig with cluster, user and context ``gpudra`` pointing at this server, with a token of
        ``who``."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gpudra", "cluster": self._cluster()}],
            "users": [{"name": "gpudra", "user": {"token": self.token(who)}}],
            "contexts": [{"name": "gpudra", "context": {"cluster": "gpudra", "user": "gpudra"}}],
            "current-context": "gpudra",
            "preferences": {},
        }

    def _cluster(self) -> dict[str, str]:
        if self.tls is None:
            return {"server": self.url}
        return {"server": self.url, "certificate-authority": str(self.tls.ca.absolute())}

    def write_kubeconfig(self, path: Path, who: Identity = ADMIN) -> None:
        """Write :meth:`kubeconfig` as YAML, atomically (a temporary file renamed over ``path``), readable by its
        owner only (it holds a token)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                yaml.safe_dump(self.kubeconfig(who), handle, sort_keys=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ HTTP
    async def handle(self, request: Request) -> web.StreamResponse:
        """Answer one request: a watch streams into its ``ResponseSink`` (HTTP) or its ``LocalStream``."""
        try:
            return await self._dispatch(request)
        except APIStatusError as exc:
            self.errors[(exc.status, exc.reason)] += 1
            if exc.status == 409:
                self.conflicts_by_resource[self._resource_of(request.path)] += 1
            elif exc.status == 422 and exc.message.startswith(FAILED_TEST_MESSAGE):
                self.conflicts_by_resource[self._resource_of(request.path) + FAILED_TEST] += 1
            if self._custom(request.path):
                return _response(exc.to_status(), exc.status)  # no protobuf for custom resources
            return _reply(request, exc.to_status(), exc.status)

    def _custom(self, path: str) -> bool:
        try:
            target = parse(self.database.registry, path)
        except APIStatusError:
            return False
        return isinstance(target, Target) and target.rt.is_custom

    def _resource_of(self, path: str) -> str:
        try:
            target = parse(self.database.registry, path)
        except APIStatusError:
            return path
        if isinstance(target, Discovery):
            return path
        return target.rt.plural + (f"/{target.subresource}" if target.subresource else "")

    def _authenticated(self, request: Request) -> Identity:
        if isinstance(request, LocalRequest):
            return request.identity
        token = bearer_token(request.headers.get("Authorization"))
        who = self.tokens.verify(token) if token is not None else None
        if who is None:
            raise unauthorized()
        return who

    def _authorize(self, who: Identity, request: Attributes) -> None:
        if not self.policy.allows(who, request):
            raise forbidden(who, request)

    async def _dispatch(self, request: Request) -> web.StreamResponse:
        path = request.path
        self._authorize(self._authenticated(request), request_info(request.method, path, request.query))
        if path.startswith(("/api/", "/apis/")) or path in ("/api", "/apis"):
            target = parse(self.database.registry, path)
            if isinstance(target, Discovery):
                return self._discovery(request, target)
            return await self._resource(request, target)
        if request.method != "GET":
            raise APIStatusError(
                405, "MethodNotAllowed", f"the server does not allow {request.method} on {path}"
            )
        if path in _PLAIN:
            return web.Response(text="ok", content_type="text/plain")
        if path == CONFLICTS_PATH:
            return _response(dict(self.conflicts_by_resource))
        if path in ("/version", "/version/"):
            return _response(self.database.version.document())
        if path == "/openapi/v3":
            return _response(discovery.openapi_index(self.database.registry))
        if path.startswith("/openapi/v3/"):
            key = path[len("/openapi/v3/") :].split("/")
            group, version = (
                ("", key[1])
                if key[0] == "api" and len(key) == 2
                else ((key[1], key[2]) if key[0] == "apis" and len(key) == 3 else ("", ""))
            )
            document = (
                discovery.openapi_document(self.database.registry, group, version, self.database.version)
                if version
                else None
            )
            if document is not None:
                return _response(document)
        raise APIStatusError(404, "NotFound", "the server could not find the requested resource")

    def _discovery(self, request: Request, target: Discovery) -> web.Response:
        registry = self.database.registry
        if request.method != "GET":
            raise APIStatusError(405, "MethodNotAllowed", "discovery is read-only")
        document: dict[str, Any] | None
        if target.group is None:
            document = discovery.api_versions() if target.legacy else discovery.group_list(registry)
        elif target.version is None:
            document = discovery.api_group(registry, target.group)
        else:
            document = discovery.resource_list(registry, target.group, target.version)
        if document is None:
            raise APIStatusError(404, "NotFound", "the server could not find the requested resource")
        return _response(document)

    async def _body(
        self,
        request: Request,
        target: Target,
        *,
        optional: bool = False,
        admission: Admission | None = None,
    ) -> Any:
        """The request's body, read as kube-apiserver reads it (bodies.py); what a strict decoding refuses in it
        (duplicate keys) goes to ``admission``."""
        ctype = bodies.media_type(request.headers.get("Content-Type"))
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise bodies.too_large() from exc
        if len(raw) > bodies.MAX_BODY:
            raise bodies.too_large()
        if not raw.strip():
            if optional:
                return {}
            raise bad_request("the request body is empty")
        if ctype == wire.PROTOBUF and not target.rt.is_custom and request.method != "PATCH":
            try:
                return wire.decode(raw)
            except ValueError as exc:
                raise bad_request(f"the request body is not valid protobuf: {exc}") from exc
        duplicates = admission is not None and admission.mode != "Ignore"
        trusted = isinstance(request, LocalRequest)
        body = bodies.parse(raw, ctype, target.rt.kind, duplicates=duplicates, trusted=trusted)
        if admission is not None:
            admission.duplicates.extend(body.duplicates)
        return body.value

    def _object(self, request: Request, target: Target, entry: Entry, status: int = 200) -> web.Response:
        mode = _table_mode(request)
        if mode is not None:
            obj = json.loads(object_bytes(target.rt, entry))
            return _response(table(target.rt, [obj], str(entry.rv), mode), status)
        if not target.rt.is_custom and wire.prefers_protobuf(request.headers.get("Accept", "")):
            return _reply(request, {**entry.obj, "apiVersion": target.rt.api_version}, status)
        return _response(object_bytes(target.rt, entry), status)

    @staticmethod
    def _admission(query: Any) -> Admission:
        mode = query.get("fieldValidation") or "Warn"
        if mode not in MODES:
            raise bad_request(f'fieldValidation {mode!r} is not one of "Ignore", "Warn", "Strict"')
        return Admission(mode)

    @staticmethod
    def _warned(response: web.Response, admission: Admission) -> web.Response:
        """Kubernetes' ``Warning`` headers, one per warning (kubectl prints ``Warning: <text>``)."""
        for text in admission.warnings:
            response.headers.add("Warning", '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
        return response

    async def _resource(self, request: Request, target: Target) -> web.StreamResponse:
        db, rt, method, query = self.database, target.rt, request.method, request.query
        dry_run = "All" in query.getall("dryRun", [])
        if target.subresource in ("finalize",):
            raise APIStatusError(405, "MethodNotAllowed", "namespaces/finalize is not supported")
        if target.subresource == "log":
            if isinstance(request, LocalRequest):
                raise bad_request("pod logs are served over HTTP only")
            return await self._pod_logs.serve(request, target)
        if target.subresource in ("exec", "attach", "portforward"):
            db.get(rt, target.ns, target.name)  # a pod that does not exist is a 404 first
            raise no_containers()
        if method in ("POST", "PUT", "PATCH"):
            bodies.check_media_type(
                method, bodies.media_type(request.headers.get("Content-Type")), rt.is_custom
            )
        if target.subresource == "scale":
            return await self._scale(request, target, dry_run)
        if method == "GET":
            if target.name:
                return self._object(request, target, db.get(rt, target.ns, target.name))
            labels, fields = parse_selectors(query.get("labelSelector"), query.get("fieldSelector"))
            check_field_selector(rt, fields)
            watching = target.watch_path or query.get("watch", "") in _TRUE
            check_list_options(query, watching=watching)
            if watching:
                mode = _table_mode(request)
                protobuf = (
                    mode is None
                    and not rt.is_custom
                    and wire.prefers_protobuf(request.headers.get("Accept", ""))
                )
                watch = WatchRequest(db, rt, target.namespace, labels, fields, query, mode, protobuf=protobuf)
                if isinstance(request, LocalRequest):
                    await watch.serve(request.stream)
                    return web.Response()  # the stream carried the answer
                sink = ResponseSink(request)
                await watch.serve(sink)
                return sink.response
            return self._list(request, target, db.select(rt, target.namespace, labels, fields))
        if method == "POST":
            if target.subresource == "binding":
                db.bind(rt, target.ns, target.name, await self._body(request, target))
                return _reply(
                    request,
                    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                    201,
                )
            if target.name or (rt.namespaced and target.namespace is None):
                raise APIStatusError(405, "MethodNotAllowed", f"POST is not allowed on {request.path}")
            admission = self._admission(query)
            body = await self._body(request, target, admission=admission)
            check_type_meta(db.registry, rt, body)
            entry = db.create(rt, target.ns, body, dry_run=dry_run, admission=admission)
            return self._warned(self._object(request, target, entry, 201), admission)
        if not target.name:
            if method == "DELETE" and (target.namespace is not None or not rt.namespaced):
                return await self._delete_collection(request, target, dry_run)
            raise APIStatusError(405, "MethodNotAllowed", f"{method} is not allowed on {request.path}")
        if method == "PUT":
            admission = self._admission(query)
            body = await self._body(request, target, admission=admission)
            check_type_meta(db.registry, rt, body)
            entry = db.update(
                rt,
                target.ns,
                target.name,
                body,
                subresource=target.subresource,
                dry_run=dry_run,
                admission=admission,
            )
            return self._warned(self._object(request, target, entry), admission)
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            body, admission = await self._body(request, target), self._admission(query)
            entry, created = db.patch(
                rt,
                target.ns,
                target.name,
                body,
                ctype,
                subresource=target.subresource,
                dry_run=dry_run,
                admission=admission,
            )
            status = 201 if created and ctype == APPLY else 200
            return self._warned(self._object(request, target, entry, status), admission)
        if method == "DELETE":
            options = self._delete_options(query, await self._body(request, target, optional=True))
            before = db.get(rt, target.ns, target.name)
            entry = db.delete(rt, target.ns, target.name, options, dry_run=dry_run)
            if db.store(rt).get(target.ns, target.name) is not None and not dry_run:
                return self._object(request, target, entry, 202 if entry is not before else 200)
            meta = entry.obj["metadata"]
            return _reply(
                request,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": meta["name"],
                        "group": rt.group,
                        "kind": rt.plural,
                        "uid": meta["uid"],
                    },
                },
            )
        raise APIStatusError(405, "MethodNotAllowed", f"{method} is not allowed on {request.path}")

    async def _scale(self, request: Request, target: Target, dry_run: bool) -> web.Response:
        """GET, PUT or PATCH of a Deployment's or ReplicaSet's Scale."""
        db, rt, method = self.database, target.rt, request.method
        if method == "GET":
            return _response(scale_of(db.get(rt, target.ns, target.name)))
        if method not in ("PUT", "PATCH"):
            raise APIStatusError(405, "MethodNotAllowed", f"{method} is not allowed on {request.path}")
        patch_type = (
            request.headers.get("Content-Type", "").split(";")[0].strip().lower() if method == "PATCH" else ""
        )
        body = await self._body(request, target)
        return _response(
            write_scale(db, rt, target.ns, target.name, body, patch_type=patch_type, dry_run=dry_run)
        )

    @staticmethod
    def _delete_options(query: Any, body: Any) -> dict[str, Any]:
        options = dict(body) if isinstance(body, dict) else {}
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "orphanDependents" in query:
            options["orphanDependents"] = query["orphanDependents"] in _TRUE
        policy = options.get("propagationPolicy")
        if policy not in (None, "Background", "Foreground", "Orphan"):
            raise bad_request(f"propagationPolicy {policy!r} is not one of Background, Foreground, Orphan")
        return options

    def _list(self, request: Request, target: Target, entries: list[Entry]) -> web.Response:
        rt = target.rt
        rv = str(self.database.clock.value)
        mode = _table_mode(request)
        if mode is not None:
            objects = [json.loads(object_bytes(rt, e)) for e in entries]
            return _response(table(rt, objects, rv, mode))
        if not rt.is_custom and wire.prefers_protobuf(request.headers.get("Accept", "")):
            items = [{**e.obj, "apiVersion": rt.api_version} for e in entries]
            listing = {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": rv},
            }
            return _reply(request, {**listing, "items": items})
        head = encode(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": rv}}
        )
        body = head[:-1] + b',"items":[' + b",".join(object_bytes(rt, e) for e in entries) + b"]}"
        return _response(body)

    async def _delete_collection(self, request: Request, target: Target, dry_run: bool) -> web.Response:
        db, rt = self.database, target.rt
        query = request.query
        labels, fields = parse_selectors(query.get("labelSelector"), query.get("fieldSelector"))
        check_field_selector(rt, fields)
        options = self._delete_options(query, await self._body(request, target, optional=True))
        options.pop("preconditions", None)
        deleted = []
        for entry in db.select(rt, target.namespace, labels, fields):
            meta = entry.obj["metadata"]
            try:
                deleted.append(
                    db.delete(rt, meta.get("namespace") or "", meta["name"], options, dry_run=dry_run)
                )
            except APIStatusError as exc:
                if exc.status != 404:
                    raise
        return self._list(request, target, deleted)
