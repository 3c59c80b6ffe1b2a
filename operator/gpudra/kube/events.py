"""Posting core/v1 Events about objects, deduplicated as client-go's event correlator does: the same reason and
message on the same object is one Event whose ``count`` grows. Within the window a repeat only bumps a counter in
memory, so a pending claim cannot flood the API (kubernetes#137617). A repeat after the window is a new Event, or,
for a recorder made with ``series=True`` (it needs ``events patch``), writes the count and ``lastTimestamp`` into
the Event posted before (a new one when that has expired meanwhile). A post the server refused counts for nothing:
the same Event tried again is posted."""

from __future__ import annotations

import time
from typing import Any, Literal

from gpudra.api.meta import KubeObject
from gpudra.api.timestamps import rfc3339
from gpudra.errors import KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS
from gpudra.telemetry import get_logger

log = get_logger(__name__)
EventType = Literal["Normal", "Warning"]


_last_suffix = 0


def _suffix() -> str:
    """client-go's Event name suffix, the time in hex nanoseconds (strictly increasing here), so that a list in name
    order (kubectl describe's order among Events of the same second) is the order they were posted in."""
    global _last_suffix
    _last_suffix = max(time.time_ns(), _last_suffix + 1)
    return f"{_last_suffix:x}"


def _wire(involved: dict[str, Any] | KubeObject) -> dict[str, Any]:
    if isinstance(involved, dict):
        return involved
    return {
        "apiVersion": involved.api_version,
        "kind": involved.kind,
        "metadata": involved.metadata.to_wire(),
    }


class EventRecorder:
    def __init__(
        self, client: KubeClient, component: str, *, window_seconds: float = 600.0, series: bool = False
    ) -> None:
        self._client = client
        self._component = component
        self._window = window_seconds
        self._series = series
        self._last: dict[tuple[str, str, str], float] = {}
        self._posted: dict[
            tuple[str, str, str], tuple[str, str, int]
        ] = {}  # key -> event name, namespace, count
        self.suppressed = 0

    async def post(
        self,
        about: dict[str, Any] | KubeObject,
        type_: EventType,
        reason: str,
        message: str,
        *,
        field_path: str = "",
    ) -> bool:
        """Post unless the same event on the same object was posted within the window; True when written.
        ``field_path``: the part of the object it is about (``spec.containers{ctr}``; kubectl describe shows it)."""
        involved = _wire(about)
        meta = involved.get("metadata", {})
        key = (str(meta.get("uid", "")), reason, f"{field_path}: {message}" if field_path else message)
        now = time.monotonic()
        name, namespace, count = self._posted.get(key, ("", "", 0))
        if now - self._last.get(key, -1e18) < self._window:
            self.suppressed += 1
            self._posted[key] = (name, namespace, count + 1)
            return False
        self._last[key] = now
        if len(self._last) > 10_000:
            cutoff = now - self._window
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
            self._posted = {k: v for k, v in self._posted.items() if k in self._last}
        if name and self._series:
            repeated = await self._repeat(key, name, namespace, count + 1)
            if repeated is not None:
                return repeated
        namespace = meta.get("namespace") or "default"
        name = f"{meta.get('name', 'object')}.{_suffix()}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", ""),
                "kind": involved.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion"),
                **({"fieldPath": field_path} if field_path else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": rfc3339(),
            "lastTimestamp": rfc3339(),
            "count": 1,
        }
        try:
            await self._client.create(EVENTS, body, namespace)
        except KubeError as exc:
            log.warning("posting an event failed", reason=reason, error=str(exc))
            self._last.pop(key, None)  # nothing was posted: the next try is not a repeat
            return False
        self._posted[key] = (name, namespace, 1)
        return True

    async def _repeat(self, key: tuple[str, str, str], name: str, namespace: str, count: int) -> bool | None:
        """Write a repeat into the Event posted before (True when written); None when that Event is gone
        (expired: a new one is posted)."""
        try:
            await self._client.patch(EVENTS, name, {"count": count, "lastTimestamp": rfc3339()}, namespace)
        except NotFoundError:
            return None
        except KubeError as exc:
            log.warning("updating an event failed", reason=key[1], error=str(exc))
            return False
        self._posted[key] = (name, namespace, count)
        return True
