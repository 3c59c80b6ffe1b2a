"""The embedded API server's indexes for the garbage collector: every stored object by uid, and every owner uid's
dependents (the objects whose ownerReferences name it), kept in step with each write and removal."""

from __future__ import annotations

from typing import Any

from .registry import StoreKey

ObjectRef = tuple[StoreKey, str, str]  # (store key, namespace, name)


def owner_uids(obj: dict[str, Any]) -> set[str]:
    refs = obj["metadata"].get("ownerReferences") or ()
    return {str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")}


class OwnerIndex:
    def __init__(self) -> None:
        self._objects: dict[str, ObjectRef] = {}  # uid -> where the object is stored
        self._dependents: dict[str, set[ObjectRef]] = {}  # owner uid -> dependents

    def exists(self, uid: str) -> bool:
        return uid in self._objects

    def locate(self, uid: str) -> ObjectRef | None:
        return self._objects.get(uid)

    def dependents(self, owner_uid: str) -> list[ObjectRef]:
        """The objects that name ``owner_uid`` among their owners (a copy: safe while they are deleted)."""
        return list(self._dependents.get(owner_uid, ()))

    def stored(self, ref: ObjectRef, old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
        """``new`` was written at ``ref`` over ``old`` (None: created). When this write changed its owners and none
        of them exists, one of their uids: the collector should look at its dependents."""
        self._objects[new["metadata"]["uid"]] = ref
        before, after = owner_uids(old) if old is not None else set(), owner_uids(new)
        if before == after:
            return None
        self._reindex(ref, before, after)
        if not after or any(u in self._objects for u in after):
            return None
        return next(iter(after))

    def removed(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        """The object at ``ref`` is gone."""
        self._objects.pop(obj["metadata"]["uid"], None)
        self._reindex(ref, owner_uids(obj), set())

    def _reindex(self, ref: ObjectRef, before: set[str], after: set[str]) -> None:
        for uid in before - after:
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self._dependents[uid]
        for uid in after - before:
            self._dependents.setdefault(uid, set()).add(ref)
