"""The same pods created on both control planes are stored alike, field by field, once names, uids and times are
normalised: kube-apiserver's defaults and its ServiceAccount, Priority and DefaultTolerationSeconds admission on
one side, the embedded API server's on the other; and the recorded fixture the embedded tier compares against is
still what kube-apiserver stores."""

from __future__ import annotations

import functools
from typing import Any

from _realkit import StartKubernetes

from clusterkit import StartCluster, eventually
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import PODS
from podkit import normalised, recorded, sample_pods


async def _create_bound(client: KubeClient) -> dict[str, dict[str, Any]]:
    async def create(pod: dict[str, Any]) -> bool:
        try:
            await client.create(PODS, pod, "default")
        except KubeError as exc:  # the default ServiceAccount comes a moment after the namespace
            if exc.status != 403:
                raise
            return False
        return True

    stored = {}
    for pod in sample_pods():
        await eventually(functools.partial(create, pod), timeout=60)
    for pod in sample_pods():
        name = pod["metadata"]["name"]

        async def bound(name: str = name) -> dict[str, Any] | None:
            got = await client.get_raw(PODS, name, "default")
            return got if (got.get("spec") or {}).get("nodeName") else None

        stored[name] = await eventually(bound, timeout=60)
    return stored


async def test_the_same_pods_are_stored_alike_on_both_control_planes(
    start_kubernetes: StartKubernetes, start_cluster: StartCluster
) -> None:
    real = await start_kubernetes("l4x4:1")
    embedded = await start_cluster("l4x4:1")
    assert real.client is not None and embedded.client is not None
    on_real, on_embedded = await _create_bound(real.client), await _create_bound(embedded.client)
    expected = recorded()
    for name, pod in on_real.items():
        assert pod["metadata"]["generation"] == on_embedded[name]["metadata"]["generation"] == 1
        a, b = normalised(pod), normalised(on_embedded[name])
        for part in ("metadata", "spec", "status"):
            assert a[part] == b[part], (name, part)
            assert a[part] == expected[name][part], (name, part, "the recorded fixture is stale")
