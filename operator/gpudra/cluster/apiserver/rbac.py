"""RBAC authorization for the embedded API server, as kube-apiserver's RBAC authorizer decides.

The policy is the Roles, ClusterRoles and their bindings the server is given when it starts (``gpudra up`` gives
it manifests/base's) plus its bootstrap policy (:data:`BOOTSTRAP`): system:masters may do anything, every
authenticated user may read discovery, /version, /openapi and the health endpoints (kube-apiserver's
system:discovery, system:basic-user and system:public-info-viewer), and the stand-ins of the kubelet, the scheduler
and the controller manager may do anything (kube-apiserver gives them the Node authorizer, NodeRestriction and
their bootstrap ClusterRoles, which the embedded server does not model: docs/security.md). The server does not
serve rbac.authorization.k8s.io: the policy is fixed for the server's life. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .identity import MASTERS, SCHEDULER, Identity
from .status import APIStatusError

_ALL = "*"


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request asks, as kube-apiserver's RequestInfo gives it to authorizers. ``resource`` empty: a
    non-resource request for ``path``."""

    verb: str
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class _Rule:
    verbs: frozenset[str]
    groups: frozenset[str]
    resources: frozenset[str]
    names: frozenset[str]
    urls: tuple[str, ...]

    @classmethod
    def of(cls, rule: dict[str, Any]) -> _Rule:
        return cls(
            frozenset(rule.get("verbs") or ()),
            frozenset(rule.get("apiGroups") or ()),
            frozenset(rule.get("resources") or ()),
            frozenset(rule.get("resourceNames") or ()),
            tuple(rule.get("nonResourceURLs") or ()),
        )

    def allows(self, request: Attributes) -> bool:
        if _ALL not in self.verbs and request.verb not in self.verbs:
            return False
        if not request.resource:
            return any(
                url == request.path or (url.endswith(_ALL) and request.path.startswith(url[:-1]))
                for url in self.urls
            )
        if _ALL not in self.groups and request.group not in self.groups:
            return False
        if request.subresource:
            wanted = {
                f"{request.resource}/{request.subresource}",
                f"{request.resource}/*",
                f"*/{request.subresource}",
            }
        else:
            wanted = {request.resource}
        if _ALL not in self.resources and not wanted & self.resources:
            return False
        return not self.names or request.name in self.names


@dataclass(frozen=True, slots=True)
class _Grant:
    rule: _Rule
    namespace: str | None  # None: every namespace and the cluster scope (a ClusterRoleBinding)

    def allows(self, request: Attributes) -> bool:
        if self.namespace is not None and (not request.resource or request.namespace != self.namespace):
            return False
        return self.rule.allows(request)


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}


def _binding(name: str, subjects: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"kind": "ClusterRole", "name": name},
        "subjects": subjects,
    }


_EVERYTHING = [
    {"apiGroups": [_ALL], "resources": [_ALL], "verbs": [_ALL]},
    {"nonResourceURLs": [_ALL], "verbs": [_ALL]},
]
BOOTSTRAP: tuple[dict[str, Any], ...] = (
    _cluster_role("cluster-admin", _EVERYTHING),
    _binding("cluster-admin", [{"kind": "Group", "name": MASTERS}]),
    _cluster_role(
        "system:discovery",
        [
            {
                "nonResourceURLs": [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/openapi",
                    "/openapi/*",
                    "/version",
                    "/version/",
                    "/healthz",
                    "/livez",
                    "/readyz",
                ],
                "verbs": ["get"],
            }
        ],
    ),
    _binding("system:discovery", [{"kind": "Group", "name": "system:authenticated"}]),
    _cluster_role("gpudra:embedded-stand-ins", _EVERYTHING),
    _binding(
        "gpudra:embedded-stand-ins",
        [{"kind": "Group", "name": "system:nodes"}, {"kind": "User", "name": SCHEDULER.user}],
    ),
)
"""The server's own policy, whatever else it is given (see the module docstring)."""


def _subject_matches(subject: dict[str, Any], who: Identity, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == who.user)
    if kind == "Group":
        return name in who.groups
    if kind == "ServiceAccount":
        return who.user == f"system:serviceaccount:{subject.get('namespace') or namespace}:{name}"
    return False


class Policy:
    """The roles and bindings in force; :meth:`allows` is kube-apiserver's RBAC decision."""

    def __init__(self, objects: Iterable[dict[str, Any]] = ()) -> None:
        self._roles: dict[tuple[str, str], list[_Rule]] = {}
        self._bindings: list[dict[str, Any]] = []
        for obj in (*BOOTSTRAP, *objects):
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            if kind in ("Role", "ClusterRole"):
                scope = (meta.get("namespace") or "") if kind == "Role" else ""
                rules = [_Rule.of(rule) for rule in obj.get("rules") or ()]
                self._roles[(scope, str(meta.get("name")))] = rules
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                self._bindings.append(obj)
        self._grants: dict[Identity, tuple[_Grant, ...]] = {}

    def _grants_of(self, who: Identity) -> tuple[_Grant, ...]:
        grants = self._grants.get(who)
        if grants is None:
            found: list[_Grant] = []
            for binding in self._bindings:
                meta = binding.get("metadata") or {}
                namespace = (meta.get("namespace") or "") if binding.get("kind") == "RoleBinding" else None
                if not any(_subject_matches(s, who, namespace or "") for s in binding.get("subjects") or ()):
                    continue
                ref = binding.get("roleRef") or {}
                scope = "" if ref.get("kind") == "ClusterRole" else (namespace or "")
                found.extend(
                    _Grant(rule, namespace) for rule in self._roles.get((scope, str(ref.get("name"))), ())
                )
            grants = self._grants[who] = tuple(found)
        return grants

    def allows(self, who: Identity, request: Attributes) -> bool:
        return any(grant.allows(request) for grant in self._grants_of(who))


def forbidden(who: Identity, request: Attributes) -> APIStatusError:
    """kube-apiserver's 403 for a request its authorizers did not allow (its ``forbiddenMessage``)."""
    if not request.resource:
        return APIStatusError(
            403, "Forbidden", f'forbidden: User "{who.user}" cannot {request.verb} path "{request.path}"'
        )
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    scope = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    why = f'User "{who.user}" cannot {request.verb} resource "{resource}" in API group "{request.group}" {scope}'
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    what = f'{qualified} "{request.name}"' if request.name else qualified
    return APIStatusError(
        403,
        "Forbidden",
        f"{what} is forbidden: {why}",
        name=request.name,
        group=request.group,
        kind=request.resource,
    )
