"""Waiting for a CustomResourceDefinition just applied to be served: its ``Established`` condition, then a list of
its resource that the API server answers. kube-apiserver answers 429 "storage is (re)initializing" for a moment
after a CRD is established, while the watch cache of its resource fills; a client that started on it at once
logged that (and kopf its retries) at every start of a cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpudra.errors import KubeError, NotFoundError, is_transient
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import CRDS, Resource


def served_resource(crd: dict[str, Any]) -> Resource:
    """The resource a CRD serves, at its storage version."""
    spec = crd["spec"]
    version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
    names = spec["names"]
    return Resource(spec["group"], version, names["plural"], names["kind"], spec.get("scope") == "Namespaced")


async def wait_served(client: KubeClient, names: list[str], *, timeout: float = 60.0) -> None:
    """Until each CRD of ``names`` is Established and its resource can be listed; KubeError after ``timeout``
    naming the one awaited and why."""
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            try:
                crd = await client.get_raw(CRDS, name)
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    await client.list_raw(served_resource(crd))
                    break
                last = "not Established yet"
            except NotFoundError:
                last = "not created yet"
            except KubeError as exc:
                if not is_transient(exc):
                    raise
                last = str(exc)
            if time.monotonic() > deadline:
                raise KubeError(
                    f"CustomResourceDefinition {name} was not served within {timeout:.0f}s ({last})"
                )
            await asyncio.sleep(0.1)
