"""Dynamic MIG in the embedded cluster: partitionable devices in the slices, the instance created when the pod's
claim is prepared and destroyed when the pod is gone, a full GPU filled by seven 1g claims with the eighth pending
and explained, and the whole GPU never allocated beside one of its MIG devices."""

from __future__ import annotations

import functools
import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from clusterkit import StartCluster, client_of, eventually
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.hardware.gpus.inventory import GpuInfo, NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)
from gpudra.reports import fleet_table, list_fleet
from gpudra.testing import HeldCall

NODE = "dgx-h100-0"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster(
        "dgx-h100:1",
        dynamic_mig=True,
        hardware_poll_seconds=0.1,
        controller=ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.2),
    )


def inventory(cluster: EmbeddedCluster) -> NodeInventory:
    """What NVML on the simulated node reports now."""
    return NvmlBackend(NODE, nvml=cluster.simulated[NODE]).read_inventory()


def gpu0(cluster: EmbeddedCluster) -> GpuInfo:
    return inventory(cluster).gpus[0]


def claim(name: str, cls: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {
            "deviceClassName": cls, "selectors": [{"cel": {"expression": expression}}]}}]}},
    }  # fmt: skip


def pod(name: str, claim_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "dev", "resourceClaimName": claim_name}],
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "dev"}]}}],
        },
    }


async def running(client: KubeClient, name: str) -> bool:
    return bool((await client.get_raw(PODS, name, "default")).get("status", {}).get("phase") == "Running")


async def run_pod_with_claim(client: KubeClient, name: str, cls: str, expression: str) -> None:
    await client.create(RESOURCE_CLAIMS, claim(name, cls, expression), "default")
    await client.create(PODS, pod(name, name), "default")


async def explanation(
    client: KubeClient, claim_name: str, reason: str | None = None
) -> dict[str, Any] | None:
    """The controller's explaining Event of a pending claim (with that reason), once there is one."""
    events, _ = await client.list_raw(EVENTS, "default", field_selector=f"involvedObject.name={claim_name}")
    return next(
        (
            e
            for e in events
            if e["source"]["component"] == "gpudra-controller" and reason in (None, e["reason"])
        ),
        None,
    )


def on_gpu(uuid: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].parentUUID == "{uuid}"'


async def test_slices_carry_the_counter_set_and_every_placement(cluster: EmbeddedCluster) -> None:
    """The embedded API server is Kubernetes 1.37: the counter sets go in a slice of their own (the 1.35+ layout,
    which it accepts as kube-apiserver does), the devices in slices of at most 64 that name them."""
    slices, _ = await client_of(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
    (counters,) = [s for s in slices if s["spec"].get("sharedCounters")]
    assert "devices" not in counters["spec"]
    assert sorted(c["name"] for c in counters["spec"]["sharedCounters"]) == [
        f"gpu-{i}-counter-set" for i in range(8)
    ]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    assert len(devices) == 8 * 26
    assert all(len(s["spec"].get("devices") or []) <= 64 for s in slices)
    for device in devices:
        (uses,) = device["consumesCounters"]
        assert uses["counterSet"] == f"{device['name'].split('-mig-')[0]}-counter-set"


async def test_on_1_34_counters_travel_with_their_devices(start_cluster: StartCluster) -> None:
    """Asked to emulate 1.34, the embedded API server has the 1.34 rules: one slice per GPU, with its counter set."""
    cluster = await start_cluster("dgx-h100:1", dynamic_mig=True, kubernetes_version="1.34")
    slices, _ = await client_of(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
    assert len(slices) == 8
    for s in slices:
        (counter_set,) = s["spec"]["sharedCounters"]
        minor = counter_set["name"].split("-")[1]
        assert {d["name"].split("-mig-")[0] for d in s["spec"]["devices"]} == {f"gpu-{minor}"}
        assert len(s["spec"]["devices"]) == 26


async def test_1g_claim_creates_the_instance_at_prepare_and_destroys_it_after_the_pod(
    cluster: EmbeddedCluster,
) -> None:
    client = client_of(cluster)
    for doc in yaml.safe_load_all((EXAMPLES / "dynamic-mig-1g.yaml").read_text()):
        kinds: dict[str, Resource] = {"ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES, "Pod": PODS}
        kind = kinds[doc["kind"]]
        await client.create(kind, doc, "default")
    await eventually(lambda: running(client, "small-inference"))
    fake = cluster.simulated[NODE]
    (instance,) = [m for g in inventory(cluster).gpus for m in g.mig_devices]
    assert instance.profile == "1g.10gb"
    assert fake.gpu(instance.parent_index).mig_current

    async def status_written() -> dict[str, Any] | None:  # the agent writes it after answering the kubelet
        claims, _ = await client.list_raw(RESOURCE_CLAIMS, "default")
        return claims[0] if (claims[0].get("status") or {}).get("devices") else None

    claim = await eventually(status_written)
    (status,) = claim["status"]["devices"]
    assert status["data"]["uuid"] == instance.uuid and status["data"]["type"] == "mig"
    assert status["device"].endswith(f"-19-{instance.placement_start}")
    preparer = cluster.runtimes[NODE].preparer
    assert preparer is not None
    spec = preparer.effects.specs.read(claim["metadata"]["uid"])
    assert spec is not None and f"NVIDIA_VISIBLE_DEVICES={instance.uuid}" in spec["containerEdits"]["env"]

    await client.delete(PODS, "small-inference", "default")

    async def destroyed() -> bool:
        return not any(g.mig_devices for g in inventory(cluster).gpus)

    await eventually(destroyed)


async def slice_versions(client: KubeClient) -> dict[str, str]:
    slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}


async def test_an_instance_created_for_a_claim_leaves_the_slices_alone_without_listing_them(
    cluster: EmbeddedCluster,
) -> None:
    # the instance changes the GPUs' reading, not what they offer: the agent neither writes its slices nor lists
    # them again to find that out (56 claims at once made 56 such rounds, each ~90 ms of the agent's loop)
    client = client_of(cluster)
    agent = cluster.agents[NODE]
    publisher = agent.publisher
    assert publisher is not None
    before = await slice_versions(client)
    compare = publisher._publish_once
    compared: list[int] = []  # lists of the server's slices, to compare the devices with

    async def counted(*args: Any) -> bool:
        compared.append(len(compared))
        return await compare(*args)

    publisher._publish_once = counted  # type: ignore[method-assign,assignment]
    await run_pod_with_claim(
        client, "small", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    )
    await eventually(functools.partial(running, client, "small"))

    def agent_read_it() -> bool:
        return agent.inventory is not None and any(g.mig_devices for g in agent.inventory.gpus)

    await eventually(agent_read_it, what="the agent reading the instance")
    assert compared == []
    assert await slice_versions(client) == before


async def test_an_instance_destroyed_while_the_agent_reads_is_never_published_as_foreign(
    cluster: EmbeddedCluster,
) -> None:
    # a claim's instance is created, read by the agent, then destroyed and forgotten by the claim's unprepare
    # before the agent publishes that reading: the reading shows the instance, the claims no longer name it. It
    # was the claim's, not a foreign one: the slices must not offer it as a static MIG device that no longer
    # exists, nor take the GPU's placements away
    client = client_of(cluster)
    agent = cluster.agents[NODE]
    backend = agent._backend
    uuid = gpu0(cluster).uuid
    claimed: dict[str, list[tuple[str, int]]] = {uuid: [("1g.10gb", 0)]}  # recorded before it is created
    agent.claimed_instances = lambda: claimed
    before = await slice_versions(client)
    read = backend.read_inventory
    created: list[str] = []

    def prepare_read_unprepare(*, nvlink_peers: bool = True) -> NodeInventory:
        backend.read_inventory = read  # type: ignore[method-assign]
        instance = backend.create_mig_device(0, "1g.10gb", 0)
        created.append(instance.uuid)
        reading = read(nvlink_peers=nvlink_peers)
        backend.destroy_mig_device(0, instance.gi_id)
        claimed.clear()
        return reading

    def agent_read(present: bool) -> bool:
        assert agent.inventory is not None
        return (
            bool(created) and any(m.uuid in created for m in agent.inventory.gpus[0].mig_devices) == present
        )

    backend.read_inventory = prepare_read_unprepare  # type: ignore[method-assign]
    await eventually(lambda: agent_read(True), what="the agent reading the claim's instance")
    await eventually(lambda: agent_read(False), what="the agent reading the GPU without it")
    assert await slice_versions(client) == before


async def test_a_pod_deleted_while_its_instance_is_being_created_leaves_nothing_behind(
    cluster: EmbeddedCluster,
) -> None:
    # NVML takes its time creating the instance, and the pod is deleted meanwhile: the kubelet cancels its call, the
    # agent lets NVML finish, rolls the prepare back, and only then lets the unprepare take the claim's lock, so
    # the instance it made is destroyed and no checkpoint entry is left
    preparer = cluster.runtimes[NODE].preparer
    assert preparer is not None
    instances = preparer.effects.instances
    create = HeldCall(instances.create)
    # the ignore below: a fault injected into this one instance manager
    instances.create = create  # type: ignore[method-assign]
    client = client_of(cluster)
    await run_pod_with_claim(
        client, "slow", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    )
    await eventually(create.entered.is_set, timeout=30, what="NVML asked to create the instance")
    uid = (await client.get_raw(PODS, "slow", "default"))["metadata"]["uid"]
    await client.delete(PODS, "slow", "default")
    kubelet = cluster.kubelets[NODE]

    async def pod_gone() -> bool:
        pods, _ = await client.list_raw(PODS, "default")
        return not pods

    async def teardown_seen() -> bool:
        return uid in kubelet.terminating or await pod_gone()

    await eventually(teardown_seen, what="the kubelet tearing the pod down")
    create.release.set()
    await eventually(create.returned.is_set, what="NVML done creating")

    def nothing_left() -> bool:
        instances_left = any(g.mig_devices for g in inventory(cluster).gpus)
        return not (preparer.store.claims() or instances_left or preparer.effects.specs.claim_uids())

    await eventually(nothing_left, what="no instance, checkpoint entry or CDI spec left")
    await eventually(pod_gone)


async def test_seven_1g_fill_one_h100_and_the_eighth_pends_with_counters_as_the_reason(
    cluster: EmbeddedCluster,
) -> None:
    client = client_of(cluster)
    uuid = gpu0(cluster).uuid
    only_1g = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb" && ' + on_gpu(uuid)
    for i in range(8):
        await run_pod_with_claim(client, f"small-{i}", "mig.nvidia.com", only_1g)
    for i in range(7):
        await eventually(functools.partial(running, client, f"small-{i}"))
    assert len(gpu0(cluster).mig_devices) == 7

    # every 1g.10gb placement of the GPU is allocated: the eighth waits for one of them
    event = await eventually(lambda: explanation(client, "small-7"))
    assert event["reason"] == "DevicesInUse", event
    assert event["message"] == (
        f"{NODE} has 7 matching 1g.10gb MIG devices but all are in use by default/small-0, default/small-1, "
        "default/small-2 and 4 more claims"
    )
    # any other profile on that GPU: free placements exist, but the memory slices they need are taken
    await run_pod_with_claim(client, "other", "mig.nvidia.com", on_gpu(uuid))
    event = await eventually(lambda: explanation(client, "other"))
    assert event["reason"] == "CounterExhausted", event
    assert event["message"] == (
        f"{NODE} has 25 matching MIG devices but 7 are in use and 18 overlap MIG devices in use, all held by "
        "default/small-0, default/small-1, default/small-2 and 4 more claims"
    )
    assert not await running(client, "small-7")
    assert (
        not (await client.get_raw(RESOURCE_CLAIMS, "small-7", "default")).get("status", {}).get("allocation")
    )
    await client.delete(PODS, "other", "default")

    await client.delete(PODS, "small-3", "default")  # one placement frees up: the eighth gets it
    await eventually(lambda: running(client, "small-7"), timeout=30)
    assert len(gpu0(cluster).mig_devices) == 7


async def test_whole_gpu_and_a_mig_device_of_it_are_never_allocated_together(
    cluster: EmbeddedCluster,
) -> None:
    client = client_of(cluster)
    uuid = gpu0(cluster).uuid
    await run_pod_with_claim(
        client, "whole", "gpu.nvidia.com", f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'
    )
    await eventually(lambda: running(client, "whole"))
    assert not gpu0(cluster).mig_devices  # the whole GPU is prepared as a GPU: no instance, MIG mode stays on
    assert cluster.simulated[NODE].gpu(0).mig_current
    await run_pod_with_claim(client, "slice", "mig.nvidia.com", on_gpu(uuid))

    event = await eventually(lambda: explanation(client, "slice"))
    assert event["reason"] == "CounterExhausted", event
    assert (
        event["message"] == f"{NODE} has 25 matching MIG devices but all overlap GPUs in use by default/whole"
    )
    assert not await running(client, "slice")
    await client.delete(PODS, "whole", "default")
    await eventually(lambda: running(client, "slice"), timeout=30)
    assert len(gpu0(cluster).mig_devices) == 1


async def test_a_health_event_on_the_gpu_taints_every_placement_and_marks_the_claims_on_it(
    cluster: EmbeddedCluster,
) -> None:
    client = client_of(cluster)
    uuid = gpu0(cluster).uuid
    await run_pod_with_claim(client, "busy", "mig.nvidia.com", on_gpu(uuid))
    await eventually(lambda: running(client, "busy"))
    cluster.simulated[NODE].inject_xid(0, 79)

    async def tainted() -> list[str]:
        slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
        return [
            d["name"]
            for s in slices
            for d in s["spec"].get("devices") or []
            if any(t["key"] == "gpu.nvidia.com/xid" for t in d.get("taints") or [])
        ]

    names = await eventually(tainted)
    assert len(names) == 26 and all(n == "gpu-0" or n.startswith("gpu-0-mig-") for n in names)

    async def unhealthy() -> dict[str, Any] | None:
        (entry,) = (await client.get_raw(RESOURCE_CLAIMS, "busy", "default"))["status"]["devices"]
        condition = next((c for c in entry["conditions"] if c["type"] == "Healthy"), None)
        return condition if condition is not None and condition["status"] == "False" else None

    assert (await eventually(unhealthy))["reason"] == "Xid79"  # the instance created at prepare
    await run_pod_with_claim(client, "sick", "mig.nvidia.com", on_gpu(uuid))
    # (while the slices are being rewritten the pool may be explained as incomplete first)
    assert await eventually(lambda: explanation(client, "sick", reason="Tainted"))


async def test_gpus_switch_to_dynamic_at_run_time_and_keep_their_instances(
    start_cluster: StartCluster,
) -> None:
    cluster = await start_cluster("dgx-a100:1", hardware_poll_seconds=0.1)
    client = client_of(cluster)
    node = "dgx-a100-0"
    agent = cluster.agents[node]
    uuid = NvmlBackend(node, nvml=cluster.simulated[node]).read_inventory().gpus[0].uuid

    async def gpu0_devices() -> tuple[list[str], list[str]]:
        slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
        sets = sorted(c["name"] for s in slices for c in s["spec"].get("sharedCounters") or [])
        names = sorted(
            d["name"]
            for s in slices
            for d in s["spec"].get("devices") or []
            if d["name"].startswith("gpu-0-")
        )
        return sets, names

    before = await gpu0_devices()
    assert before[0] == [] and len(before[1]) == 4  # all-balanced, static
    agent.set_dynamic_gpus({uuid})
    assert agent.dynamic_gpus() == {uuid}
    # every memory slice is taken: the instances stay, as static devices, beside the GPU's counter set
    assert await eventually(lambda: _when(gpu0_devices(), lambda v: v == (["gpu-0-counter-set"], before[1])))
    agent.set_dynamic_gpus(None)
    assert await eventually(lambda: _when(gpu0_devices(), lambda v: v == before))


async def _when(value: Awaitable[Any], check: Callable[[Any], bool]) -> bool:
    return check(await value)


async def test_status_says_the_gpus_are_dynamic_instead_of_counting_placements(
    cluster: EmbeddedCluster,
) -> None:
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(fleet_table(await list_fleet(client_of(cluster))))
    row = next(line for line in console.export_text().splitlines() if NODE in line)
    assert "dynamic on 8 GPUs" in row and "1g.10gb" not in row


async def test_shared_example_creates_one_instance_served_through_mps(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    for doc in yaml.safe_load_all((EXAMPLES / "dynamic-mig-shared.yaml").read_text()):
        kinds: dict[str, Resource] = {"ResourceClaim": RESOURCE_CLAIMS, "Pod": PODS}
        kind = kinds[doc["kind"]]
        await client.create(kind, doc, "default")
    await eventually(lambda: running(client, "mps-clients"))
    (instance,) = [m for g in inventory(cluster).gpus for m in g.mig_devices]
    assert instance.profile == "2g.20gb"
    claim = await client.get_raw(RESOURCE_CLAIMS, "shared-2g", "default")
    preparer = cluster.runtimes[NODE].preparer
    assert preparer is not None
    spec = preparer.effects.specs.read(claim["metadata"]["uid"])
    assert spec is not None
    env = [
        e
        for edits in (spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"]))
        for e in edits.get("env", [])
    ]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in env and f"NVIDIA_VISIBLE_DEVICES={instance.uuid}" in env


async def test_a_dynamic_miglayout_hands_the_gpus_to_dynamic_mig_and_back(
    start_cluster: StartCluster,
) -> None:
    """examples/miglayout-dynamic.yaml on a node whose GPUs start with MIG off: the applier enables MIG, the agent
    publishes every placement, and a claim gets its instance at prepare; deleting the layout hands the node back
    to its own setting (Static)."""
    cluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    client = client_of(cluster)
    await client.patch(NODES, NODE, {"metadata": {"labels": {"gpudra.dev/mig": "dynamic"}}})
    (layout,) = yaml.safe_load_all((EXAMPLES / "miglayout-dynamic.yaml").read_text())
    await client.create(MIGLAYOUTS, layout)

    async def counter_sets() -> int:
        slices, _ = await client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
        return sum(len(s["spec"].get("sharedCounters") or []) for s in slices)

    await eventually(lambda: _when(counter_sets(), lambda n: n == 8), timeout=30)
    await run_pod_with_claim(
        client, "small", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    )
    await eventually(lambda: running(client, "small"))
    assert [(m.profile, m.placement_start) for g in inventory(cluster).gpus for m in g.mig_devices] == [
        ("1g.10gb", 0)
    ]
    await client.delete(PODS, "small", "default")
    await eventually(lambda: _when(inventory_instances(cluster), lambda n: n == 0))
    await client.delete(MIGLAYOUTS, "dynamic")
    await eventually(lambda: _when(counter_sets(), lambda n: n == 0), timeout=30)


async def inventory_instances(cluster: EmbeddedCluster) -> int:
    return sum(len(g.mig_devices) for g in inventory(cluster).gpus)
