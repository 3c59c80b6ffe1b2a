"""What a request asks, read from its URL alone, as kube-apiserver's RequestInfoFactory reads it before
authorization: the verb, API group, resource, subresource, namespace and name. Authorization comes before the
server looks the resource up, so a user refused a resource that is not served gets 403, not 404, as on
kube-apiserver. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping

from .rbac import Attributes

_TRUE = ("true", "True", "1")
_VERBS = {"GET": "get", "DELETE": "delete", "POST": "create", "PUT": "update", "PATCH": "patch"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def _selected_name(field_selector: str) -> str:
    """The name a ``metadata.name=<name>`` (or ``==``) field selector names, as RequestInfo takes it for a list or
    watch of one object."""
    for term in field_selector.split(","):
        key, _, value = term.partition("=")
        if key.strip() == "metadata.name":  # "!=" leaves "metadata.name!"
            return value.removeprefix("=").strip()
    return ""


def request_info(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    parts = [p for p in path.strip("/").split("/") if p]
    prefix = 2 if parts[:1] == ["api"] else 3 if parts[:1] == ["apis"] else 0
    if not prefix or len(parts) <= prefix:  # not an API path, or discovery
        return Attributes(method.lower(), path=path)
    group = "" if prefix == 2 else parts[1]
    rest = parts[prefix:]
    watching = rest[0] == "watch"
    if watching:
        rest = rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:  # a namespaced resource, not ns/x/status
            rest = rest[2:]
    if not rest:
        return Attributes(method.lower(), path=path)
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    verb = "watch" if watching else _VERBS.get(method, method.lower())
    if not name and verb == "get":  # a list or a watch; a field selector may name its object
        verb = "watch" if query.get("watch", "") in _TRUE else "list"
        name = _selected_name(query.get("fieldSelector") or "")
    elif not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        verb, group=group, resource=resource, subresource=subresource, namespace=namespace, name=name
    )
