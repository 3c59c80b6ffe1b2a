"""Background garbage collection: ownerReference cascades, foreground deletion, namespace termination.

An asyncio task woken by the database's hooks. A dependent is deleted when every owner uid it references is
gone (its own finalizers still hold it); ``Orphan`` propagation removes the reference instead;
``Foreground`` keeps the owner (finalizer ``foregroundDeletion``) until its dependents are gone; a
terminating namespace is emptied and then removed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .database import NAMESPACES, Database
from .status import APIStatusError

_BATCH = 500  # deletions between yields to the event loop


class GarbageCollector:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.pending: set[str] = set()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        db.notify = self.notify
        db.orphan = self.orphan

    def notify(self, uid: str) -> None:
        if uid:
            self.pending.add(uid)
        self.wake.set()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="gpudra-apiserver-gc")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            done = 0
            while self.pending or self.db.foreground or self.db.terminating:
                progressed = self.collect_once()
                done += progressed
                if done >= _BATCH:
                    done = 0
                    await asyncio.sleep(0)
                if not progressed:
                    break

    def collect_once(self) -> int:
        """One pass over the pending work; returns how many writes it made."""
        writes = 0
        db = self.db
        pending, self.pending = self.pending, set()
        for uid in pending:
            if db.owners.exists(uid):
                continue
            for ref in db.owners.dependents(uid):
                entry = db.entry_of(ref)
                rt = db.type_of(ref[0])
                if entry is None or rt is None or entry.obj["metadata"].get("deletionTimestamp"):
                    continue
                refs = entry.obj["metadata"].get("ownerReferences") or ()
                if any(db.owners.exists(str(r.get("uid"))) for r in refs if isinstance(r, dict)):
                    continue
                writes += self._delete(rt, ref[1], ref[2])
        for uid in list(db.foreground):
            writes += self._foreground(uid)
        for namespace in list(db.terminating):
            writes += self._terminate(namespace)
        return writes

    def _delete(self, rt: Any, namespace: str, name: str, options: dict[str, Any] | None = None) -> int:
        with contextlib.suppress(APIStatusError):
            self.db.delete(rt, namespace, name, options or {"propagationPolicy": "Background"})
            return 1
        return 0

    def _foreground(self, uid: str) -> int:
        db = self.db
        owner_ref = db.owners.locate(uid)
        owner = db.entry_of(owner_ref) if owner_ref is not None else None
        if owner is None or owner_ref is None:
            db.foreground.discard(uid)
            return 0
        writes = 0
        live = [ref for ref in db.owners.dependents(uid) if db.entry_of(ref) is not None]
        for ref in live:
            entry, rt = db.entry_of(ref), db.type_of(ref[0])
            if entry is not None and rt is not None and not entry.obj["metadata"].get("deletionTimestamp"):
                writes += self._delete(rt, ref[1], ref[2], {"propagationPolicy": "Foreground"})
        if live:
            return writes
        db.foreground.discard(uid)
        rt = db.type_of(owner_ref[0])
        finalizers = [f for f in owner.obj["metadata"].get("finalizers") or () if f != "foregroundDeletion"]
        if rt is not None:
            with contextlib.suppress(APIStatusError):
                db.patch(
                    rt,
                    owner_ref[1],
                    owner_ref[2],
                    {"metadata": {"finalizers": finalizers or None}},
                    "application/merge-patch+json",
                )
                writes += 1
        return writes

    def _terminate(self, namespace: str) -> int:
        db = self.db
        writes = 0
        contents = db.objects_in_namespace(namespace)
        for rt, entry in contents:
            if not entry.obj["metadata"].get("deletionTimestamp"):
                writes += self._delete(rt, namespace, entry.obj["metadata"]["name"])
        if not contents:
            ns_type = db.type_of(NAMESPACES)
            db.terminating.discard(namespace)
            if ns_type is not None and db.stores[NAMESPACES].get("", namespace) is not None:
                writes += self._delete(ns_type, "", namespace)
        return writes

    def orphan(self, owner: dict[str, Any]) -> None:
        """Remove the ownerReferences to ``owner`` from its dependents (propagationPolicy Orphan)."""
        db = self.db
        uid = owner["metadata"]["uid"]
        for ref in db.owners.dependents(uid):
            entry, rt = db.entry_of(ref), db.type_of(ref[0])
            if entry is None or rt is None:
                continue
            refs = [r for r in entry.obj["metadata"].get("ownerReferences") or () if r.get("uid") != uid]
            with contextlib.suppress(APIStatusError):
                db.patch(
                    rt,
                    ref[1],
                    ref[2],
                    {"metadata": {"ownerReferences": refs or None}},
                    "application/merge-patch+json",
                )
