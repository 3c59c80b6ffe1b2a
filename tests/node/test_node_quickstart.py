"""NVIDIA's quickstart on real nodes: the specs gpu-test1 to gpu-test5 and the MPS one, unchanged but for their
images (the GPU workload image, from the node), run in real containers; each container's own nvidia-smi sees
exactly the device nodes gpudra's CDI spec gave its requests and the UUIDs of its claim; and deleting them all leaves
no CDI spec, checkpoint entry or MPS directory behind."""

from __future__ import annotations

from typing import Any

from _nodekit import (
    StartRealNodes,
    admin,
    all_running,
    apply,
    checkpoint,
    claim_of,
    claim_specs,
    injected_nodes,
    on_workload_image,
    pods,
    real_node,
    smi_report,
)

from clusterkit import eventually, kubectl
from gpudra.kube.resources import RESOURCE_CLAIMS
from quickstartkit import GPU_TEST1, GPU_TEST2, GPU_TEST3, GPU_TEST4, GPU_TEST5, GPU_TEST_MPS

QUICKSTART = (GPU_TEST1, GPU_TEST2, GPU_TEST3, GPU_TEST4, GPU_TEST5, GPU_TEST_MPS)
NAMESPACES = ["gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4", "gpu-test5", "gpu-test-mps"]


async def test_the_quickstart_runs_in_real_containers_with_the_gpus_gpudra_prepared(
    start_real_nodes: StartRealNodes,
) -> None:
    cluster = await start_real_nodes(
        "dgx-h100:1,dgx-a100:1"
    )  # the A100s carry the static MIG devices of gpu-test4
    await apply(cluster, on_workload_image("".join(QUICKSTART)))

    async def every_pod_running() -> dict[str, dict[str, Any]]:
        current = await all_running(cluster, NAMESPACES)
        return current if len(current) == 2 + 1 + 2 + 4 + 1 + 1 else {}

    current = await eventually(every_pod_running, timeout=180)
    checked = 0
    for key, pod in current.items():
        namespace, name = key.split("/")
        node = pod["spec"]["nodeName"]
        assert all(s["containerID"].startswith("containerd://") for s in pod["status"]["containerStatuses"])
        for container in pod["spec"]["containers"]:
            log = await kubectl(cluster, "logs", "-n", namespace, name, "-c", container["name"])
            uuids, nodes = smi_report(log)
            expected_uuids: set[str] = set()
            expected_nodes: set[str] = set()
            for ref in container["resources"]["claims"]:
                uid = (await claim_of(cluster, pod, ref["name"]))["metadata"]["uid"]
                expected_uuids |= {str(device.uuid) for device in checkpoint(cluster, node)[uid].devices}
                requests = {ref["request"]} if ref.get("request") else None
                expected_nodes |= injected_nodes(cluster, node, uid, requests)
            assert nodes and set(nodes) == expected_nodes, (key, container["name"], log)
            assert uuids and set(uuids) == expected_uuids, (key, container["name"], log)
            checked += 1
    assert checked == 2 + 2 + 2 + 16 + 4 + 2

    # kubectl exec reaches the container: the same GPUs, as character devices
    logged = await kubectl(cluster, "logs", "-n", "gpu-test1", "pod1")
    assert await kubectl(cluster, "exec", "-n", "gpu-test1", "pod1", "--", "nvidia-smi", "-L") == logged
    (device,) = smi_report(logged)[1]
    kind = await kubectl(cluster, "exec", "-n", "gpu-test1", "pod1", "--", "stat", "-c", "%F", device)
    assert kind.strip() == "character special file"

    await kubectl(cluster, "delete", "namespace", *NAMESPACES, "--wait=false")

    async def all_gone() -> bool:
        left = [p for ns in NAMESPACES for p in await pods(cluster, ns)]
        claims, _ = await admin(cluster).list_raw(RESOURCE_CLAIMS)
        return not left and not [c for c in claims if c["metadata"]["namespace"] in NAMESPACES]

    await eventually(all_gone, timeout=120)
    for node in ("dgx-h100-0", "dgx-a100-0"):
        assert claim_specs(cluster, node) == []
        assert checkpoint(cluster, node) == {}
        mps = real_node(cluster, node).dirs.kubelet / "plugins" / "gpu.nvidia.com" / "mps"
        assert not mps.exists() or not any(mps.iterdir())
