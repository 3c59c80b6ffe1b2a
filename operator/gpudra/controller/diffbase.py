"""kopf's record of an object's last handled state (its "essence"), computed without copying what it throws away.

kopf computes the essence of every object on every event of every resource it watches, whatever the handlers:
its default storage deep-copies the whole body and then deletes ``status`` and ``metadata`` from the copy. A
ResourceClaim's status (its allocation) and a ComputeDomain's (a node list) are most of the object, so at 256 pods
that copying was about a quarter of the controller's CPU, for essences only the ComputeDomain handlers read. This
storage is kopf's default one (same annotations, same essence) handed a body without those two stanzas, except
for the metadata kopf reads; with extra fields to keep (handlers on status fields) the whole body as before.

kopf builds the essence even for kinds no handler watches for changes (create, update, resume, delete, field
handlers), where nothing reads it: for those the storage answers an empty essence without building one. The kinds
with such handlers are named when the storage is made (``tracked_kinds``); a test holds the controller's list to
its registry's handlers.

kopf then clears each essence (the last handled one and the new one) of its progress records, and its default
progress storage deep-copies the essence twice to do so, four copies per event, even when there is nothing to
clear: the lean one hands such an essence back as it is.

Both records live in the object's status (``status.kopf.last-handled-configuration`` and ``status.kopf.progress``),
not in annotations as kopf's defaults keep them. The API server caps an object's annotations at 256 KiB together,
and the essence kopf records holds the user's own annotations: a ComputeDomain carrying 200 KB of legal annotations
refused every write of kopf's annotations (422 "Too long"), and stayed Terminating for good because the patch that
releases the finalizer carried them. A status patch goes to the status subresource, apart from the finalizer's
patch, and the object's size limit (about 1.5 MiB) leaves room for the copy. Records an older controller left in
annotations are read, and removed at the next write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

KEPT_METADATA = ("labels", "annotations", "ownerReferences")
"""What of ``metadata`` the essence and its annotation keys are made from (``ownerReferences``: kopf names the
annotation of a Deployment's ReplicaSets apart)."""

PREFIX = "kopf.zalando.org"
"""The prefix of kopf's annotations (what an older controller wrote, and the marker other operators look for)."""


class LeanDiffBaseStorage(kopf.DiffBaseStorage):
    def __init__(self, *, tracked_kinds: Iterable[str] | None = None) -> None:
        """``tracked_kinds``: the kinds whose essence is built (None: every kind, as kopf does)."""
        super().__init__()
        self._tracked = None if tracked_kinds is None else frozenset(tracked_kinds)
        self._status = kopf.StatusDiffBaseStorage()
        self._annotations = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        if self._tracked is not None and body.get("kind") not in self._tracked:
            return cast(kopf.BodyEssence, {})
        extra = list(extra_fields or ())
        if extra:
            return self._annotations.build(body=body, extra_fields=extra)
        metadata = body.get("metadata") or {}
        lean: dict[str, Any] = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        lean["metadata"] = {k: metadata[k] for k in KEPT_METADATA if k in metadata}
        return self._annotations.build(body=kopf.Body(cast(kopf.RawBody, lean)), extra_fields=None)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        stored = self._status.fetch(body=body)
        return stored if stored is not None else self._annotations.fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        self._status.store(body=body, patch=patch, essence=essence)
        annotations = body.metadata.annotations
        for key in self._annotations.make_keys(self._annotations.key, body=body):
            if key in annotations:
                patch.metadata.annotations[key] = None


class LeanProgressStorage(kopf.MultiProgressStorage):
    """Progress records in ``status.kopf.progress``; records an older controller left in annotations are read, and
    removed when the handler's record is next written or purged. ``clear`` copies an essence only when it has
    something to clear."""

    def __init__(self, *, prefix: str = PREFIX) -> None:
        self._status = kopf.StatusProgressStorage()
        self._annotations = kopf.AnnotationsProgressStorage(prefix=prefix)
        super().__init__([self._status, self._annotations])
        self._marked = f"{prefix}/"

    def store(
        self, *, key: kopf.HandlerId, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch
    ) -> None:
        self._status.store(key=key, record=record, body=body, patch=patch)
        self._annotations.purge(key=key, body=body, patch=patch)

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        self._status.touch(body=body, patch=patch, value=value)

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        if self._clean(cast(dict[str, Any], essence)):
            return essence
        return super().clear(essence=essence)

    def _clean(self, essence: dict[str, Any]) -> bool:
        """Whether clearing would leave ``essence`` as it is: no status, no progress annotation, no empty
        stanza (kopf's clear removes those three)."""
        if "status" in essence:
            return False
        metadata = essence.get("metadata")
        if metadata is None:
            return True
        if not metadata or metadata.get("labels") == {}:
            return False
        annotations = metadata.get("annotations")
        if annotations is None:
            return True
        return bool(annotations) and not any(key.startswith(self._marked) for key in annotations)
