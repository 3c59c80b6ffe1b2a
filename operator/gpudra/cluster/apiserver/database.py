"""The semantics of the embedded API server's writes, independent of HTTP.

Server-set metadata, optimistic concurrency, status isolation, generation, finalizers and deletionTimestamp,
namespaces, bindings. What is served and stored is the ``catalog``'s (CRDs add types there); the ``owners`` index
(uids, owners -> dependents) is what the garbage collector reads.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from . import status as st
from .catalog import Catalog
from .crds import crd_status, now_rfc3339, validate_crd
from .owners import ObjectRef, OwnerIndex
from .patches import apply_merge, clone, json_patch, merge_patch, strip_strategic_directives
from .podadmission import SYSTEM_PRIORITY_CLASSES, admit_pod
from .registry import BUILTIN_NAMESPACES, CRD_GROUP, CRD_PLURAL, Registry, ResourceType, StoreKey
from .selectorsyntax import FieldSelector, LabelSelector
from .store import Clock, Entry, Store
from .validation import Admission, Admitter
from .validation.poddefaults import gated_condition, qos_class
from .versions import KubeVersion

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
NAMESPACES: StoreKey = ("", "namespaces")
SERVICE_ACCOUNTS: StoreKey = ("", "serviceaccounts")
PODS: StoreKey = ("", "pods")
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
_SYSTEM_CLASS_DESCRIPTION = "Used for system critical pods that must not be moved from their current node."
CRDS: StoreKey = (CRD_GROUP, CRD_PLURAL)

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


class Database:
    """All stores, the clock, and the write paths every HTTP verb goes through."""

    def __init__(self, version: KubeVersion | None = None) -> None:
        """``version``: the Kubernetes version emulated (default: the newest)."""
        self.version = version or KubeVersion()
        self.admitter = Admitter(self.version)
        self.clock = Clock()
        self.catalog = Catalog(self.clock, dropped=self._dropped, version=self.version)
        self.owners = OwnerIndex()
        # Hooks of the garbage collector: ``notify(uid)`` after an object with that uid is gone, a deletion
        # started, or a dependent of a missing owner was written (uid "" just wakes it); ``orphan(owner)``
        # removes the ownerReferences to an owner deleted with propagationPolicy Orphan.
        self.notify: Callable[[str], None] = lambda uid: None
        self.orphan: Callable[[dict[str, Any]], None] = lambda obj: None
        self.terminating: set[str] = set()  # namespaces being deleted
        self.foreground: set[str] = set()  # owner uids waiting for their dependents (foregroundDeletion)
        for ns in BUILTIN_NAMESPACES:
            self.create(self.registry.get("", "v1", "namespaces"), "", {"metadata": {"name": ns}})  # type: ignore[arg-type]
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            body = {"metadata": {"name": name}, "value": value, "description": _SYSTEM_CLASS_DESCRIPTION}
            self.create(self.registry.get(*PRIORITY_CLASSES), "", body)  # type: ignore[arg-type]

    # ----------------------------------------------------------------- lookups
    @property
    def registry(self) -> Registry:
        return self.catalog.registry

    @property
    def stores(self) -> dict[StoreKey, Store]:
        return self.catalog.stores

    def store(self, rt: ResourceType) -> Store:
        return self.catalog.store(rt)

    def get(self, rt: ResourceType, namespace: str, name: str) -> Entry:
        entry = self.store(rt).get(namespace, name)
        if entry is None:
            raise st.not_found(rt.plural, rt.group, name)
        return entry

    def select(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
    ) -> list[Entry]:
        return self.store(rt).select(namespace, labels, fields)

    def entry_of(self, ref: ObjectRef) -> Entry | None:
        store = self.stores.get(ref[0])
        return store.get(ref[1], ref[2]) if store is not None else None

    def type_of(self, key: StoreKey) -> ResourceType | None:
        return self.catalog.type_of(key)

    # ----------------------------------------------------------------- checks
    def _check_body(self, rt: ResourceType, namespace: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise st.bad_request(f"the body of a {rt.kind} must be a JSON object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind and kind != rt.kind:
            raise st.bad_request(f"the kind of the object ({kind}) does not match the resource ({rt.kind})")
        if api_version and api_version.split("/")[0] != (rt.group or rt.version) and rt.group:
            raise st.bad_request(f"the apiVersion {api_version} does not belong to the group {rt.group!r}")
        obj: dict[str, Any] = {"apiVersion": rt.api_version, "kind": rt.kind, **body}
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        elif not isinstance(meta, dict):
            raise st.bad_request("metadata must be an object")
        if rt.namespaced:
            given = meta.get("namespace")
            if given and given != namespace:
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta.pop("selfLink", None)
        meta.pop("managedFields", None)
        return obj

    def _require_namespace(self, rt: ResourceType, namespace: str, creating: bool) -> None:
        if not rt.namespaced:
            return
        if self.stores[NAMESPACES].get("", namespace) is None:
            raise st.not_found("namespaces", "", namespace)
        if creating and namespace in self.terminating:
            raise st.APIStatusError(
                403,
                "Forbidden",
                f"{rt.plural} is forbidden: unable to create new content in namespace {namespace} "
                "because it is being terminated",
                kind=rt.plural,
                group=rt.group,
            )

    # ----------------------------------------------------------------- create
    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        admission: Admission | None = None,
    ) -> Entry:
        obj = self._check_body(rt, namespace, body)
        meta = obj["metadata"]
        self._require_namespace(rt, namespace, creating=True)
        store = self.store(rt)
        name, prefix = meta.get("name"), meta.get("generateName")
        if not name and prefix:
            for _ in range(16):
                candidate = f"{prefix}{''.join(random.choices(_SUFFIX_ALPHABET, k=5))}"
                if store.get(namespace if rt.namespaced else "", candidate) is None:
                    name = meta["name"] = candidate
                    break
            else:
                raise st.already_exists(rt.plural, rt.group, f"{prefix}*")
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        if rt.has_status and not rt.keep_status_on_create:
            obj.pop("status", None)
        self._prepare_create(rt, obj)
        admission = admission or Admission()
        if rt.namespaced:
            space = self.stores[NAMESPACES].get("", namespace)
            admission.namespace_labels = dict((space.obj["metadata"].get("labels") or {}) if space else {})
        obj = self.admitter.admit(rt, obj, None, admission)
        if rt.storage_key == PODS:
            obj["status"]["qosClass"] = qos_class(obj.get("spec") or {})
            gated_condition(obj, meta["creationTimestamp"])
        if store.get(namespace if rt.namespaced else "", name) is not None:
            raise st.already_exists(rt.plural, rt.group, name)
        if dry_run:
            return Entry(obj)
        entry = self._commit(rt, obj, None)
        if rt.storage_key == NAMESPACES:
            # what kube-controller-manager's serviceaccount controller does for every namespace
            accounts = self.registry.get("", "v1", "serviceaccounts")
            assert accounts is not None
            self.create(accounts, name, {"metadata": {"name": "default"}})
        return entry

    def _prepare_create(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.storage_key == NAMESPACES:
            obj["status"] = {"phase": "Active"}
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        elif rt.storage_key == PODS:
            obj["status"] = {"phase": "Pending"}
            admit_pod(
                obj, obj["metadata"].get("namespace") or "", self._service_account, self._priority_classes()
            )
        elif rt.storage_key == CRDS:
            validate_crd(self.registry, obj)
            obj["status"] = crd_status(obj)

    def _service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        entry = self.stores[SERVICE_ACCOUNTS].get(namespace, name)
        return None if entry is None else entry.obj

    def _priority_classes(self) -> dict[str, dict[str, Any]]:
        store = self.stores[PRIORITY_CLASSES[0], PRIORITY_CLASSES[2]]
        return {entry.obj["metadata"]["name"]: entry.obj for entry in store.objects.values()}

    # ----------------------------------------------------------------- update
    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        admission: Admission | None = None,
    ) -> Entry:
        current = self.get(rt, namespace, name)
        obj = self._check_body(rt, namespace, body)
        given = obj["metadata"].get("name")
        if given and given != name:
            raise st.bad_request(
                f"the name of the object ({given}) does not match the name on the URL ({name})"
            )
        obj["metadata"]["name"] = name
        rv = obj["metadata"].get("resourceVersion")
        if rv and str(rv) != current.obj["metadata"]["resourceVersion"]:
            raise st.conflict(rt.plural, rt.group, name, st.STALE)
        return self._replace(rt, current, obj, subresource, dry_run=dry_run, admission=admission)

    def _replace(
        self,
        rt: ResourceType,
        current: Entry,
        new: dict[str, Any],
        subresource: str,
        *,
        dry_run: bool = False,
        admission: Admission | None = None,
        bump_generation: bool = True,
    ) -> Entry:
        """``bump_generation``: False for a binding, which sets spec.nodeName without a new generation."""
        old = current.obj
        old_meta = old["metadata"]
        if subresource == "status":
            status = new.get("status")
            new = dict(old)
            new["metadata"] = dict(old_meta)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            meta = new["metadata"]
            for key in _SERVER_META:
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if rt.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
                if added:
                    raise st.invalid(
                        rt.kind,
                        rt.group,
                        old_meta["name"],
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {sorted(added)!r}",
                    )
            if rt.storage_key == CRDS:
                validate_crd(self.registry, new)
                new["status"] = crd_status(new)
        # a status write changes only the status: the rest is the stored object, decoded when it was written
        stored = frozenset(k for k in new if k != "status") if subresource == "status" else frozenset()
        new = self.admitter.admit(rt, new, old, admission or Admission(), decoded=stored)
        meta = new["metadata"]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if bump_generation and self._spec(rt, new) != self._spec(rt, old):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        if new == old or dry_run:
            return current if new == old else Entry(new)
        return self._commit(rt, new, current)

    @staticmethod
    def _spec(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        skip = ("metadata", "status") if rt.has_status else ("metadata",)
        return {k: v for k, v in obj.items() if k not in skip}

    # ----------------------------------------------------------------- patch
    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch: Any,
        content_type: str,
        *,
        subresource: str = "",
        dry_run: bool = False,
        admission: Admission | None = None,
    ) -> tuple[Entry, bool]:
        """Apply a patch; returns the entry and whether it was created (server-side apply only)."""
        ns = namespace if rt.namespaced else ""
        current = self.store(rt).get(ns, name)
        if current is None:
            if content_type == APPLY and not subresource:
                if not isinstance(patch, dict):
                    raise st.bad_request("an apply patch must be an object")
                meta = patch.setdefault("metadata", {})
                if meta.get("name", name) != name:
                    raise st.bad_request("the name of the object does not match the name on the URL")
                meta["name"] = name
                self._require_namespace(rt, ns, creating=True)
                return self.create(rt, ns, patch, dry_run=dry_run, admission=admission), True
            raise st.not_found(rt.plural, rt.group, name)
        base = clone(current.obj)
        if content_type == JSON_PATCH:
            patched = json_patch(base, patch)
        elif content_type == MERGE:
            patched = merge_patch(base, patch)
        elif content_type == APPLY:
            patched = apply_merge(base, patch, rt.schema)
        elif content_type == STRATEGIC:
            patched = merge_patch(base, strip_strategic_directives(patch))
        else:
            raise st.APIStatusError(
                415, "UnsupportedMediaType", f"the media type {content_type!r} is not a patch"
            )
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise st.invalid(
                rt.kind, rt.group, name, "metadata", "Required value: the patch removed metadata"
            )
        rv = patched["metadata"].get("resourceVersion")
        if rv is not None and str(rv) != current.obj["metadata"]["resourceVersion"]:
            raise st.conflict(rt.plural, rt.group, name, st.STALE)
        if patched["metadata"].get("uid") not in (None, current.obj["metadata"]["uid"]):
            raise st.conflict(rt.plural, rt.group, name, "the uid in the patch does not match the object")
        patched["metadata"]["name"] = name
        obj = self._check_body(rt, ns, patched)
        return self._replace(rt, current, obj, subresource, dry_run=dry_run, admission=admission), False

    # ----------------------------------------------------------------- delete
    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> Entry:
        options = options or {}
        current = self.get(rt, namespace if rt.namespaced else "", name)
        meta = current.obj["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta["resourceVersion"]:
            raise st.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: {meta['resourceVersion']}",
            )
        if dry_run:
            return current
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        if policy == "Orphan":
            self.orphan(current.obj)
        finalizers = list(meta.get("finalizers") or ())
        foreground = policy == "Foreground" and bool(self.owners.dependents(meta["uid"]))
        if foreground and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        namespace_busy = rt.storage_key == NAMESPACES and self._namespace_has_objects(name)
        if not finalizers and not namespace_busy:
            return self._remove(rt, current)
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or ()):
            return current
        new = dict(current.obj)
        new_meta = new["metadata"] = dict(meta)
        new_meta.setdefault("deletionTimestamp", now_rfc3339())
        new_meta.setdefault("deletionGracePeriodSeconds", 0)
        if finalizers:
            new_meta["finalizers"] = finalizers
        if foreground:
            self.foreground.add(meta["uid"])
        if rt.storage_key == NAMESPACES:
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
            self.terminating.add(name)
        entry = self._commit(rt, new, current)
        self.notify("")  # wakes the collector for namespaces and foreground owners
        return entry

    def _namespace_has_objects(self, namespace: str) -> bool:
        return any(
            store.by_namespace.get(namespace) for key, store in self.stores.items() if key != NAMESPACES
        )

    def objects_in_namespace(self, namespace: str) -> list[tuple[ResourceType, Entry]]:
        result: list[tuple[ResourceType, Entry]] = []
        for key, store in self.stores.items():
            names = store.by_namespace.get(namespace)
            rt = self.type_of(key) if names else None
            if names and rt is not None and rt.namespaced:
                result.extend((rt, e) for e in list(names.values()))
        return result

    def _remove(self, rt: ResourceType, current: Entry) -> Entry:
        final_obj = dict(current.obj)
        final_obj["metadata"] = dict(current.obj["metadata"], resourceVersion=str(self.clock.tick()))
        final = Entry(final_obj)
        self.store(rt).remove(final, current)
        uid = final_obj["metadata"]["uid"]
        self.owners.removed(_ref(rt, current.obj), current.obj)
        if rt.storage_key == NAMESPACES:
            self.terminating.discard(final_obj["metadata"]["name"])
        elif rt.storage_key == CRDS:
            self.catalog.crd_removed(current.obj)
        self.notify(uid)
        return final

    # ----------------------------------------------------------------- commit
    def _commit(self, rt: ResourceType, obj: dict[str, Any], prev: Entry | None) -> Entry:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.clock.tick())
        entry = Entry(obj)
        self.store(rt).put(entry, prev)
        orphaned = self.owners.stored(_ref(rt, obj), prev.obj if prev is not None else None, obj)
        if orphaned is not None:
            self.notify(orphaned)  # every owner is gone already: let the collector look
        if rt.storage_key == CRDS:
            self.catalog.crd_written(obj, prev.obj if prev is not None else None)
        finished = prev is not None and meta.get("deletionTimestamp") and not meta.get("finalizers")
        if finished and not (rt.storage_key == NAMESPACES and self._namespace_has_objects(meta["name"])):
            return self._remove(rt, entry)
        return entry

    # ----------------------------------------------------------------- pods/binding
    def bind(self, rt: ResourceType, namespace: str, name: str, body: Any) -> None:
        current = self.get(rt, namespace, name)
        if not isinstance(body, dict) or not isinstance(body.get("target"), dict):
            raise st.bad_request("a Binding needs a target")
        node = str(body["target"].get("name") or "")
        if not node:
            raise st.invalid("Binding", "", name, "target.name", "Required value")
        bound = (current.obj.get("spec") or {}).get("nodeName")
        if bound:
            raise st.conflict(rt.plural, rt.group, name, f"pod {name} is already assigned to node {bound!r}")
        new = clone(current.obj)
        new.setdefault("spec", {})["nodeName"] = node
        self._replace(rt, current, new, "", bump_generation=False)

    def _dropped(self, key: StoreKey, store: Store) -> None:
        """A CRD's store went: its objects are gone for the collector too."""
        for entry in store.objects.values():
            self.owners.removed(_ref_in(key, entry.obj), entry.obj)
            self.notify(entry.obj["metadata"]["uid"])


def _ref(rt: ResourceType, obj: dict[str, Any]) -> ObjectRef:
    return _ref_in(rt.storage_key, obj)


def _ref_in(key: StoreKey, obj: dict[str, Any]) -> ObjectRef:
    return (key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
