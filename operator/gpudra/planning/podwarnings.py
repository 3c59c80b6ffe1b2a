"""Pure: the newest Warning Event posted on a pod for one reason, among the pod's Events as listed (those of an
earlier pod of the same name left out by uid), with how often and when it was last said. ``gpudra explain pod``
reads two of them: the kubelet's ``FailedPrepareDynamicResources`` (``gpudra.planning.preparestatus``) and
kube-controller-manager's ``FailedResourceClaimCreation`` (``gpudra.planning.claimcreation``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpudra.api.core import Pod


@dataclass(frozen=True)
class PodWarning:
    message: str
    count: int
    last: str
    """When it was last said (RFC 3339)."""

    def times(self) -> str:
        """How often and when: ``3 times, last at T`` (``last at T`` when said once)."""
        return f"{self.count} times, last at {self.last}" if self.count > 1 else f"last at {self.last}"


def newest_warning(
    pod: Pod, events: Iterable[Mapping[str, Any]], reason: str, prefix: str = ""
) -> PodWarning | None:
    """The newest of ``events`` that is a ``reason`` Warning on this pod whose message starts with ``prefix``."""
    uid = pod.metadata.uid
    found = [
        e
        for e in events
        if e.get("reason") == reason
        and e.get("type") == "Warning"
        and (e.get("involvedObject") or {}).get("uid") in (None, "", uid)
        and str(e.get("message") or "").startswith(prefix)
    ]
    if not found:
        return None
    newest = max(found, key=_said_at)
    return PodWarning(str(newest.get("message") or ""), int(newest.get("count") or 1), _said_at(newest))


def _said_at(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
