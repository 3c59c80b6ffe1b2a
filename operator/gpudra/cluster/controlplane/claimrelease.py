"""The stand-in resourceclaim controller's release of claims: a pod that is gone or finished leaves the
``reservedFor`` of every claim, and a claim that nobody reserves any more loses its allocation (and the devices'
status), so that its devices are free for the next pod."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudra.cluster.controlplane.state import ClusterState
from gpudra.errors import ConflictError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import RESOURCE_CLAIMS

_RELEASED = ("allocation", "devices")  # the status fields of an allocated claim that go with the allocation


class ClaimRelease:
    """``freed()`` is called after each write that may have freed devices."""

    def __init__(self, client: KubeClient, state: ClusterState, freed: Callable[[], None]) -> None:
        self._client = client
        self._state = state
        self._freed = freed

    async def release(self, pod_uid: str) -> None:
        """Drop a gone or finished pod from reservedFor of every claim; claims left unused are deallocated."""
        for cached in list(self._state.claims.cache.values()):
            claim: dict[str, Any] | None = cached
            for _ in range(5):  # a write conflict: again from the claim as it is now
                reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
                if claim is None or not any(r.get("uid") == pod_uid for r in reserved):
                    break
                remaining = [r for r in reserved if r.get("uid") != pod_uid]
                status = dict(claim["status"])
                status["reservedFor"] = remaining or None
                if not remaining:
                    for field in _RELEASED:
                        status.pop(field, None)
                claim = await self._write_status(claim, status)

    async def _write_status(self, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """Write the claim's status; on a conflict, the claim as it is now (None: written, or the claim is gone)."""
        meta = claim["metadata"]
        body = {**claim, "status": {k: v for k, v in status.items() if v is not None}}
        try:
            updated = await self._client.replace(RESOURCE_CLAIMS, body, subresource="status")
        except NotFoundError:
            self._state.record_allocation(meta["uid"], None)
            return None
        except ConflictError:
            fresh = await self._client.get_raw(RESOURCE_CLAIMS, meta["name"], meta["namespace"])
            await self._state.claim_event("MODIFIED", fresh)
            return fresh
        self._state.remember_claim(updated)
        await self._state.claim_event("MODIFIED", updated)
        self._freed()
        return None
