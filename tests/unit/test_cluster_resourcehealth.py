"""What the stand-in kubelet writes in ``allocatedResourcesStatus``, as the 1.37 kubelet (pkg/kubelet/cm/dra) does:
names, resource ids, health with its message, Unknown after the announced timeout or once a stream ends."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.agent.kubeletplugin import DeviceHealth, HealthStatus, PreparedDevice
from gpudra.cluster.apiserver.validation.core import pod_status
from gpudra.cluster.kubelet.resourcehealth import (
    ClaimDevice,
    HealthCache,
    allocated_resources_status,
    with_resources_status,
)

DRIVER = "gpu.nvidia.com"
GPU0 = ClaimDevice(DRIVER, PreparedDevice("node-a", "gpu-0", ("gpu",), ("k8s.gpu.nvidia.com/claim=u-gpu-0",)))
GPU1 = ClaimDevice(DRIVER, PreparedDevice("node-a", "gpu-1", ("gpu",), ()))


def pod(*refs: dict[str, Any], direct: bool = False) -> dict[str, Any]:
    claim = {"name": "gpus", "resourceClaimName": "shared"} if direct else {
        "name": "gpus", "resourceClaimTemplateName": "t"
    }  # fmt: skip
    status = {} if direct else {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x1"}]}
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {
            "resourceClaims": [claim],
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"claims": list(refs)}},
                {"name": "plain", "image": "busybox"},
            ],
            "initContainers": [{"name": "init", "image": "cuda", "resources": {"claims": list(refs)}}],
        },
        "status": status,
    }


def report(device: str, health: HealthStatus, message: str = "", timeout: int = 0) -> DeviceHealth:
    return DeviceHealth("node-a", device, health, 0, timeout, message)


def shown(p: dict[str, Any], cache: HealthCache, now: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    name = "shared" if p["spec"]["resourceClaims"][0].get("resourceClaimName") else "p-gpus-x1"
    return allocated_resources_status(p, {name: [GPU0, GPU1]}, cache, now)


@pytest.mark.parametrize(
    ("refs", "names"),
    [
        ([{"name": "gpus"}], ["claim:gpus"]),
        ([{"name": "gpus", "request": "gpu"}], ["claim:gpus/gpu"]),
        ([{"name": "gpus"}, {"name": "gpus", "request": "gpu"}], ["claim:gpus", "claim:gpus/gpu"]),
        ([{"name": "gpus"}, {"name": "gpus"}], ["claim:gpus"]),
    ],
)
def test_one_entry_per_claim_reference_named_by_the_pods_name_for_it(
    refs: list[dict[str, Any]], names: list[str]
) -> None:
    cache = HealthCache()
    cache.update(DRIVER, [report("gpu-0", HealthStatus.HEALTHY), report("gpu-1", HealthStatus.HEALTHY)], 0.0)
    result = shown(pod(*refs), cache)
    assert list(result) == ["main"]  # regular containers that name claims; init containers get none
    assert [e["name"] for e in result["main"]] == names
    for entry in result["main"]:  # every device of the claim, whatever request the reference names
        assert entry["resources"] == [
            {"resourceID": "k8s.gpu.nvidia.com/claim=u-gpu-0", "health": "Healthy"},
            {
                "resourceID": "gpu.nvidia.com/node-a/gpu-1",
                "health": "Healthy",
            },  # no CDI id: driver/pool/device
        ]


def test_a_claim_the_pod_names_directly_gets_no_entry() -> None:
    """The kubelet finds the claim behind a reference in status.resourceClaimStatuses, where only claims made
    from a template are listed."""
    cache = HealthCache()
    cache.update(DRIVER, [report("gpu-0", HealthStatus.HEALTHY)], 0.0)
    assert shown(pod({"name": "gpus"}, direct=True), cache) == {}


@pytest.mark.parametrize(
    ("reports", "now", "gpu0"),
    [
        ([], 0.0, {"health": "Unknown"}),  # never reported
        ([report("gpu-0", HealthStatus.HEALTHY)], 30.0, {"health": "Healthy"}),
        ([report("gpu-0", HealthStatus.HEALTHY)], 30.5, {"health": "Unknown"}),  # the default timeout, 30 s
        ([report("gpu-0", HealthStatus.HEALTHY, timeout=3)], 3.5, {"health": "Unknown"}),  # the announced one
        (
            [report("gpu-0", HealthStatus.UNHEALTHY, "XID 79 (GPU has fallen off the bus)", timeout=3)],
            1.0,
            {"health": "Unhealthy", "message": "XID 79 (GPU has fallen off the bus)"},
        ),
        ([report("gpu-0", HealthStatus.UNHEALTHY, "XID 79", timeout=3)], 4.0, {"health": "Unknown"}),
        ([report("gpu-0", HealthStatus.UNKNOWN)], 0.0, {"health": "Unknown"}),
    ],
)
def test_health_and_message_by_report_and_age(
    reports: list[DeviceHealth], now: float, gpu0: dict[str, str]
) -> None:
    cache = HealthCache()
    cache.update(DRIVER, reports, 0.0)
    (entry,) = shown(pod({"name": "gpus"}), cache, now)["main"]
    assert entry["resources"][0] == {"resourceID": "k8s.gpu.nvidia.com/claim=u-gpu-0", **gpu0}


def test_changes_are_reported_and_a_closed_stream_makes_its_devices_unknown() -> None:
    cache = HealthCache()
    healthy = [report("gpu-0", HealthStatus.HEALTHY), report("gpu-1", HealthStatus.HEALTHY)]
    assert cache.update(DRIVER, healthy, 0.0) == {(DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-1")}
    assert cache.update(DRIVER, healthy, 1.0) == set()  # a repeat changes nothing, but renews the age
    assert cache.health(DRIVER, "node-a", "gpu-0", 30.5) == ("Healthy", "")
    sick = [report("gpu-0", HealthStatus.UNHEALTHY, "XID 48"), report("gpu-1", HealthStatus.HEALTHY)]
    assert cache.update(DRIVER, sick, 2.0) == {(DRIVER, "node-a", "gpu-0")}
    assert cache.update(DRIVER, sick[:1], 3.0) == {(DRIVER, "node-a", "gpu-1")}  # no longer listed
    assert cache.health(DRIVER, "node-a", "gpu-1", 3.0) == ("Unknown", "")
    assert cache.clear(DRIVER) == {(DRIVER, "node-a", "gpu-0")}
    assert cache.health(DRIVER, "node-a", "gpu-0", 3.0) == ("Unknown", "")


def test_container_statuses_get_the_entries_and_lose_stale_ones() -> None:
    statuses: list[dict[str, Any]] = [
        {"name": "main", "ready": True, "allocatedResourcesStatus": [{"name": "claim:old"}]},
        {"name": "x"},
    ]
    entries = [{"name": "claim:gpus", "resources": []}]
    assert with_resources_status(statuses, {"main": entries}) == [
        {"name": "main", "ready": True, "allocatedResourcesStatus": entries},
        {"name": "x"},
    ]
    assert with_resources_status(statuses, {}) == [{"name": "main", "ready": True}, {"name": "x"}]


def test_the_api_server_refuses_what_kube_apiserver_refuses() -> None:
    p = pod({"name": "gpus", "request": "gpu"})
    p["status"]["containerStatuses"] = [
        {"name": "main", "allocatedResourcesStatus": [
            {"name": "claim:gpus/gpu", "resources": [{"resourceID": "a", "health": "Healthy"}]},
            {"name": "claim:gpus", "resources": [
                {"resourceID": "a", "health": "Healthy"}, {"resourceID": "a", "health": "Sick"},
            ]},
        ]},
        {"name": "gone", "allocatedResourcesStatus": [{"name": "claim:any", "resources": []}]},
    ]  # fmt: skip
    errors = [str(e) for e in pod_status(p)]
    assert errors == [
        'status.containerStatuses[0].allocatedResourcesStatus[1].name: Invalid value: "claim:gpus": must match '
        "one of the container's resource claims in a format 'claim:<claimName>/<request>' or "
        "'claim:<claimName>' if request is empty",
        'status.containerStatuses[0].allocatedResourcesStatus[1].resources[1].health: Unsupported value: "Sick": '
        'supported values: "Healthy", "Unhealthy", "Unknown"',
        'status.containerStatuses[0].allocatedResourcesStatus[1].resources[1].resourceID: Duplicate value: "a"',
    ]
