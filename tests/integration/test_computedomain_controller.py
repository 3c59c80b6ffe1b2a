"""The ComputeDomain controller in the embedded cluster of GB200 NVL72 trays, with the agents' compute-domain
driver and simulated IMEX daemons: children and finalizer, a domain becoming Ready as its pods' channels are
prepared, what is missing named on the domain (fabric loss, clique mismatch, a node held by another domain),
domains sharing nodes in host-managed mode, and deletion that cleans up while a pod is stuck Terminating."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from _domain_kit import (
    DRIVER_NS,
    NS,
    all_running,
    condition,
    create_domain,
    has_event,
    run_pods,
    wait_status,
)

from clusterkit import StartCluster, client_of, eventually
from gpudra.cluster.kubelet.standin import StandInKubelet, is_imex_daemon, token_volume
from gpudra.cluster.up import EmbeddedCluster
from gpudra.computedomain.clique import CLIQUE_LABEL
from gpudra.computedomain.names import (
    CHANNEL_SCOPE_ANNOTATION,
    daemon_set_name,
    daemon_template_name,
    node_label_key,
    shared_pool_name,
)
from gpudra.config import ControllerSettings
from gpudra.errors import KubeError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DAEMONSETS,
    EVENTS,
    JOBS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "computedomain"
TRAYS = [f"gb200-nvl72-{i}" for i in range(4)]
FAST = ControllerSettings(computedomain_event_grace_seconds=0.5, computedomain_resync_seconds=0.5)


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("gb200-nvl72:4", controller=FAST, hardware_poll_seconds=0.05)


async def node_labels(client: KubeClient, node: str) -> dict[str, str]:
    return dict((await client.get_raw(NODES, node))["metadata"].get("labels") or {})


async def ready_domain(client: KubeClient, name: str, nodes: list[str]) -> str:
    uid = await create_domain(client, name)
    pods = await run_pods(client, name, nodes)
    await eventually(lambda: all_running(client, pods), timeout=30)
    await wait_status(client, name, "Ready", nodes=len(nodes))
    return uid


async def test_the_examples_form_a_domain_over_four_trays(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    domain, job = (yaml.safe_load((EXAMPLES / f).read_text()) for f in ("computedomain.yaml", "job.yaml"))
    uid = (await client.create(COMPUTE_DOMAINS, domain, NS))["metadata"]["uid"]
    await client.create(JOBS, job, NS)

    async def job_running() -> bool:
        pods, _ = await client.list_raw(PODS, NS, label_selector="job-name=train")
        return len(pods) == 4 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    await eventually(job_running, timeout=60)
    status = await wait_status(client, "train", "Ready", "AllNodesReady", nodes=4)
    clique = (await node_labels(client, TRAYS[0]))[CLIQUE_LABEL]
    assert sorted((n["name"], n["cliqueID"], n["status"]) for n in status["nodes"]) == [
        (tray, clique, "Ready") for tray in TRAYS
    ]
    assert sorted(n["index"] for n in status["nodes"]) == [0, 1, 2, 3]

    workload = await client.get_raw(RESOURCE_CLAIM_TEMPLATES, "train-channel", NS)
    assert workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == uid
    await client.get_raw(RESOURCE_CLAIM_TEMPLATES, daemon_template_name(uid), DRIVER_NS)
    await client.get_raw(DAEMONSETS, daemon_set_name(uid), DRIVER_NS)
    assert (
        "gpudra.dev/controller"
        in (await client.get_raw(COMPUTE_DOMAINS, "train", NS))["metadata"]["finalizers"]
    )
    # the Event follows the status write that the wait above saw: wait for it too
    await eventually(lambda: has_event(client, "train", "DomainReady", "all 4 nodes ready"))
    sample = cluster.metrics.registry.get_sample_value
    assert sample("gpudra_computedomains", {"status": "Ready"}) == 1.0
    assert sample("gpudra_computedomain_ready_seconds_count") == 1.0
    assert not sample("gpudra_computedomain_status_conflicts_total")


async def test_a_daemon_pod_whose_running_status_was_refused_gets_one_daemon_and_no_prepare_failure(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server refused the stand-in kubelet's first Running status of a daemon pod (a busy server timing
    out): the pod's start is tried again, and its node runs one IMEX daemon, not one more for each try. No
    FailedPrepareDynamicResources is said: its claims were prepared."""
    refused: list[str] = []
    write = StandInKubelet._write_status

    async def refuse_once(self: StandInKubelet, pod: dict[str, Any], status: dict[str, Any]) -> None:
        if is_imex_daemon(pod) and status.get("phase") == "Running" and not refused:
            refused.append(self.node)
            raise KubeError("the server was unable to return a response in the time allotted", status=504)
        await write(self, pod, status)

    monkeypatch.setattr(StandInKubelet, "_write_status", refuse_once)
    cluster = await start_cluster("gb200-nvl72:2", controller=FAST, hardware_poll_seconds=0.05)
    client = client_of(cluster)
    await ready_domain(client, "retried", TRAYS[:2])

    assert len(refused) == 1
    daemons = sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("imex-daemon "))
    assert daemons == [f"imex-daemon {tray}" for tray in TRAYS[:2]]
    events, _ = await client.list_raw(EVENTS, DRIVER_NS)
    assert [e["message"] for e in events if e["reason"] == "FailedPrepareDynamicResources"] == []


async def test_a_daemon_pod_whose_token_was_refused_says_so_as_a_kubelet_mounting_it(
    start_cluster: StartCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon pod's ServiceAccount token could not be had once (its account deleted and made again): the pod
    gets the kubelet's FailedMount of its token volume with the API server's words, and starts at the next try."""
    refused: list[str] = []
    identity = EmbeddedCluster._embedded_pod_client

    async def refuse_once(self: EmbeddedCluster, kubelet: KubeClient, pod: dict[str, Any]) -> KubeClient:
        if not refused:
            refused.append(pod["metadata"]["name"])
            raise KubeError("refused", status=404, detail='serviceaccounts "gpudra-imex" not found')
        return await identity(self, kubelet, pod)

    monkeypatch.setattr(EmbeddedCluster, "_embedded_pod_client", refuse_once)
    cluster = await start_cluster("gb200-nvl72:1", controller=FAST, hardware_poll_seconds=0.05)
    client = client_of(cluster)
    await ready_domain(client, "token", TRAYS[:1])

    pod = await client.get_raw(PODS, refused[0], DRIVER_NS)
    volume = token_volume(pod)
    assert volume is not None and volume.startswith("kube-api-access-")
    events, _ = await client.list_raw(EVENTS, DRIVER_NS)
    assert [(e["involvedObject"]["name"], e["message"]) for e in events if e["reason"] == "FailedMount"] == [
        (
            refused[0],
            f'MountVolume.SetUp failed for volume "{volume}" : failed to fetch token:'
            ' serviceaccounts "gpudra-imex" not found',
        )
    ]


async def test_tray_losing_its_fabric_makes_the_domain_not_ready_naming_it(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await ready_domain(client, "fabric", TRAYS)
    cluster.simulated[TRAYS[2]].lose_fabric()

    status = await wait_status(client, "fabric", "NotReady", "NodesNotReady")
    assert condition(status, "NodesReady")["reason"] == "FabricLost"
    assert TRAYS[2] in condition(status, "Ready")["message"]
    assert [n["name"] for n in status["nodes"] if n["status"] == "NotReady"] == [TRAYS[2]]
    await eventually(lambda: has_event(client, "fabric", "FabricLost", TRAYS[2]))

    cluster.simulated[TRAYS[2]].restore_fabric()
    await wait_status(client, "fabric", "Ready")


@pytest.mark.parametrize("span", [False, True], ids=["strict", "spanning"])
async def test_pods_of_one_domain_in_two_racks(start_cluster: StartCluster, span: bool) -> None:
    """Strict: an error (CliqueMismatch, NotReady). Spanning (the default, NVIDIA's model): each rack is its
    own IMEX domain, the domain is Ready, and a Warning says that memory is shared only within a rack."""
    settings = FAST.model_copy(update={"computedomain_span_cliques": span})
    cluster = await start_cluster("gb200-nvl72:19", controller=settings)  # tray 18 is in the second rack
    client = client_of(cluster)
    await create_domain(client, "split")
    pods = await run_pods(client, "split", ["gb200-nvl72-0", "gb200-nvl72-18"])
    await eventually(lambda: all_running(client, pods), timeout=30)
    first = (await node_labels(client, "gb200-nvl72-0"))[CLIQUE_LABEL]
    second = (await node_labels(client, "gb200-nvl72-18"))[CLIQUE_LABEL]
    assert first != second

    if span:
        status = await wait_status(client, "split", "Ready", nodes=2)
        assert condition(status, "CliqueConsistent")["reason"] == "MultipleCliques"
        assert sorted(n["index"] for n in status["nodes"]) == [0, 0]  # one IMEX domain per rack
        await eventually(lambda: has_event(client, "split", "MultipleCliques", first, second))
    else:
        status = await wait_status(client, "split", "NotReady", "CliqueMismatch", nodes=2)
        await eventually(lambda: has_event(client, "split", "CliqueMismatch", "gb200-nvl72-18"))
    message = condition(status, "CliqueConsistent")["message"]
    assert f"{first}: gb200-nvl72-0" in message and f"{second}: gb200-nvl72-18" in message


async def test_daemonset_mode_names_the_domain_holding_a_node(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    await ready_domain(client, "first", TRAYS[:2])
    await create_domain(client, "second")
    await run_pods(client, "second", [TRAYS[0]])

    status = await wait_status(client, "second", "NotReady", "NodesNotReady")
    assert condition(status, "NodesReady")["reason"] == "NodeHeld"
    message = condition(status, "Ready")["message"]
    assert TRAYS[0] in message and f"{NS}/first" in message and "one IMEX daemon" in message
    await eventually(lambda: has_event(client, "second", "NodeHeld", f"{NS}/first"))
    assert (await client.get_raw(COMPUTE_DOMAINS, "first", NS))["status"]["status"] == "Ready"


async def test_host_managed_domains_share_nodes(start_cluster: StartCluster) -> None:
    cluster = await start_cluster("gb200-nvl72:2", controller=FAST, compute_domain_daemon_mode="host-managed")
    client = client_of(cluster)
    trays = TRAYS[:2]
    await ready_domain(client, "left", trays)
    right = await ready_domain(client, "right", trays)
    with pytest.raises(NotFoundError):  # host-managed: no per-domain daemons
        await client.get_raw(DAEMONSETS, daemon_set_name(right), DRIVER_NS)
    assert (await client.get_raw(COMPUTE_DOMAINS, "left", NS))["status"]["status"] == "Ready"


async def test_deletion_cleans_up_everything_while_a_pod_is_stuck(cluster: EmbeddedCluster) -> None:
    client = client_of(cluster)
    uid = await ready_domain(client, "gone", TRAYS[:2])
    await client.patch(PODS, "gone-0", {"metadata": {"finalizers": ["test.gpudra.dev/hold"]}}, NS)
    await client.delete(PODS, "gone-0", NS)  # Terminating, held by its finalizer

    await client.delete(COMPUTE_DOMAINS, "gone", NS)

    async def domain_gone() -> bool:
        try:
            await client.get_raw(COMPUTE_DOMAINS, "gone", NS)
        except NotFoundError:
            return True
        return False

    await eventually(domain_gone, timeout=30)
    mine = f"resource.nvidia.com/computeDomain={uid}"
    leftovers: list[dict[str, Any]] = []
    for res in (RESOURCE_CLAIM_TEMPLATES, DAEMONSETS, COMPUTE_DOMAIN_CLIQUES):
        items, _ = await client.list_raw(res, label_selector=mine)
        leftovers += items
    assert leftovers == []
    labelled, _ = await client.list_raw(NODES, label_selector=node_label_key(uid))
    assert labelled == []
    assert (await client.get_raw(PODS, "gone-0", NS))["metadata"]["deletionTimestamp"]  # still stuck
    await eventually(lambda: has_event(client, "gone", "CleanedUp", f"{NS}/gone-0"))
    assert cluster.metrics.registry.get_sample_value(
        "gpudra_computedomain_cleanups_total", {"result": "complete"}
    )
    await client.patch(PODS, "gone-0", {"metadata": {"finalizers": None}}, NS)


async def test_a_domain_with_200_kb_of_annotations_is_handled_and_deleted(cluster: EmbeddedCluster) -> None:
    """The API server caps an object's annotations at 256 KiB together: the controller's records of what it handled
    are kept in the domain's status, so a domain whose own annotations are legal but large is still reconciled,
    and its delete completes."""
    client = client_of(cluster)
    notes = {"example.com/notes": "x" * 200_000}
    uid = await create_domain(client, "annotated", annotations=notes)

    async def handled() -> dict[str, Any] | None:
        body = await client.get_raw(COMPUTE_DOMAINS, "annotated", NS)
        records = (body.get("status") or {}).get("kopf") or {}
        return body if records.get("last-handled-configuration") else None

    body = await eventually(handled, timeout=30)
    assert set(body["metadata"]["annotations"]) == set(notes)  # nothing of the controller's own
    await client.get_raw(RESOURCE_CLAIM_TEMPLATES, "annotated-channel", NS)  # the create handler's work

    await client.delete(COMPUTE_DOMAINS, "annotated", NS)

    async def domain_gone() -> bool:
        try:
            await client.get_raw(COMPUTE_DOMAINS, "annotated", NS)
        except NotFoundError:
            return True
        return False

    await eventually(domain_gone, timeout=30)
    leftovers, _ = await client.list_raw(
        RESOURCE_CLAIM_TEMPLATES, label_selector=f"resource.nvidia.com/computeDomain={uid}"
    )
    assert leftovers == []


async def test_a_podgroup_scoped_domain_warns_where_podgroups_are_not_served(
    cluster: EmbeddedCluster,
) -> None:
    """The embedded API server serves no PodGroups (docs/fidelity.md): each pod's claim would ask for the domain's
    one channel, so the domain says why only one pod can run and what to turn on."""
    client = client_of(cluster)
    uid = await create_domain(client, "train", annotations={CHANNEL_SCOPE_ANNOTATION: "PodGroup"})
    await eventually(lambda: has_event(client, "train", "PodGroupsNotServed", "GenericWorkload"), timeout=30)
    channel = await client.get_raw(RESOURCE_SLICES, shared_pool_name(uid))
    assert channel["spec"]["pool"]["name"] == shared_pool_name(uid)
