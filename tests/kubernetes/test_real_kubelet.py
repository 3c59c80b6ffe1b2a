"""The real kubelet calls gpudra's plugin: simulated nodes run under the kubelet of the control plane's version
(``--real-kubelet``) over Kubernetes' own fake container runtime, with kube-scheduler allocating. The kubelet
registers the plugin from its plugins_registry directory and calls prepare, unprepare and the health stream on its
own schedule; the fake runtime records the container configs the kubelet sent."""

from __future__ import annotations

from typing import Any

import aiohttp
from _realkit import StartKubernetes, admin, claims, pods

from clusterkit import checkpoint_claims, claim_specs, eventually, kubectl
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import RESOURCE_SLICES

GPU_TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
"""
MIG_REQUESTS = "".join(
    f"""
      - name: {name}
        exactly:
          deviceClassName: mig.nvidia.com
          selectors: [{{cel: {{expression: 'device.attributes["gpu.nvidia.com"].profile == "{profile}"'}}}}]"""
    for name, profile in (("a", "1g.5gb"), ("b", "1g.5gb"), ("c", "2g.10gb"), ("d", "3g.20gb"))
)
MIG_TEMPLATE = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: four-mig, namespace: default}}
spec:
  spec:
    devices:
      requests:{MIG_REQUESTS}
      constraints: [{{requests: [a, b, c, d], matchAttribute: gpu.nvidia.com/parentUUID}}]
"""


def pod(name: str, template: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{{name: main, image: "cuda:12", resources: {{claims: [{{name: devices}}]}}}}]
  resourceClaims: [{{name: devices, resourceClaimTemplateName: {template}}}]
"""


def running(pod_: dict[str, Any] | None) -> bool:
    statuses = ((pod_ or {}).get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") and "running" in (s.get("state") or {}) for s in statuses)


async def pod_claim(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    (claim,) = [c for n, c in (await claims(cluster)).items() if n.startswith(f"{name}-devices")]
    return claim


def created(cluster: EmbeddedCluster, node: str, pod_name: str) -> list[dict[str, Any]]:
    """The container configs the kubelet sent the fake runtime for this pod, in order."""
    return [
        call["request"]["config"]
        for call in cluster.real_kubelets[node].cri_calls()
        if call["method"] == "CreateContainer"
        and call["request"]["sandbox_config"]["metadata"]["name"] == pod_name
        and not call["error"]
    ]


def cdi_ids(cluster: EmbeddedCluster, node: str, claim_uid: str) -> list[str]:
    """The CDI device ids gpudra's agent returned for the claim (kept in its checkpoint)."""
    entry = checkpoint_claims(cluster, node)[claim_uid]
    return [i for device in entry.devices for i in device.cdi_device_ids]


def sample(cluster: EmbeddedCluster, name: str, node: str) -> float:
    return cluster.metrics.registry.get_sample_value(name, {"node": node, "result": "ok"}) or 0.0


async def test_gpu_and_mig_pods_run_with_the_cdi_devices_gpudra_returned(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("dgx-h100:1,dgx-a100:1", real_kubelets=2)
    assert cluster.kubernetes is not None
    version = f"v{cluster.kubernetes.binaries.version}"
    await kubectl(
        cluster, "apply", "-f", "-", stdin=GPU_TEMPLATE + "---" + MIG_TEMPLATE + "---" + pod("gpu", "one-gpu")
    )
    await kubectl(cluster, "apply", "-f", "-", stdin=pod("mig", "four-mig"))

    async def both_running() -> dict[str, dict[str, Any]] | None:
        current = await pods(cluster)
        return current if running(current.get("gpu")) and running(current.get("mig")) else None

    current = await eventually(both_running, timeout=90)
    nodes = {n: (await kubectl(cluster, "get", "node", n, "-o", "json")) for n in cluster.real_kubelets}
    for text in nodes.values():
        assert (
            f'"kubeletVersion": "{version}"' in text and '"containerRuntimeVersion": "fakeRuntime://' in text
        )
    assert current["mig"]["spec"]["nodeName"] == "dgx-a100-0"
    for name in ("gpu", "mig"):
        node = current[name]["spec"]["nodeName"]
        claim = await pod_claim(cluster, name)
        returned = cdi_ids(cluster, node, claim["metadata"]["uid"])
        assert returned and all(i.startswith("k8s.gpu.nvidia.com/") for i in returned), returned
        (config,) = created(cluster, node, name)
        assert [d["name"] for d in config["CDI_devices"]] == returned
    mig = (await pod_claim(cluster, "mig"))["status"]["allocation"]["devices"]["results"]
    assert len(mig) == 4 and len({r["device"].split("-mig-")[0] for r in mig}) == 1
    # kube-apiserver reaches the kubelets (node proxy, logs) with their serving certificates
    for node in cluster.real_kubelets:
        assert (await kubectl(cluster, "get", "--raw", f"/api/v1/nodes/{node}/proxy/healthz")).strip() == "ok"


async def test_deleting_the_pod_unprepares_its_claim_exactly_once(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("dgx-h100:1", real_kubelets=1)
    node = "dgx-h100-0"
    await kubectl(cluster, "apply", "-f", "-", stdin=GPU_TEMPLATE + "---" + pod("first", "one-gpu"))
    await eventually(lambda: _running(cluster, "first"), timeout=60)
    uid = (await pod_claim(cluster, "first"))["metadata"]["uid"]
    assert sample(cluster, "gpudra_prepare_requests_total", node) == 1
    assert set(checkpoint_claims(cluster, node)) == {uid}

    await kubectl(cluster, "delete", "pod", "first", "--wait=true", "--timeout=60s")
    # the kubelet unprepares after the containers stopped and before it lets the pod go
    assert sample(cluster, "gpudra_unprepare_requests_total", node) == 1
    assert not checkpoint_claims(cluster, node) and not claim_specs(cluster, node)
    stopped = [c["method"] for c in cluster.real_kubelets[node].cri_calls() if c["method"].startswith("Stop")]
    assert "StopContainer" in stopped and "StopPodSandbox" in stopped

    # a later pod on the same node runs; the first claim was not unprepared again meanwhile
    await kubectl(cluster, "apply", "-f", "-", stdin=pod("second", "one-gpu"))
    await eventually(lambda: _running(cluster, "second"), timeout=60)
    assert sample(cluster, "gpudra_prepare_requests_total", node) == 2
    assert sample(cluster, "gpudra_unprepare_requests_total", node) == 1


async def _running(cluster: EmbeddedCluster, name: str) -> bool:
    return running((await pods(cluster)).get(name))


async def _agent_counter(cluster: EmbeddedCluster, node: str, name: str) -> float:
    """A counter of the node's agent process, from its /metrics."""
    settings = cluster.agent_processes[node].settings
    url = f"http://127.0.0.1:{settings.metrics_port}/metrics"
    async with aiohttp.ClientSession(trust_env=False) as session, session.get(url) as response:
        text = await response.text()
    wanted = f'{name}{{node="{node}",result="ok"}} '
    return sum(float(line.removeprefix(wanted)) for line in text.splitlines() if line.startswith(wanted))


SHARED_CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu, namespace: default}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]
"""


async def slice_uids(cluster: EmbeddedCluster, node: str) -> set[str]:
    items, _ = await admin(cluster).list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}")
    return {s["metadata"]["uid"] for s in items}


def sharing_pod(name: str, claim: str = "shared-gpu") -> str:
    """A pod using an existing claim, under the claim's own name."""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{{name: main, image: "cuda:12", resources: {{claims: [{{name: {claim}}}]}}}}]
  resourceClaims: [{{name: {claim}, resourceClaimName: {claim}}}]
"""


async def test_a_killed_agent_leaves_the_pod_running_and_the_next_prepare_is_idempotent(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes(
        "dgx-h100:1", real_kubelets=1, agent_processes=True, agent_settings={"full_resync_seconds": 3600}
    )
    node = "dgx-h100-0"
    kubelet = cluster.real_kubelets[node]
    await kubectl(cluster, "apply", "-f", "-", stdin=SHARED_CLAIM + "---" + sharing_pod("first"))
    await eventually(lambda: _running(cluster, "first"), timeout=60)
    uid = (await claims(cluster))["shared-gpu"]["metadata"]["uid"]
    before = checkpoint_claims(cluster, node)[uid]
    (spec,) = claim_specs(cluster, node)
    spec_text = spec.read_text()

    slices_before = await slice_uids(cluster, node)
    agent = cluster.agent_processes[node]
    await agent.kill()
    await agent.start()
    # The kubelet keeps "prepared" in memory only. Restarted (as on a kubelet upgrade), it leaves the running
    # pod alone, and prepares the claim again for the next pod that uses it: the restarted agent answers from
    # its checkpoint with what it answered before.
    await kubelet.kill()
    await kubelet.start()
    await kubelet.wait_for_plugin("gpu.nvidia.com")
    await kubectl(cluster, "apply", "-f", "-", stdin=sharing_pod("second"))
    await eventually(lambda: created(cluster, node, "second"), timeout=60)
    assert await _agent_counter(cluster, node, "gpudra_prepare_requests_total") == 1
    assert checkpoint_claims(cluster, node)[uid] == before
    assert spec.read_text() == spec_text
    (first,) = created(cluster, node, "first")
    (second,) = created(cluster, node, "second")
    assert {d["name"] for d in second["CDI_devices"]} == {d["name"] for d in first["CDI_devices"]}
    assert cluster.kubernetes is not None
    if cluster.kubernetes.binaries.minor >= 37:
        # The 1.34.4 kubelet appends a re-prepared claim's devices to those it restored from its checkpoint
        # (kubernetes#140471, fixed by #140274 in later patches): the second container gets every CDI id twice,
        # and with ResourceHealthStatus on, kube-apiserver refuses the pod's status for the duplicate resourceID,
        # so the pod never shows Running although its container runs. Nothing a driver answers changes that.
        assert second["CDI_devices"] == first["CDI_devices"]
        await eventually(lambda: _running(cluster, "second"), timeout=60)
    current = (await pods(cluster))["first"]
    assert running(current) and current["status"]["containerStatuses"][0]["restartCount"] == 0

    # the kubelet deleted the node's ResourceSlices when it started; the agent published them again at once
    async def republished() -> bool:
        now = await slice_uids(cluster, node)
        return bool(now) and not now & slices_before

    await eventually(republished, timeout=30)

    delete = ["delete", "pod", "first", "second", "--wait=true", "--timeout=60s"]
    if cluster.kubernetes.binaries.minor < 37:
        delete += ["--force", "--grace-period=0"]  # that kubelet cannot write the terminated status either

    async def unprepared() -> float:
        return await _agent_counter(cluster, node, "gpudra_unprepare_requests_total")

    await kubectl(cluster, *delete)
    assert await eventually(unprepared, timeout=60) == 1
    assert not checkpoint_claims(cluster, node) and not claim_specs(cluster, node)


async def test_an_xid_shows_in_the_pods_allocated_resources_status(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes(
        "dgx-h100:1", real_kubelets=1, agent_settings={"health_report_seconds": 1.0}
    )
    assert cluster.kubernetes is not None
    minor = cluster.kubernetes.binaries.minor
    node = "dgx-h100-0"
    if minor >= 35:
        await kubectl(cluster, "apply", "-f", "-", stdin=GPU_TEMPLATE + "---" + pod("infer", "one-gpu"))
    else:
        # the 1.34 kubelet finds a claim's health only where the pod's name for the claim is the claim's own
        # name, so never for a claim from a template (kubernetes#134482, fixed in 1.35 by #134875)
        named = SHARED_CLAIM.replace("shared-gpu", "infer-devices")
        await kubectl(
            cluster, "apply", "-f", "-", stdin=named + "---" + sharing_pod("infer", "infer-devices")
        )
    await eventually(lambda: _running(cluster, "infer"), timeout=60)
    claim = await pod_claim(cluster, "infer")
    (result,) = claim["status"]["allocation"]["devices"]["results"]

    async def health() -> list[dict[str, Any]]:
        (status,) = (await pods(cluster))["infer"]["status"]["containerStatuses"]
        return [r for s in status.get("allocatedResourcesStatus") or [] for r in s["resources"]]

    async def reported(wanted: str) -> dict[str, Any] | None:
        resources = await health()
        return resources[0] if len(resources) == 1 and resources[0].get("health") == wanted else None

    healthy = await eventually(lambda: reported("Healthy"), timeout=60)
    assert healthy["resourceID"] in cdi_ids(cluster, node, claim["metadata"]["uid"])
    plugin = cluster.runtimes[node].plugin
    assert plugin is not None
    # which health service the kubelet dials: 1.37 takes v1 when offered, 1.34 to 1.36 know only v1alpha1
    opened = {version for version, count in plugin.health_streams_opened.items() if count}
    assert opened == ({"v1"} if minor >= 37 else {"v1alpha1"})

    gpu = int(result["device"].removeprefix("gpu-"))
    fake = cluster.simulated[node]
    await eventually(lambda: _inject(fake, gpu), timeout=10)
    unhealthy = await eventually(lambda: reported("Unhealthy"), timeout=60)
    if minor >= 36:  # ResourceHealthStatusMessage
        assert "XID 79" in unhealthy.get("message", ""), unhealthy


async def _inject(fake: Any, gpu: int) -> bool:
    """Inject once the agent's health thread listens (an event nobody waits for is lost, as in NVML)."""
    return bool(fake.inject_xid(gpu, 79) > 0)
