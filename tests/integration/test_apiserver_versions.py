"""The embedded API server emulates one Kubernetes version, 1.37 unless asked for 1.34 to 1.36: what /version says,
which API versions it serves, and the ResourceSlice rules that changed between them. The expected answers are
kube-apiserver 1.37.2's, run on this project's machines (tests/kubernetes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from authkit import admin_headers
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.versions import parse_minor
from gpudra.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@asynccontextmanager
async def serving(minor: int) -> AsyncIterator[aiohttp.ClientSession]:
    server = EmbeddedAPIServer(minor=minor)
    url = await server.start()
    try:
        async with aiohttp.ClientSession(base_url=url, headers=admin_headers(server)) as http:
            yield http
    finally:
        await server.stop()


def a_slice(name: str, spec: dict[str, Any], count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": count},
            **spec,
        },
    }


COUNTERS = a_slice(
    "node-a-counters",
    {"sharedCounters": [{"name": "gpu-0-counter-set", "counters": {"memory": {"value": "80Gi"}}}]},
    count=2,
)
MIG = {
    "name": "gpu-0-mig-1g",
    "attributes": {"type": {"string": "mig"}},
    "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": "10Gi"}}}],
}
DEVICES = a_slice("node-a-devices", {"devices": [MIG]}, count=2)


async def create(http: aiohttp.ClientSession, obj: dict[str, Any]) -> tuple[int, str]:
    async with http.post(SLICES, json=obj) as rsp:
        body = await rsp.json()
        return rsp.status, "; ".join(
            f"{c['field']}: {c['message']}" for c in body.get("details", {}).get("causes", [])
        )


async def test_version_and_served_api_versions_follow_the_emulated_version() -> None:
    """kube-apiserver 1.37.2 serves resource.k8s.io v1 only, DeviceTaintRule included; 1.36 serves DeviceTaintRule
    as v1beta2, 1.34 and 1.35 as v1alpha3 (as gpudra's real control plane enables them)."""
    wanted = {34: ["v1", "v1alpha3"], 35: ["v1", "v1alpha3"], 36: ["v1", "v1beta2"], 37: ["v1"]}
    for minor, versions in wanted.items():
        async with serving(minor) as http:
            async with http.get("/version") as rsp:
                version = await rsp.json()
            assert (version["minor"], version["emulationMinor"]) == (str(minor), str(minor))
            assert version["gitVersion"].startswith(f"v1.{minor}.")
            async with http.get("/apis/resource.k8s.io") as rsp:
                assert [v["version"] for v in (await rsp.json())["versions"]] == versions
            async with http.get(f"/apis/resource.k8s.io/{versions[-1]}") as rsp:
                names = {r["name"] for r in (await rsp.json())["resources"]}
            assert {"devicetaintrules", "devicetaintrules/status"} <= names
            async with http.get("/apis/resource.k8s.io/v1alpha3") as rsp:
                assert (rsp.status == 200) == (minor <= 35)


async def test_counters_in_a_slice_of_their_own_are_accepted_from_1_35() -> None:
    """The 1.35+ layout: a counters-only slice and a device slice naming its counter set (kube-apiserver 1.37.2
    accepts both); 1.34 refuses the device slice, and from 1.35 a slice with both is refused."""
    async with serving(37) as http:
        assert await create(http, COUNTERS) == (201, "")
        assert await create(http, DEVICES) == (201, "")
        both = a_slice("node-b", {"sharedCounters": COUNTERS["spec"]["sharedCounters"], "devices": [MIG]})
        assert await create(http, both) == (
            422,
            'spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed',
        )
    async with serving(34) as http:
        assert await create(http, COUNTERS) == (201, "")
        assert await create(http, DEVICES) == (
            422,
            'spec.devices[0].consumesCounters[0].counterSet: Invalid value: "gpu-0-counter-set": must reference a '
            "counterSet defined in the ResourceSlice sharedCounters",
        )


async def test_sixteen_taints_and_the_effect_none_from_1_35() -> None:
    """Five device taints (kube-apiserver 1.37.2 accepts up to 16) and the informational effect None."""
    taints = [{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(5)]
    five = a_slice("five", {"devices": [{"name": "gpu-0", "taints": taints}]})
    seventeen = a_slice(
        "seventeen",
        {
            "devices": [
                {
                    "name": "gpu-0",
                    "taints": [{"key": f"example.com/t{i}", "effect": "None"} for i in range(17)],
                }
            ]
        },
    )
    async with serving(37) as http:
        assert await create(http, five) == (201, "")
        assert await create(http, seventeen) == (
            422,
            "spec.devices[0].taints: Too many: 17: must have at most 16 items",
        )
    async with serving(34) as http:
        status, message = await create(http, five)
        assert (status, message) == (422, "spec.devices[0].taints: Too many: 5: must have at most 4 items")


def test_versions_outside_1_34_to_1_37_are_refused() -> None:
    assert parse_minor(None) == 37
    assert parse_minor("v1.36.3") == 36
    for wrong in ("1.33", "1.38", "two"):
        with pytest.raises(ConfigurationError, match=r"1\.34 to 1\.37"):
            parse_minor(wrong)
    with pytest.raises(ConfigurationError, match="no feature gate DRAListTypeAttributes"):
        EmbeddedAPIServer(minor=35, feature_gates=frozenset({"DRAListTypeAttributes"}))
