"""Least privilege, enforced by the real kube-apiserver: RBAC keeps what lives in the driver's namespace there, and
the ValidatingAdmissionPolicies of manifests/base keep a node's credentials to that node. Each forbidden write is
tried with the credentials of node A's agent (or node B's IMEX daemon pod) against node B's objects and against
another namespace, and must be refused with its reason; the writes the product makes still succeed.
(ResourceSlices: test_real_admission.py; the controller: test_real_controller_privilege.py.)"""

from __future__ import annotations

from typing import Any

from _privkit import DRIVER_NS, forbidden_in, own_client, refused
from _realkit import MINOR, StartKubernetes, admin, needs_minor

from clusterkit import eventually
from gpudra.agent.computedomain.registration import CliqueRegistration
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    CONFIGMAPS,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)

A, B = "l4x4-0", "l4x4-1"
GRANULAR_STATUS_GATE = "DRAResourceClaimGranularStatusAuthorization"


async def imex_daemon_client(cluster: EmbeddedCluster, node: str) -> KubeClient:
    """The identity an IMEX daemon pod on ``node`` has: a token of gpudra-imex-daemon bound to its pod."""
    assert cluster.kubernetes is not None
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"imex-{node}", "namespace": DRIVER_NS},
        "spec": {
            "nodeName": node,
            "serviceAccountName": "gpudra-imex-daemon",
            "containers": [{"name": "daemon", "image": "gpudra", "args": ["imex-daemon"]}],
        },
    }
    created = await admin(cluster).create(PODS, pod, DRIVER_NS)
    kubeconfig = await cluster.kubernetes.service_account_kubeconfig(
        admin(cluster),
        DRIVER_NS,
        "gpudra-imex-daemon",
        who=f"imex-{node}",
        bound_pod=(created["metadata"]["name"], created["metadata"]["uid"]),
    )
    return await own_client(cluster, kubeconfig, f"imex-{node}")


async def test_an_agent_changes_only_its_own_node_and_only_the_keys_it_owns(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:2")
    agent_a = cluster.agent_clients[A]

    published = {"metadata": {"labels": {"gpudra.dev/resourceslices-published": "false"}}}
    await refused(
        agent_a.patch(NODES, B, published),
        422,
        "gpudra-agent-own-node",
        f"the gpudra agent on node {A} may not change Node {B}",
    )
    own_cases: list[tuple[dict[str, Any], str]] = [
        (
            {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
            "may change only the labels it owns on its Node, not node-role.kubernetes.io/control-plane",
        ),
        (
            {"metadata": {"labels": {"nvidia.com/gpu.present": None}}},
            "may change only the labels it owns on its Node, not nvidia.com/gpu.present",
        ),
        (
            {"metadata": {"annotations": {"gpudra.dev/mig-desired": "{}"}}},
            "may change only the annotations it owns on its Node, not gpudra.dev/mig-desired",
        ),
        (
            {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
            "may not change its Node's spec",
        ),
        ({"spec": {"unschedulable": True}}, "may not change its Node's spec"),
        ({"metadata": {"finalizers": ["example.com/hold"]}}, "finalizers or owner references"),
    ]
    for patch, reason in own_cases:
        await refused(agent_a.patch(NODES, A, patch), 422, "gpudra-agent-own-node", reason)

    # what the agent writes on its own Node is allowed: slices published, its MIG state, the NVLink clique and
    # the ComputeDomains it serves
    owned = {
        "metadata": {
            "labels": {
                "nvidia.com/gpu.clique": "cluster-1.7",
                "nvidia.com/mig.config.state": "success",
                "computedomain.gpudra.dev/0d1f3a94-4c5e-4e57-9a2b-6f1f2d3c4b5a": "true",
            },
            "annotations": {"gpudra.dev/mig-state": "{}"},
        }
    }
    node = await agent_a.patch(NODES, A, owned)
    assert node["metadata"]["labels"]["nvidia.com/gpu.clique"] == "cluster-1.7"
    assert node["metadata"]["annotations"]["gpudra.dev/mig-state"] == "{}"
    node = await agent_a.patch(NODES, A, {"metadata": {"labels": {"nvidia.com/gpu.clique": None}}})
    assert "nvidia.com/gpu.clique" not in node["metadata"]["labels"]
    # the controller's own write of the same Node is not the agent's and is not bound
    await admin(cluster).patch(NODES, A, {"metadata": {"annotations": {"gpudra.dev/mig-desired": "{}"}}})


def a_clique(name: str, namespace: str, *nodes: str, status: str = "NotReady") -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"resource.nvidia.com/computeDomain": "u1"},
        },
        "daemons": [
            {"nodeName": n, "ipAddress": f"10.0.0.{i + 1}", "cliqueID": "c.1", "index": i, "status": status}
            for i, n in enumerate(nodes)
        ],
    }


DANGLING_OWNER = {
    "metadata": {
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "gone",
                "uid": "0d1f3a94-4c5e-4e57-9a2b-6f1f2d3c4b5a",
            }
        ]
    }
}
HOLD = {"metadata": {"finalizers": ["example.com/hold"]}}


def entry_of(client: KubeClient, node: str) -> CliqueRegistration:
    """Node ``node``'s entry in clique object u1.c.1, written as the IMEX daemon (or, host-managed, the agent)
    writes it: joined by server-side apply, then JSON patches."""
    return CliqueRegistration(
        client, namespace=DRIVER_NS, domain_uid="u1", clique_id="c.1", node_name=node, ip_address="10.0.0.9"
    )


async def test_cliques_and_leases_stay_in_the_driver_namespace_and_each_node_writes_its_own_entry(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:2")
    agent_a = cluster.agent_clients[A]
    daemon_b = await imex_daemon_client(cluster, B)

    # another namespace: RBAC (Roles in the driver's namespace only)
    await refused(
        agent_a.create(COMPUTE_DOMAIN_CLIQUES, a_clique("u1.c.1", "default", A), "default"),
        403,
        *forbidden_in("default", "create", "computedomaincliques"),
    )
    await refused(
        daemon_b.create(COMPUTE_DOMAIN_CLIQUES, a_clique("u1.c.1", "default", B), "default"),
        403,
        *forbidden_in("default", "create", "computedomaincliques"),
    )
    # a clique created with another node's entry
    await refused(
        agent_a.create(COMPUTE_DOMAIN_CLIQUES, a_clique("u1.c.1", DRIVER_NS, A, B), DRIVER_NS),
        422,
        "gpudra-own-clique-entry",
        f"the IMEX daemon of node {A} may change only its own node's entry in ComputeDomainClique gpudra/u1.c.1",
    )
    # a clique created with an owner reference: the garbage collector would delete it when the owner is gone
    owned = a_clique("u1.c.1", DRIVER_NS, A)
    owned["metadata"] |= DANGLING_OWNER["metadata"]
    await refused(
        agent_a.create(COMPUTE_DOMAIN_CLIQUES, owned, DRIVER_NS),
        422,
        f"the IMEX daemon of node {A} may not set owner references or finalizers on ComputeDomainClique "
        "gpudra/u1.c.1",
    )
    # own entries: allowed, for the agent (host-managed: it creates the object by apply, then appends its entry)
    # and for the daemon pod (its pod-bound token)
    assert await entry_of(agent_a, A).report("NotReady") == 0
    registration_b = entry_of(daemon_b, B)
    assert await registration_b.report("Ready") == 1
    assert registration_b.conflicts == 0
    # a daemon that found the object missing applies it with an empty list: kube-apiserver keeps the entries
    await entry_of(daemon_b, B)._create()
    clique = await daemon_b.get_raw(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", DRIVER_NS)
    assert [(d["nodeName"], d["index"], d["status"]) for d in clique["daemons"]] == [
        (A, 0, "NotReady"),
        (B, 1, "Ready"),
    ]
    # node B's daemon may not mark node A Ready, nor drop it, nor relabel the object; nor write it whole
    for forged in (
        [{"op": "replace", "path": "/daemons/0/status", "value": "Ready"}],
        [{"op": "remove", "path": "/daemons/0"}],
    ):
        await refused(
            daemon_b.patch(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", forged, DRIVER_NS, patch_type="json"),
            422,
            f"the IMEX daemon of node {B} may change only its own node's entry",
        )
    # the object is every node's: a dangling owner reference (the garbage collector deletes it, every node's entry
    # with it) or a finalizer (it never goes) is refused to the agent and to the daemon pods alike
    for client, node in ((agent_a, A), (daemon_b, B)):
        for forged_meta in (DANGLING_OWNER, HOLD):
            await refused(
                client.patch(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", forged_meta, DRIVER_NS),
                422,
                "gpudra-own-clique-entry",
                f"the IMEX daemon of node {node} may not set owner references or finalizers on "
                "ComputeDomainClique gpudra/u1.c.1",
            )
    # nor ComputeDomains (users' objects), which it only reads through its claims' configs
    await refused(
        agent_a.patch(COMPUTE_DOMAINS, "d", HOLD, "default"),
        403,
        *forbidden_in("default", "patch", "computedomains"),
    )
    relabel = {"metadata": {"labels": {"resource.nvidia.com/computeDomain": "u2"}}}
    await refused(
        daemon_b.patch(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", relabel, DRIVER_NS),
        422,
        "may not change a ComputeDomainClique",
    )
    await refused(
        daemon_b.replace(COMPUTE_DOMAIN_CLIQUES, clique),
        403,
        *forbidden_in(DRIVER_NS, "update", "computedomaincliques"),
    )
    await refused(
        agent_a.delete(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", DRIVER_NS),
        403,
        *forbidden_in(DRIVER_NS, "delete", "computedomaincliques"),
    )
    assert await entry_of(agent_a, A).report("Ready") == 0
    clique = await daemon_b.get_raw(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", DRIVER_NS)
    assert [d["status"] for d in clique["daemons"]] == ["Ready", "Ready"]
    # A leaves: B's entry moves up, so B's next patch (planned at the place it knew) fails its test, and B,
    # recognizing kube-apiserver's answer as a failed test, redoes it on a fresh read
    await entry_of(agent_a, A).release()
    assert await registration_b.report("NotReady") == 1
    assert registration_b.conflicts == 1
    clique = await daemon_b.get_raw(COMPUTE_DOMAIN_CLIQUES, "u1.c.1", DRIVER_NS)
    assert [(d["nodeName"], d["index"], d["status"]) for d in clique["daemons"]] == [(B, 1, "NotReady")]

    # IMEX channel leases: ConfigMaps imex-channels.<clique> in the driver's namespace, and nothing else
    lease = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "imex-channels.c.1"}, "data": {}}
    await refused(
        agent_a.create(CONFIGMAPS, lease, "default"), 403, *forbidden_in("default", "create", "configmaps")
    )
    await refused(agent_a.get_raw(CONFIGMAPS, "kube-root-ca.crt", "kube-system"), 403)
    dashboard = {**lease, "metadata": {"name": "gpudra-dashboard"}}
    await refused(
        agent_a.create(CONFIGMAPS, dashboard, DRIVER_NS),
        422,
        "gpudra-agent-lease-configmaps",
        "may write only the IMEX channel leases (ConfigMaps imex-channels.<clique>), not ConfigMap "
        "gpudra/gpudra-dashboard",
    )
    await admin(cluster).create(CONFIGMAPS, dashboard, DRIVER_NS)
    await refused(
        agent_a.replace(
            CONFIGMAPS, {**dashboard, "metadata": {"name": "gpudra-dashboard", "namespace": DRIVER_NS}}
        ),
        422,
        "gpudra-agent-lease-configmaps",
    )
    created = await agent_a.create(CONFIGMAPS, lease, DRIVER_NS)
    await agent_a.replace(CONFIGMAPS, {**created, "data": {"u1": '{"first": 1}'}})
    # a lease is shared by its clique's nodes: no owner references, no finalizers
    current = await agent_a.get_raw(CONFIGMAPS, "imex-channels.c.1", DRIVER_NS)
    for forged_meta in (DANGLING_OWNER, HOLD):
        forged_lease = {**current, "metadata": {**current["metadata"], **forged_meta["metadata"]}}
        await refused(
            agent_a.replace(CONFIGMAPS, forged_lease),
            422,
            "gpudra-agent-lease-configmaps",
            "may not set owner references or finalizers on ConfigMap gpudra/imex-channels.c.1",
        )
    held = {**lease, "metadata": {"name": "imex-channels.c.2", **HOLD["metadata"]}}
    await refused(
        agent_a.create(CONFIGMAPS, held, DRIVER_NS),
        422,
        "may not set owner references or finalizers on ConfigMap gpudra/imex-channels.c.2",
    )


def allocated_on(node: str, device: str) -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def device_status(node: str, device: str) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    return {
        "status": {
            "devices": [
                {"driver": "gpu.nvidia.com", "pool": node, "device": device, "conditions": [condition]}
            ]
        }
    }


async def a_claim(cluster: EmbeddedCluster, name: str, node: str | None) -> str:
    """A claim, allocated on ``node`` as kube-scheduler would have allocated it (written by the admin), or not
    allocated at all (``None``)."""
    client = admin(cluster)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    await client.create(RESOURCE_CLAIMS, claim, "default")
    if node is not None:
        await eventually(lambda: client.list_raw(RESOURCE_SLICES, field_selector=f"spec.nodeName={node}"))
        status = {"status": {"allocation": allocated_on(node, "gpu-0")}}
        await client.patch(RESOURCE_CLAIMS, name, status, "default", subresource="status")
    return name


RESERVE = {"status": {"reservedFor": [{"resource": "pods", "name": "intruder", "uid": "5f0c2b1e"}]}}


@needs_minor(36, f"no {GRANULAR_STATUS_GATE}, the policy alone bounds the agent (the next test)")
async def test_claim_status_is_written_only_for_claims_on_the_agents_node(
    start_kubernetes: StartKubernetes,
) -> None:
    """Kubernetes >= 1.36 bounds it itself (the associated-node verbs; resourceclaims/binding, which the agent
    lacks); the policy then keeps the agent to its own pool's entries."""
    cluster = await start_kubernetes("l4x4:2")
    claim = await a_claim(cluster, "on-b", B)
    agent_a, agent_b = cluster.agent_clients[A], cluster.agent_clients[B]
    await refused(
        agent_a.patch(RESOURCE_CLAIMS, claim, device_status(B, "gpu-0"), "default", subresource="status"),
        422,
        'changing status.devices requires resource="resourceclaims/driver", verb="[arbitrary-node:patch]"',
    )
    for agent in (agent_a, agent_b):
        await refused(
            agent.patch(RESOURCE_CLAIMS, claim, RESERVE, "default", subresource="status"),
            422,
            'changing status.allocation or status.reservedFor requires resource="resourceclaims/binding"',
        )
    written = await agent_b.patch(
        RESOURCE_CLAIMS, claim, device_status(B, "gpu-0"), "default", subresource="status"
    )
    assert written["status"]["devices"][0]["conditions"][0]["reason"] == "Prepared"


async def test_without_granular_status_authorization_the_policy_bounds_claim_status(
    start_kubernetes: StartKubernetes,
) -> None:
    """As on Kubernetes 1.34 and 1.35 (the gate off): the agent's RBAC alone would let it rewrite any claim's
    status; claim-admission.yaml refuses what is not its own node's."""
    # 1.34 and 1.35 have no such gate (kube-apiserver refuses one it does not know): they run as they are
    cluster = await start_kubernetes(
        "l4x4:2", feature_gates_off=(GRANULAR_STATUS_GATE,) if MINOR >= 36 else ()
    )
    claim = await a_claim(cluster, "on-b", B)
    agent_a, agent_b = cluster.agent_clients[A], cluster.agent_clients[B]
    await refused(
        agent_a.patch(RESOURCE_CLAIMS, claim, device_status(B, "gpu-0"), "default", subresource="status"),
        422,
        "gpudra-agent-own-node-claims",
        f"the gpudra agent on node {A} may not write the status of claim default/{claim}: it is allocated on node {B}",
    )
    await refused(
        agent_b.patch(RESOURCE_CLAIMS, claim, RESERVE, "default", subresource="status"),
        422,
        "may not change a claim's allocation or reservedFor",
    )
    # nor allocate a claim to itself (on 1.34 and 1.35 nothing else stops it)
    pending = await a_claim(cluster, "pending", None)
    await refused(
        agent_a.patch(
            RESOURCE_CLAIMS,
            pending,
            {"status": {"allocation": allocated_on(A, "gpu-0")}},
            "default",
            subresource="status",
        ),
        422,
        f"may not write the status of claim default/{pending}: it is not allocated on one node",
    )
    written = await agent_b.patch(
        RESOURCE_CLAIMS, claim, device_status(B, "gpu-0"), "default", subresource="status"
    )
    assert written["status"]["devices"][0]["pool"] == B
