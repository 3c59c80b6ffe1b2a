"""The controller's MIG planner in the embedded cluster: a pending 3g.40gb claim on an H100 node whose GPUs are
all-balanced with every 3g.40gb in use gets an Event and a `gpudra explain` section naming the repartition
that would satisfy it; with the apply policy the controller writes it as a planner MigLayout, and never over a
user's MigLayout."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from clusterkit import StartCluster, client_of, eventually, kubectl, mig_claim
from gpudra.cluster.up import EmbeddedCluster
from gpudra.config import ControllerSettings, MigPlannerPolicy
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.kube.resources import EVENTS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig.validate import place_counts

NODE = "dgx-h100-0"
SUGGESTION = (
    f"would fit on {NODE} if its MIG layout had a 3g.40gb free (the MIG planner can do this: GPU 0: destroy "
    "2x 1g.10gb, 2g.20gb, create 3g.40gb"
)


async def balanced_and_busy(cluster: EmbeddedCluster, node: str = NODE, busy: str = "busy") -> None:
    """Every H100 of the node all-balanced, every 3g.40gb allocated to one claim (``busy``)."""
    assert cluster.client is not None
    backend = cluster.agents[node]._backend
    model = load_catalog().model("H100-SXM5-80GB")
    assert model.mig is not None
    layout = place_counts(model, model.mig.all_balanced)
    for gpu in range(8):
        backend.set_mig_mode(gpu, True)
        for placement in layout.instances:
            backend.create_mig_device(gpu, placement.profile, placement.start)

    async def published() -> bool:
        slices, _ = await client_of(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
        return sum(len(s["spec"].get("devices") or []) for s in slices) == 32

    await eventually(published)
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim(busy, "3g.40gb", 8), "default")
    await cluster.client.create(PODS, pod(f"{busy}-holder", busy), "default")
    await eventually(lambda: allocation(cluster, busy), timeout=30)


def pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"resourceClaims": [{"name": "mig", "resourceClaimName": claim}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "mig"}]}}]},
    }  # fmt: skip


async def allocation(cluster: EmbeddedCluster, claim: str) -> dict[str, Any] | None:
    assert cluster.client is not None
    body = await cluster.client.get_raw(RESOURCE_CLAIMS, claim, "default")
    return (body.get("status") or {}).get("allocation")


def user_layout() -> dict[str, Any]:
    return {
        "apiVersion": "gpudra.dev/v1alpha1",
        "kind": "MigLayout",
        "metadata": {"name": "team-layout"},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}},
                 "layout": {"config": "all-balanced"}},
    }  # fmt: skip


async def start(start_cluster: StartCluster, policy: MigPlannerPolicy) -> EmbeddedCluster:
    settings = ControllerSettings(pending_grace_seconds=0.2, pending_interval_seconds=0.2, mig_planner=policy)
    cluster = await start_cluster("dgx-h100:1", controller=settings)
    await balanced_and_busy(cluster)
    return cluster


async def planner_events(cluster: EmbeddedCluster, claim: str) -> list[dict[str, Any]]:
    assert cluster.client is not None
    events, _ = await cluster.client.list_raw(
        EVENTS, "default", field_selector=f"involvedObject.name={claim}"
    )
    return [
        e for e in events if e["source"]["component"] == "gpudra-controller" and "MIG planner" in e["message"]
    ]


async def explain(cluster: EmbeddedCluster, claim: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "explain", "claim", claim, "-o", "wide",
        "--kubeconfig", str(cluster.options.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 1, out.decode()  # it cannot fit now
    return out.decode()


async def test_pending_mig_claim_event_and_explain_name_the_repartition(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "suggest")
    assert cluster.client is not None
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")

    events = await eventually(lambda: planner_events(cluster, "wants-3g"), timeout=30)
    assert events[0]["message"].startswith(SUGGESTION)
    assert events[0]["reason"] == "DevicesInUse"

    out = await explain(cluster, "wants-3g")
    assert "does not fit" in out and "MIG repartition that would satisfy this claim" in out
    row = next(line for line in out.splitlines() if NODE in line and "3g.40gb@0" in line)
    assert "destroy 2x 1g.10gb, 2g.20gb, create 3g.40gb" in row and "default/wants-3g" in row
    layouts, _ = await cluster.client.list_raw(MIGLAYOUTS)
    assert layouts == []  # suggest only


async def test_impossible_mig_claim_says_why(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "suggest")
    assert cluster.client is not None
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-7g", "7g.80gb"), "default")
    out = await explain(cluster, "wants-7g")
    assert "MIG repartition that would satisfy this claim" in out
    assert "none: needs 1x 7g.80gb" in out and "around the instances in use" in out


async def test_apply_policy_writes_the_planner_miglayout(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "apply")
    assert cluster.client is not None
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")

    async def written() -> dict[str, Any] | None:
        layouts, _ = await client_of(cluster).list_raw(MIGLAYOUTS)
        return next((b for b in layouts if b["metadata"]["name"] == f"gpudra-planner-{NODE}"), None)

    layout = await eventually(written, timeout=30)
    assert layout["metadata"]["labels"] == {"gpudra.dev/planner": "true"}
    assert layout["spec"]["nodeSelector"] == {"matchLabels": {"kubernetes.io/hostname": NODE}}
    assert layout["spec"]["policy"] == "Static"
    assert layout["spec"]["layout"]["entries"] == [
        {"device-filter": ["0x233010DE"], "devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    ]
    events = await eventually(lambda: planner_events(cluster, "wants-3g"), timeout=30)
    assert f"applying through MigLayout gpudra-planner-{NODE}" in events[0]["message"]

    await cluster.client.create(MIGLAYOUTS, user_layout())  # the user's layout wins: the planner's goes

    async def stepped_aside() -> bool:
        layouts, _ = await client_of(cluster).list_raw(MIGLAYOUTS)
        return [b["metadata"]["name"] for b in layouts] == ["team-layout"]

    await eventually(stepped_aside, timeout=30)


async def test_applied_repartition_lets_the_waiting_pod_run(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "apply")
    assert cluster.client is not None
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")
    await cluster.client.create(PODS, pod("waiting", "wants-3g"), "default")

    allocated = await eventually(lambda: allocation(cluster, "wants-3g"), timeout=60)
    (result,) = allocated["devices"]["results"]
    assert result["device"] == "gpu-0-mig-3g40gb-9-0"  # the new instance at slices 0-3 of GPU 0
    busy = await allocation(cluster, "busy")
    assert (
        busy is not None and len(busy["devices"]["results"]) == 8
    )  # the in-use instances were never touched
    layout = await cluster.client.get_raw(MIGLAYOUTS, f"gpudra-planner-{NODE}")
    applied = next(c for c in layout["status"]["conditions"] if c["type"] == "Applied")
    assert applied["status"] == "True"


async def test_apply_policy_never_overrides_a_users_miglayout(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "apply")
    assert cluster.client is not None
    await cluster.client.create(MIGLAYOUTS, user_layout())
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")
    events = await eventually(lambda: planner_events(cluster, "wants-3g"), timeout=30)
    assert SUGGESTION in events[0]["message"]
    assert (
        f"not applied: MigLayout team-layout (not the planner's) selects node {NODE}" in events[0]["message"]
    )
    layouts, _ = await cluster.client.list_raw(MIGLAYOUTS)
    assert [b["metadata"]["name"] for b in layouts] == ["team-layout"]


async def test_planner_off_leaves_events_as_they_were(start_cluster: StartCluster) -> None:
    cluster = await start(start_cluster, "off")
    assert cluster.client is not None
    await cluster.client.create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")

    async def explained() -> list[dict[str, Any]]:
        assert cluster.client is not None
        events, _ = await cluster.client.list_raw(
            EVENTS, "default", field_selector="involvedObject.name=wants-3g"
        )
        return [e for e in events if e["source"]["component"] == "gpudra-controller"]

    events = await eventually(explained, timeout=30)
    assert "MIG planner" not in events[0]["message"]
    assert (
        events[0]["message"]
        == f"{NODE} has 8 matching 3g.40gb MIG devices but all are in use by default/busy"
    )


async def test_apply_repartitions_only_a_node_the_waiting_pod_may_go_to(start_cluster: StartCluster) -> None:
    """Two nodes alike, the first tainted: the planner's MigLayout is for the second, where the pod then runs
    (before, the first by name, where the pod may not go: its claim stayed pending on a repartitioned GPU)."""
    settings = ControllerSettings(
        pending_grace_seconds=0.2, pending_interval_seconds=0.2, mig_planner="apply"
    )
    cluster = await start_cluster("dgx-h100:2", controller=settings)
    other = "dgx-h100-1"
    await balanced_and_busy(cluster)
    await balanced_and_busy(cluster, other, "busy-1")
    await kubectl(cluster, "taint", "nodes", NODE, "dedicated=train:NoSchedule")
    await client_of(cluster).create(RESOURCE_CLAIMS, mig_claim("wants-3g", "3g.40gb"), "default")
    await client_of(cluster).create(PODS, pod("waiting", "wants-3g"), "default")

    allocated = await eventually(lambda: allocation(cluster, "wants-3g"), timeout=60)
    assert allocated["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [other], allocated
    layouts, _ = await client_of(cluster).list_raw(MIGLAYOUTS)
    assert [b["metadata"]["name"] for b in layouts] == [f"gpudra-planner-{other}"]
    events = await planner_events(cluster, "wants-3g")
    assert f"applying through MigLayout gpudra-planner-{other}" in events[0]["message"], events
    assert (
        f"keep the pod off 1 of 2 nodes with devices: {NODE}: taint dedicated=train" in events[0]["message"]
    )
