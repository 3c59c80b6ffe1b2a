"""MigLayout in the embedded cluster: the controller hands each selected node its layout, the node's agent
repartitions its GPUs and republishes its slices, and status, labels and Events tell the user where it stands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import StartCluster, eventually
from gpudra.api.miglayout import API_VERSION
from gpudra.cluster.up import EmbeddedCluster
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import CONFIGMAPS, EVENTS, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.mig.desired import CONFIG_LABEL, CONFIG_STATE_LABEL, NodeReport
from gpudra.testing import watch_until

ROOT = Path(__file__).resolve().parents[2]


def mig_layout(name: str, node: str, layout: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MigLayout",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}}, "layout": layout},
    }


async def profiles(client: KubeClient, node: str) -> list[str]:
    slices, _ = await client.list_raw(RESOURCE_SLICES)
    return sorted(
        d["attributes"]["profile"]["string"]
        for s in slices
        if s["spec"].get("nodeName") == node
        for d in s["spec"].get("devices") or []
        if "profile" in (d.get("attributes") or {})
    )


async def published(client: KubeClient, node: str, expected: list[str]) -> None:
    """Wait until the node's slices show exactly these MIG profiles (they follow the hardware within a poll)."""

    async def check() -> bool:
        return await profiles(client, node) == expected

    await eventually(check)


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


async def true_condition(client: KubeClient, layout: str, kind: str) -> dict[str, Any]:
    """The MigLayout's condition once it is True (waits for it)."""

    async def check() -> dict[str, Any]:
        cond = condition(await client.get_raw(MIGLAYOUTS, layout), kind)
        return cond if cond.get("status") == "True" else {}

    result: dict[str, Any] = await eventually(check, timeout=30)
    return result


async def node_labels(client: KubeClient, node: str) -> dict[str, str]:
    return (await client.get_raw(NODES, node))["metadata"].get("labels") or {}


async def test_a_layout_repartitions_the_node_and_reports_applied(start_cluster: StartCluster) -> None:
    cluster: EmbeddedCluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    node = "dgx-h100-0"
    assert await profiles(client, node) == []
    await client.create(MIGLAYOUTS, mig_layout("balanced", node, {"config": "all-balanced"}))

    await true_condition(client, "balanced", "Applied")
    body = await client.get_raw(MIGLAYOUTS, "balanced")
    assert body["status"]["applied"] == "1/1"
    assert condition(body, "Applied")["observedGeneration"] == body["metadata"]["generation"]
    assert condition(body, "Blocked")["status"] == "False"
    assert condition(body, "Invalid")["status"] == "False"
    await published(client, node, sorted(["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"] * 8))
    assert (await node_labels(client, node))[CONFIG_STATE_LABEL] == "success"


async def test_an_invalid_layout_is_rejected_with_the_reason_and_the_gpus_untouched(
    start_cluster: StartCluster,
) -> None:
    cluster: EmbeddedCluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    node = "dgx-h100-0"
    bad = {"entries": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}]}
    await client.create(MIGLAYOUTS, mig_layout("two-4g", node, bad))

    cond = await true_condition(client, "two-4g", "Invalid")
    assert "too many 4g.40gb: 2 requested, H100-SXM5-80GB allows at most 1" in cond["message"]
    assert not any(cluster.simulated[node].gpu(i).mig_current for i in range(8))
    await watch_until(  # the Event follows the status write
        client,
        EVENTS,
        lambda e: e["involvedObject"]["name"] == "two-4g" and e["type"] == "Warning",
        namespace="default",
    )

    await client.create(MIGLAYOUTS, mig_layout("typo", "elsewhere", {"config": "all-9g.90gb"}))
    assert (
        "no mig-parted config named 'all-9g.90gb'"
        in (await true_condition(client, "typo", "Invalid"))["message"]
    )
    too_many = {"entries": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 9}}]}
    with pytest.raises(
        KubeError
    ) as refused:  # the CRD's maximum: the API server refuses it, as Kubernetes does
        await client.create(MIGLAYOUTS, mig_layout("nine", node, too_many))
    assert refused.value.status == 422
    assert "spec.layout.entries[0].mig-devices.1g.10gb: Invalid value: 9" in str(refused.value)
    assert not any(cluster.simulated[node].gpu(i).mig_current for i in range(8))


async def test_the_mig_config_label_applies_a_named_config(start_cluster: StartCluster) -> None:
    cluster: EmbeddedCluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    node = "dgx-h100-0"
    await client.patch(NODES, node, {"metadata": {"labels": {CONFIG_LABEL: "all-3g.40gb"}}})

    async def success() -> bool:
        return (await node_labels(client, node)).get(CONFIG_STATE_LABEL) == "success"

    await eventually(success, timeout=30)
    await published(client, node, ["3g.40gb"] * 16)
    applied = await watch_until(
        client,
        EVENTS,
        lambda e: e["involvedObject"]["name"] == node and e["reason"] == "MigLayoutApplied",
        namespace="default",
    )
    assert applied["message"].startswith("Label/all-3g.40gb@0: ")


async def test_a_named_config_from_a_configmap(start_cluster: StartCluster) -> None:
    cluster: EmbeddedCluster = await start_cluster("dgx-h100:1", hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    for doc in yaml.safe_load_all((ROOT / "examples" / "miglayout-configmap.yaml").read_text()):
        if doc["kind"] == "ConfigMap":
            await client.create(CONFIGMAPS, doc, doc["metadata"]["namespace"])
        else:
            await client.create(MIGLAYOUTS, doc)
    await true_condition(client, "two-halves", "Applied")
    await published(client, "dgx-h100-0", ["3g.40gb"] * 16)


async def test_a_prepared_claim_blocks_its_node_until_the_pod_is_gone(start_cluster: StartCluster) -> None:
    cluster: EmbeddedCluster = await start_cluster("dgx-a100:1", hardware_poll_seconds=0.1)
    client = cluster.client
    assert client is not None
    node = "dgx-a100-0"
    await client.create(
        RESOURCE_CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "small", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}
            },
        },
        "default",
    )
    await client.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "worker", "namespace": "default"},
            "spec": {
                "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "mig"}]}}],
                "resourceClaims": [{"name": "mig", "resourceClaimName": "small"}],
            },
        },
        "default",
    )

    async def prepared() -> bool:
        claim = await client.get_raw(RESOURCE_CLAIMS, "small", "default")
        return bool((claim.get("status") or {}).get("devices"))

    await eventually(prepared, timeout=30)
    await client.create(MIGLAYOUTS, mig_layout("big", node, {"config": "all-7g.40gb"}))

    cond = await true_condition(client, "big", "Blocked")
    assert "default/small" in cond["message"]
    report = NodeReport.from_json(
        (await client.get_raw(NODES, node))["metadata"]["annotations"]["gpudra.dev/mig-state"]
    )
    assert report is not None and report.blocked_by == ("default/small",)
    assert (await node_labels(client, node))[CONFIG_STATE_LABEL] == "pending"
    await watch_until(
        client,
        EVENTS,
        lambda e: e["reason"] == "MigLayoutBlocked" and "default/small" in e["message"],
        namespace="default",
    )
    assert "7g.40gb" not in await profiles(client, node), "a blocked node is not changed at all"

    await client.delete(PODS, "worker", "default")

    await true_condition(client, "big", "Applied")
    await published(client, node, ["7g.40gb"] * 8)
