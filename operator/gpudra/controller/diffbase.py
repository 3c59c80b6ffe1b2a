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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

KEPT_METADATA = ("labels", "annotations", "ownerReferences")
"""What of ``metadata`` the essence and its annotation keys are made from (``ownerReferences``: kopf names the
annotation of a Deployment's ReplicaSets apart)."""


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, *, tracked_kinds: Iterable[str] | None = None) -> None:
        """``tracked_kinds``: the kinds whose essence is built (None: every kind, as kopf does)."""
        super().__init__()
        self._tracked = None if tracked_kinds is None else frozenset(tracked_kinds)

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
            return super().build(body=body, extra_fields=extra)
        metadata = body.get("metadata") or {}
        lean: dict[str, Any] = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        lean["metadata"] = {k: metadata[k] for k in KEPT_METADATA if k in metadata}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)), extra_fields=None)


class LeanProgressStorage(kopf.SmartProgressStorage):
    """kopf's default progress storage (annotations under ``prefix``, and ``status.kopf.progress``), whose
    ``clear`` copies an essence only when it has something to clear."""

    def __init__(self, *, prefix: str = "kopf.zalando.org") -> None:
        super().__init__(prefix=prefix)
        self._marked = f"{prefix}/"

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
