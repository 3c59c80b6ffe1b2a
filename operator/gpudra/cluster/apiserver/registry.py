"""The resource types the embedded API server serves: one data-driven table of built-ins plus served CRDs.

Adding a built-in is one line in ``_BUILTINS``. Every served version of a CRD becomes a
:class:`ResourceType`; the versions of one group/plural share a store (``storage_key``), objects are served
without conversion.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .versions import KubeVersion

StoreKey = tuple[str, str]  # (group, plural): the versions of one resource share a store
CRD_GROUP = "apiextensions.k8s.io"
CRD_PLURAL = "customresourcedefinitions"


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One additionalPrinterColumn of a CRD version."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served group/version/resource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    indexed_fields: tuple[str, ...] = ()
    keep_status_on_create: bool = False
    printer_columns: tuple[PrinterColumn, ...] | None = None  # None: the built-in table of the resource
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def storage_key(self) -> StoreKey:
        return (self.group, self.plural)

    @property
    def is_custom(self) -> bool:
        return self.printer_columns is not None

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def verbs(self) -> list[str]:
        return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _builtin(spec: str) -> ResourceType:
    """Parse ``group/version plural Kind scope short,names categories subresources indexed.fields``."""
    gv, plural, kind, scope, shorts, cats, subs, fields = spec.split()
    group, _, version = gv.rpartition("/")
    return ResourceType(
        group="" if group == "core" else group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=scope == "ns",
        short_names=tuple(s for s in shorts.split(",") if s != "-"),
        categories=tuple(c for c in cats.split(",") if c != "-"),
        subresources=frozenset(s for s in subs.split(",") if s != "-"),
        indexed_fields=tuple(f for f in fields.split(",") if f != "-"),
        keep_status_on_create=plural in ("nodes", "events"),
    )


# group/version plural Kind scope(ns|cl) shortNames categories subresources indexedFields ('-' = none);
# {taint_rules}: the version DeviceTaintRule is served at (KubeVersion.taint_rule_version)
_BUILTINS = """
core/v1 namespaces Namespace cl ns - status -
core/v1 nodes Node cl no - status -
core/v1 pods Pod ns po all status,binding,log,exec,attach,portforward spec.nodeName
core/v1 events Event ns ev - - -
core/v1 configmaps ConfigMap ns cm - - -
core/v1 secrets Secret ns - - - -
core/v1 serviceaccounts ServiceAccount ns sa - - -
core/v1 services Service ns svc all status -
apps/v1 deployments Deployment ns deploy all status,scale -
apps/v1 daemonsets DaemonSet ns ds all status -
apps/v1 replicasets ReplicaSet ns rs all status,scale -
batch/v1 jobs Job ns - all status -
coordination.k8s.io/v1 leases Lease ns - - - -
scheduling.k8s.io/v1 priorityclasses PriorityClass cl pc - - -
events.k8s.io/v1 events Event ns ev - - -
resource.k8s.io/v1 deviceclasses DeviceClass cl - - - -
resource.k8s.io/v1 resourceclaims ResourceClaim ns - - status -
resource.k8s.io/v1 resourceclaimtemplates ResourceClaimTemplate ns - - - -
resource.k8s.io/v1 resourceslices ResourceSlice cl - - - spec.nodeName,spec.driver,spec.pool.name
resource.k8s.io/{taint_rules} devicetaintrules DeviceTaintRule cl - - status -
apiextensions.k8s.io/v1 customresourcedefinitions CustomResourceDefinition cl crd,crds - status -
"""

BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Registry:
    """Served resource types by group, version and plural; knows the group order for discovery."""

    def __init__(self, version: KubeVersion | None = None) -> None:
        """``version``: the emulated Kubernetes version (default: the newest), which decides what is served."""
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._groups: dict[str, list[str]] = {}  # group -> versions, in registration order
        self.revision = 0  # bumped on every change, hashes the OpenAPI documents
        for line in (
            _BUILTINS.format(taint_rules=(version or KubeVersion()).taint_rule_version).strip().splitlines()
        ):
            self.add(_builtin(line))

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt
        versions = self._groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
        self.revision += 1

    def remove(self, rt: ResourceType) -> None:
        self._types.pop((rt.group, rt.version, rt.plural), None)
        if not any(g == rt.group and v == rt.version for g, v, _ in self._types):
            versions = self._groups.get(rt.group, [])
            if rt.version in versions:
                versions.remove(rt.version)
            if not versions:
                self._groups.pop(rt.group, None)
        self.revision += 1

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_storage(self, key: StoreKey) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.storage_key == key]

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self._types.items() if g == group and v == version]

    def groups(self) -> dict[str, list[str]]:
        """Named groups (not the core group) with their versions, preferred version first."""
        return {g: list(vs) for g, vs in self._groups.items() if g}

    def has_group_version(self, group: str, version: str) -> bool:
        return version in self._groups.get(group, [])


def crd_resource_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The served resource types a CustomResourceDefinition declares."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    result = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        columns = tuple(
            PrinterColumn(
                name=str(col.get("name", "")),
                type=str(col.get("type", "string")),
                json_path=str(col.get("jsonPath", "")),
                description=str(col.get("description", "")),
                priority=int(col.get("priority", 0) or 0),
                format=str(col.get("format", "")),
            )
            for col in version.get("additionalPrinterColumns") or []
        )
        subresources = version.get("subresources") or {}
        result.append(
            ResourceType(
                group=str(spec.get("group", "")),
                version=str(version.get("name", "")),
                plural=str(names.get("plural", "")),
                kind=str(names.get("kind", "")),
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(k for k in ("status", "scale") if k in subresources),
                printer_columns=columns,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            )
        )
    return result
