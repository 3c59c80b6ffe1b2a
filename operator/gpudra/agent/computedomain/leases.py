"""Host-managed mode: which IMEX channel each ComputeDomain uses in a clique, agreed by every node there.

One node-wide nvidia-imex serves every domain of the clique, so domains are kept apart by channel number
(``computedomain.index.assign_channels``); a domain's channel must be the same on all its nodes of the
clique. The leases of a clique live in one ConfigMap in the driver's namespace,
``imex-channels.<cliqueID>``, one key per domain UID::

    {"first": 3, "count": 1, "mode": "Single", "display": "ns/uid", "nodes": ["tray-0", "tray-4"]}

Writes carry the resourceVersion they read, so two nodes leasing for two domains at once cannot both take
the same channel: the second write fails with 409 and is redone on a fresh read. A lease is kept while any
node holds a prepared channel of the domain and removed with its last node.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from gpudra.computedomain import ChannelLease, DomainRef, assign_channels
from gpudra.errors import ConflictError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import CONFIGMAPS

LeaseTable = dict[str, dict[str, Any]]


def lease_object_name(clique_id: str) -> str:
    return f"imex-channels.{clique_id}"


def _parse(body: dict[str, Any]) -> LeaseTable:
    table: LeaseTable = {}
    for uid, text in (body.get("data") or {}).items():
        try:
            table[uid] = json.loads(text)
        except ValueError:
            continue  # a hand-edited entry that is not ours to interpret; it holds no channel
    return table


def _held(table: LeaseTable) -> dict[str, tuple[DomainRef, ChannelLease]]:
    return {
        uid: (
            DomainRef(uid, str(entry.get("display", uid)), entry.get("mode", "Single")),
            ChannelLease(int(entry.get("first", 0)), int(entry.get("count", 1))),
        )
        for uid, entry in table.items()
    }


class ChannelLeases:
    """This node's side of the clique-wide lease table."""

    def __init__(self, client: KubeClient, *, namespace: str, node_name: str) -> None:
        self._client = client
        self.namespace = namespace
        self.node_name = node_name

    async def _read(self, clique_id: str) -> tuple[dict[str, Any] | None, LeaseTable]:
        try:
            body = await self._client.get_raw(CONFIGMAPS, lease_object_name(clique_id), self.namespace)
        except NotFoundError:
            return None, {}
        return body, _parse(body)

    async def _write(self, clique_id: str, body: dict[str, Any] | None, table: LeaseTable) -> None:
        data = {uid: json.dumps(entry, sort_keys=True) for uid, entry in sorted(table.items())}
        if body is None:
            new = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": lease_object_name(clique_id), "namespace": self.namespace},
                "data": data,
            }
            await self._client.create(CONFIGMAPS, new, self.namespace)
        else:
            await self._client.replace(CONFIGMAPS, {**body, "data": data})

    async def acquire(self, domain: DomainRef, clique_id: str) -> ChannelLease:
        """The domain's channels in the clique, leasing them (for this node) when new. Raises
        ComputeDomainPlacementError when the clique cannot give the domain a channel of its own."""
        attempt = 0
        while True:
            body, table = await self._read(clique_id)
            lease = assign_channels(domain, _held(table), "host-managed", clique_id=clique_id)
            entry = dict(table.get(domain.uid) or {})
            nodes = sorted(set(entry.get("nodes") or []) | {self.node_name})
            wanted = {
                "first": lease.first,
                "count": lease.count,
                "mode": domain.allocation_mode,
                "display": domain.display,
                "nodes": nodes,
            }
            if entry == wanted:
                return lease
            try:
                await self._write(clique_id, body, {**table, domain.uid: wanted})
                return lease
            except ConflictError:
                attempt += 1
                await asyncio.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))

    async def release(self, domain_uid: str, clique_id: str) -> None:
        """This node no longer uses the domain's channel; the lease goes with its last node."""
        attempt = 0
        while True:
            body, table = await self._read(clique_id)
            entry = table.get(domain_uid)
            if body is None or entry is None or self.node_name not in (entry.get("nodes") or []):
                return
            nodes = [n for n in entry.get("nodes") or [] if n != self.node_name]
            rest = {uid: e for uid, e in table.items() if uid != domain_uid}
            if nodes:
                rest[domain_uid] = {**entry, "nodes": nodes}
            try:
                await self._write(clique_id, body, rest)
                return
            except ConflictError:
                attempt += 1
                await asyncio.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
