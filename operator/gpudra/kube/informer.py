"""A small informer: list, then watch from the list's resourceVersion, keeping a local cache and calling a handler
for each change, in one namespace (``namespace``, which needs only a Role there) or in all of them. A watch the
server ends is resumed from the last resourceVersion it handed (each change still handed on); a watch that fails
or expires (410) is resumed by re-listing, and the handler sees the difference as ADDED / MODIFIED / DELETED, so no
object's latest state is lost across a reconnect (an object deleted and made again under its name meanwhile, another
uid, is handed as the first one's DELETED, then ADDED, as a watch would have shown it).

One bad object never stops an informer. With ``parse`` (a model's validation), an object that does not parse is
kept out of the cache and the handler, as if absent (a version of it that parsed before goes as DELETED), is
logged once per version with its kind, name and the field at fault, and gets a Warning Event (``events``). A
handler that fails on an object is logged once per version too; everything else goes on.

An informer hands each change to every handler subscribed before it runs. :class:`Informers` keeps one informer per
kind and selection for a whole process, so that every consumer of a kind shares one list, one watch and one cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from gpudra.errors import InvalidInputError, KubeError, NotFoundError
from gpudra.kube.client import KubeClient, fault
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)

Key = tuple[str, str]
T = TypeVar("T")
Handler = Callable[[str, dict[str, Any]], Awaitable[None]]
Parse = Callable[[dict[str, Any]], object]
_REPORTED_LIMIT = 10_000
OPTIONAL_RETRY_SECONDS = 60.0
"""How often an optional kind the server does not serve is asked for again."""


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name", ""))


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        handler: Handler | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 240,
        parse: Parse | None = None,
        events: EventRecorder | None = None,
        gather_seconds: float = 0.0,
    ) -> None:
        self._client = client
        self._gather = gather_seconds
        self.resource = resource
        self._handlers: list[Handler] = [] if handler is None else [handler]
        self.namespace = namespace
        self._labels = label_selector
        self._fields = field_selector
        self._timeout = watch_timeout
        self._parse = parse
        self._events = events
        self._reported: set[tuple[str, str]] = set()  # (uid, resourceVersion) logged already
        self.cache: dict[Key, dict[str, Any]] = {}
        self.rejected: dict[Key, str] = {}
        """Objects kept out because they do not parse: key -> why (field: problem)."""
        self.synced = asyncio.Event()
        self._running = False
        self._last: tuple[dict[str, Any], object] | None = None  # the object being handed over, and its parse

    def subscribe(self, handler: Handler) -> None:
        """Hand every change to ``handler`` too (after the handlers subscribed before it); only before ``run()``,
        so that no subscriber misses the first listing."""
        if self._running:
            raise RuntimeError(f"the {self.resource.plural} informer runs already: subscribe before run()")
        self._handlers.append(handler)

    def _first_report(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid") or object_key(obj)), str(meta.get("resourceVersion") or ""))
        if key in self._reported:
            return False
        if len(self._reported) > _REPORTED_LIMIT:
            self._reported.clear()
        self._reported.add(key)
        return True

    async def _admit(self, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` parses; a first sight of an unparsable version is logged and posted as an Event."""
        if self._parse is None:
            return True
        try:
            self._last = (obj, self._parse(obj))
        except (ValidationError, InvalidInputError, ValueError, TypeError) as error:
            field, problem = fault(error)
            why = f"{field}: {problem}" if field else problem
            self.rejected[object_key(obj)] = why
            if self._first_report(obj):
                namespace, name = object_key(obj)
                kind = self.resource.kind
                log.warning(
                    "object ignored: it does not parse", kind=kind, namespace=namespace or None, name=name,
                    field=field, problem=problem,
                )  # fmt: skip
                if self._events is not None:
                    await self._events.post(
                        obj, "Warning", "InvalidObject", f"{kind} {name} is ignored until fixed: {why}"
                    )
            return False
        self.rejected.pop(object_key(obj), None)
        return True

    def parsed(self, obj: dict[str, Any], model: type[T]) -> T:
        """``obj`` as this informer's ``parse`` made it: a handler is handed the model made while admitting it, and
        any other object is parsed again (a ``model`` that is not what ``parse`` makes: TypeError)."""
        last = self._last
        if last is not None and last[0] is obj and isinstance(last[1], model):
            return last[1]
        made = self._parse(obj) if self._parse is not None else None
        if not isinstance(made, model):
            raise TypeError(f"the {self.resource.plural} informer does not make {model.__name__}")
        return made

    async def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        for handler in self._handlers:
            try:
                await handler(kind, obj)
            except Exception:  # a handler bug must not stop the informer or starve the other handlers
                if self._first_report(obj):  # logged once per object version
                    log.exception(
                        "informer handler failed", resource=self.resource.plural, object=object_key(obj)
                    )

    async def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One change: to the cache and the handler, unless the object does not parse. No handler reads
        ``managedFields`` (several entries per manager that wrote the object): they are dropped from what is kept,
        as client-go's users do with a transform; an update sent without them leaves the server's as they are."""
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        key = object_key(obj)
        if kind == "DELETED":
            self.rejected.pop(key, None)
            if self.cache.pop(key, None) is not None:
                await self._emit(kind, obj)
            return
        if not await self._admit(obj):
            gone = self.cache.pop(key, None)
            if gone is not None:
                await self._emit("DELETED", gone)
            return
        self.cache[key] = obj
        await self._emit(kind, obj)

    async def _relist(self) -> str:
        items, version = await self._client.list_raw(
            self.resource, self.namespace, label_selector=self._labels, field_selector=self._fields
        )
        fresh = {object_key(o): o for o in items}
        for key, obj in list(self.cache.items()):
            if key not in fresh:
                await self._apply("DELETED", obj)
        for key, obj in fresh.items():
            before = self.cache.get(key)
            if before is not None and _made_again(
                before, obj
            ):  # deleted and made again under its name meanwhile
                await self._apply("DELETED", before)
                before = None
            if before is None:
                await self._apply("ADDED", obj)
            elif before.get("metadata", {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                await self._apply("MODIFIED", obj)
        return version

    async def run(self) -> None:
        self._running = True
        backoff = 0.1
        version = ""  # where the next watch starts; empty: list first
        while True:
            try:
                if not version:
                    version = await self._relist()
                    self.synced.set()
                    backoff = 0.1
                version = await self._watch(version)
            # KubeConnectionError too: a restart of the API server, a broken connection
            except KubeError as exc:
                version = ""
                if exc.status != 410:
                    log.warning("watch failed; re-listing", resource=self.resource.plural, error=str(exc))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)

    async def _watch(self, version: str) -> str:
        """Watch from ``version`` until the server ends the watch (its timeout, or kube-apiserver closing a watcher
        that reads too slowly); where the next watch resumes, as client-go's reflector does: the last version seen,
        or empty (list again) when the watch handed nothing, not even a bookmark. A re-list hands the handlers one
        change per object for everything that changed meanwhile: a resumed watch hands each change."""
        resume = ""
        async for kind, obj in self._client.watch(
            self.resource,
            self.namespace,
            resource_version=version,
            label_selector=self._labels,
            field_selector=self._fields,
            timeout_seconds=self._timeout,
            gather=self._gather,
        ):
            resume = str((obj.get("metadata") or {}).get("resourceVersion") or resume or version)
            if kind != "BOOKMARK":
                await self._apply(kind, obj)
        return resume


def _made_again(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether ``now`` is another object than ``before`` under the same name (both uids known, and different): a
    handler that keys what it keeps by uid must see the first one go, as a watch would have shown it."""
    old_uid = (before.get("metadata") or {}).get("uid")
    new_uid = (now.get("metadata") or {}).get("uid")
    return bool(old_uid and new_uid and old_uid != new_uid)


@dataclass(frozen=True)
class Selection:
    """What one informer watches: a kind, in one namespace or all, with the server-side selectors."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class Informers:
    """The process's informers: ``informer()`` hands out the same one for the same selection, whoever asks, and
    ``run()`` runs them all. Ask (and subscribe) before ``run()``.

    A kind asked for as ``optional`` by every asker (a custom resource the cluster may not serve: its CRD not
    installed) is watched once the server serves it, said once in the log, and ``synced()`` does not wait for it.
    """

    def __init__(
        self, client: KubeClient, *, events: EventRecorder | None = None, gather_seconds: float = 0.0
    ) -> None:
        """``gather_seconds``: each watch's events, while they come closer together than that, are read at most
        that often (several a read: :meth:`gpudra.kube.client.KubeClient.watch`); 0: each as it comes."""
        self._client = client
        self._events = events
        self._gather = gather_seconds
        self._informers: dict[Selection, tuple[Informer, Parse]] = {}
        self._required: set[Selection] = set()
        self._running = False

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        parse: Parse,
        optional: bool = False,
    ) -> Informer:
        """The informer of this selection, made on the first ask; every ask must name the same ``parse`` (one
        model per kind, so that every consumer sees the same objects)."""
        selection = Selection(resource, namespace, label_selector, field_selector)
        known = self._informers.get(selection)
        if known is not None and known[1] != parse:
            raise ValueError(f"the {resource.plural} informer parses its objects another way")
        if self._running:
            raise RuntimeError(f"the informers run already: ask for {resource.plural} before run()")
        if not optional:
            self._required.add(selection)
        if known is not None:
            return known[0]
        informer = Informer(
            self._client,
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            parse=parse,
            events=self._events,
            gather_seconds=self._gather,
        )
        self._informers[selection] = (informer, parse)
        return informer

    def __len__(self) -> int:
        return len(self._informers)

    def each(self) -> list[Informer]:
        """Every informer asked for so far."""
        return [informer for informer, _ in self._informers.values()]

    async def synced(self) -> None:
        """Until every informer that is not optional has listed once."""
        await asyncio.gather(*(self._informers[s][0].synced.wait() for s in self._required))

    async def run(self) -> None:
        """Run every informer (an optional one once it is served) until cancelled."""
        self._running = True
        await asyncio.gather(
            *(
                informer.run() if selection in self._required else self._when_served(informer)
                for selection, (informer, _) in self._informers.items()
            )
        )

    async def _when_served(self, informer: Informer) -> None:
        said = False
        while True:
            try:
                await self._client.list_raw(informer.resource, informer.namespace)
                break
            except NotFoundError:
                if not said:
                    log.info(
                        "not served by the API server; watched once it is", resource=informer.resource.plural
                    )
                    said = True
                await asyncio.sleep(OPTIONAL_RETRY_SECONDS)
        await informer.run()
