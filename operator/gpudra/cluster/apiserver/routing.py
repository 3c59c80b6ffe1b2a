"""Parsing request paths of the Kubernetes API into (resource type, namespace, name, subresource)."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry, ResourceType
from .status import APIStatusError

_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True, slots=True)
class Target:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (or a cluster-scoped resource)
    name: str
    subresource: str
    watch_path: bool  # the deprecated /watch/ path prefix

    @property
    def ns(self) -> str:
        """The namespace key of an object of this target ('' for cluster-scoped)."""
        return self.namespace or ""


@dataclass(frozen=True, slots=True)
class Discovery:
    group: str | None  # None: /api or /apis
    version: str | None
    legacy: bool


def _not_found() -> APIStatusError:
    return APIStatusError(404, "NotFound", "the server could not find the requested resource")


def parse(registry: Registry, path: str) -> Target | Discovery:
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        raise _not_found()
    if parts[0] == "api":
        if len(parts) == 1:
            return Discovery(None, None, legacy=True)
        if parts[1] != "v1":
            raise _not_found()
        group, version, rest = "", "v1", parts[2:]
    else:
        if len(parts) == 1:
            return Discovery(None, None, legacy=False)
        if len(parts) == 2:
            return Discovery(parts[1], None, legacy=False)
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return Discovery(group, version, legacy=not group)
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    namespace_subresource = group == "" and len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES
    if rest and rest[0] == "namespaces" and len(rest) >= 3 and not namespace_subresource:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise _not_found()
    rt = registry.get(group, version, rest[0])
    if rt is None:
        raise _not_found()
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if namespace is not None and not rt.namespaced:
        raise _not_found()
    if rt.namespaced and namespace is None and name:
        raise _not_found()
    if (
        subresource
        and subresource not in rt.subresources
        and not (rt.plural == "namespaces" and subresource in _NAMESPACE_SUBRESOURCES)
    ):
        raise _not_found()
    return Target(rt, namespace, name, subresource, watch_path)
