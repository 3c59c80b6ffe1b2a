"""The controller's credentials, on the real kube-apiserver: RBAC keeps its DaemonSets, pods and cliques in the
driver's namespace, and the ValidatingAdmissionPolicies of manifests/base keep its writes to what it makes: the IMEX
daemon DaemonSets in their own shape, its own keys on Nodes, the ComputeDomains' ResourceClaimTemplates and channel
ResourceSlices, and the MIG planner's MigLayouts. Each forbidden write is refused with its reason; the writes the
controller makes (the objects built by the same code) still succeed."""

from __future__ import annotations

import copy
from typing import Any

from _privkit import DRIVER_NS, controller_client, forbidden_in, refused
from _realkit import StartKubernetes, admin

from clusterkit import eventually
from gpudra.api.computedomain import ComputeDomain
from gpudra.computedomain.children import daemon_set, shared_channel_slice, workload_template
from gpudra.computedomain.names import CHANNEL_SCOPE_ANNOTATION, DriverNames, node_label_key
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.controller.migplanner import PLANNER_LABEL, layout_name
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DAEMONSETS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
)
from gpudra.mig.desired import CONFIG_STATE_LABEL, DESIRED_ANNOTATION

UID = "0d1f3a94-4c5e-4e57-9a2b-6f1f2d3c4b5a"
NODE = "l4x4-0"


def a_domain(namespace: str = "default") -> ComputeDomain:
    return ComputeDomain.from_wire(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "d", "namespace": namespace, "uid": UID},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}},
        }
    )


def the_daemon_set() -> dict[str, Any]:
    """The DaemonSet the controller applies for a domain (computedomain/children.py), with the image of the
    base's controller (manifests/base/controller.yaml), the one its admission policy allows."""
    return daemon_set(a_domain(), DRIVER_NS, "ghcr.io/gpudra/gpudra:0.1.0")


async def apply(client: KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return await client.patch(DAEMONSETS, meta["name"], body, DRIVER_NS, patch_type="apply", force=True)


async def test_the_controller_runs_daemon_sets_only_in_the_driver_namespace(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    elsewhere = the_daemon_set()
    elsewhere["metadata"]["namespace"] = "default"
    await refused(
        controller.patch(DAEMONSETS, elsewhere["metadata"]["name"], elsewhere, "default", patch_type="apply"),
        403,
        *forbidden_in("default", "patch", "daemonsets"),
    )
    # it reads pods everywhere (a waiting pod gets its claims' explanation) but cannot start one
    await controller.list_raw(PODS, "default")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "x"}]},
    }
    await refused(controller.create(PODS, pod, "default"), 403, *forbidden_in("default", "create", "pods"))
    await refused(
        controller.list_raw(COMPUTE_DOMAIN_CLIQUES),
        403,
        'cannot list resource "computedomaincliques"',
        "cluster scope",
    )


def privileged(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def as_root(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": 0}


def host_root(ds: dict[str, Any]) -> None:
    pod = ds["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]


def host_pid(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["hostPID"] = True


def agent_account(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["serviceAccountName"] = "gpudra-agent"


def added_capability(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"] = {
        "add": ["SYS_ADMIN"]
    }


def init_container(ds: dict[str, Any]) -> None:
    pod = ds["spec"]["template"]["spec"]
    pod["initContainers"] = [{**pod["containers"][0], "name": "first"}]


def secret_env(ds: dict[str, Any]) -> None:
    secret = {"secretKeyRef": {"name": "any", "key": "token"}}
    ds["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "T", "valueFrom": secret})


def another_claim(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "gpus"


def another_image(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/miner:1"


def another_program(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["command"] = ["python", "-c", "print('any code')"]


def more_resources(ds: dict[str, Any]) -> None:
    resources = ds["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": "64", "memory": "512Gi"}
    resources["limits"] = {"cpu": "64", "memory": "512Gi"}


FORGED = [
    (privileged, "must run as the IMEX daemon runs: non-root, unprivileged"),
    (as_root, "must run as the IMEX daemon runs"),
    (added_capability, "must run as the IMEX daemon runs"),
    (host_root, "may not mount volumes (hostPath, Secrets)"),
    (host_pid, "may not use the host's network, PID or IPC namespace"),
    (agent_account, "must run as ServiceAccount gpudra-imex-daemon, not gpudra-agent"),
    (init_container, "may not have init containers"),
    (secret_env, "may not read Secrets or ConfigMaps into its environment"),
    (another_claim, f"may claim only its domain's daemon template computedomain-daemon-{UID}"),
    (another_image, "must run the IMEX daemon: image ghcr.io/gpudra/gpudra:0.1.0, arguments [imex-daemon]"),
    (another_program, "must run the IMEX daemon: image ghcr.io/gpudra/gpudra:0.1.0"),
    (more_resources, "must request and be limited to the IMEX daemon's cpu 100m and memory 128Mi"),
]


async def test_the_controller_writes_only_imex_daemon_daemon_sets_of_their_own_shape(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    name = f"DaemonSet {DRIVER_NS}/computedomain-daemon-{UID}"
    for forge, reason in FORGED:
        forged = the_daemon_set()
        forge(forged)
        await refused(
            apply(controller, forged),
            422,
            "gpudra-controller-imex-daemonsets",
            f"controller's {name} {reason}",
        )
    # not the agent's DaemonSet (root on every node), nor any other in the driver's namespace
    agent = the_daemon_set()
    agent["metadata"]["name"] = "gpudra-agent"
    await refused(
        apply(controller, agent),
        422,
        "may write only the IMEX daemon DaemonSets (computedomain-daemon-<domain uid>), not DaemonSet "
        "gpudra/gpudra-agent",
    )
    other = copy.deepcopy(agent)
    other["metadata"] = {"name": "other", "namespace": DRIVER_NS}
    await admin(cluster).create(DAEMONSETS, other, DRIVER_NS)
    await refused(controller.delete(DAEMONSETS, "other", DRIVER_NS), 422, "not DaemonSet gpudra/other")
    # its own: applied, changed and deleted
    created = await apply(controller, the_daemon_set())
    assert created["spec"]["template"]["spec"]["serviceAccountName"] == "gpudra-imex-daemon"
    changed = the_daemon_set()
    changed["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "X", "value": "y"})
    await apply(controller, changed)
    await controller.delete(DAEMONSETS, created["metadata"]["name"], DRIVER_NS)


async def test_the_controller_changes_only_its_own_keys_on_nodes(start_kubernetes: StartKubernetes) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    domain_label = node_label_key(UID)
    await admin(cluster).patch(NODES, NODE, {"metadata": {"labels": {domain_label: "true"}}})
    cases: list[tuple[dict[str, Any], str]] = [
        ({"spec": {"unschedulable": True}}, f"may not change Node {NODE}'s spec"),
        (
            {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
            f"may not change Node {NODE}'s spec",
        ),
        (
            {"metadata": {"labels": {"kubernetes.io/hostname": "elsewhere"}}},
            f"may change only its own labels on Node {NODE} (remove a ComputeDomain's, set the MIG config state), "
            "not kubernetes.io/hostname",
        ),
        # a domain's label is the agent's to set (it schedules the domain's daemon there); the controller removes it
        (
            {"metadata": {"labels": {node_label_key("another-domain"): "true"}}},
            f"not {node_label_key('another-domain')}",
        ),
        (
            {"metadata": {"annotations": {"gpudra.dev/mig-state": "{}"}}},
            f"may change only its own annotations on Node {NODE}, not gpudra.dev/mig-state",
        ),
        ({"metadata": {"finalizers": ["example.com/hold"]}}, "finalizers or owner references"),
    ]
    for patch, reason in cases:
        await refused(controller.patch(NODES, NODE, patch), 422, "gpudra-controller-node-keys", reason)
    # what it writes: the desired MIG state, a failed layout's state, a deleted domain's label removed
    mine = {
        "metadata": {
            "annotations": {DESIRED_ANNOTATION: "{}"},
            "labels": {CONFIG_STATE_LABEL: "failed", domain_label: None},
        }
    }
    node = await controller.patch(NODES, NODE, mine)
    assert node["metadata"]["annotations"][DESIRED_ANNOTATION] == "{}"
    assert node["metadata"]["labels"][CONFIG_STATE_LABEL] == "failed"
    assert domain_label not in node["metadata"]["labels"]
    assert not node["spec"].get("unschedulable")


def a_user_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            }
        },
    }


def a_layout(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "gpudra.dev/v1alpha1",
        "kind": "MigLayout",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeSelector": {"matchLabels": {"example.com/no-such-node": "true"}},
            "layout": {"entries": [{"devices": "all", "mig-enabled": False}]},
        },
    }


async def test_the_controller_changes_and_deletes_only_the_templates_and_layouts_it_made(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    drivers = DriverNames()

    # a user's ResourceClaimTemplate: neither deleted nor rewritten, even under a domain's channel template name
    await admin(cluster).create(RESOURCE_CLAIM_TEMPLATES, a_user_template("d-channel"), "default")
    not_ours = "may write only the ResourceClaimTemplates of ComputeDomains"
    await refused(
        controller.delete(RESOURCE_CLAIM_TEMPLATES, "d-channel", "default"),
        422,
        "gpudra-controller-own-templates",
        f"{not_ours} (labelled app.kubernetes.io/managed-by=gpudra and resource.nvidia.com/computeDomain), not "
        "ResourceClaimTemplate default/d-channel",
    )
    # nor labelled as its own first (to delete it next)
    channel = workload_template(a_domain(), drivers)
    relabel = {"metadata": {"labels": channel["metadata"]["labels"]}}
    await refused(controller.patch(RESOURCE_CLAIM_TEMPLATES, "d-channel", relabel, "default"), 422, not_ours)
    # a template of its own that asks for GPUs
    greedy = a_user_template("greedy")
    greedy["metadata"]["labels"] = dict(channel["metadata"]["labels"])
    await refused(
        controller.create(RESOURCE_CLAIM_TEMPLATES, greedy, "default"),
        422,
        "may request only the ComputeDomain device classes",
    )
    # its own: made, changed, deleted
    await admin(cluster).delete(RESOURCE_CLAIM_TEMPLATES, "d-channel", "default")
    await controller.patch(
        RESOURCE_CLAIM_TEMPLATES, "d-channel", channel, "default", patch_type="apply", force=True
    )
    await controller.delete(RESOURCE_CLAIM_TEMPLATES, "d-channel", "default")

    # an administrator's MigLayout: neither deleted nor rewritten; the planner's own: made and deleted
    await admin(cluster).create(MIGLAYOUTS, a_layout("admins", {}))
    for write in (
        controller.delete(MIGLAYOUTS, "admins"),
        controller.patch(MIGLAYOUTS, "admins", {"metadata": {"labels": {PLANNER_LABEL: "true"}}}),
    ):
        await refused(
            write,
            422,
            "gpudra-controller-planner-layouts",
            "may write only the MIG planner's MigLayouts (labelled gpudra.dev/planner=true), not MigLayout admins",
        )
    planned = a_layout(layout_name(NODE), {PLANNER_LABEL: "true"})
    await refused(
        controller.create(MIGLAYOUTS, {**planned, "metadata": {"name": "unlabelled"}}), 422, "unlabelled"
    )
    await controller.create(MIGLAYOUTS, planned)
    await controller.delete(MIGLAYOUTS, layout_name(NODE))


async def test_the_controller_keeps_to_its_finalizer_and_kopfs_annotations_on_compute_domains(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}},
    }
    await admin(cluster).create(COMPUTE_DOMAINS, domain, "default")

    async def finalized() -> bool:
        got = await admin(cluster).get_raw(COMPUTE_DOMAINS, "d", "default")
        return "gpudra.dev/controller" in got["metadata"].get("finalizers", [])

    assert await eventually(finalized, timeout=60)  # the running controller's own patch goes through
    where = "ComputeDomain default/d"
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {
                "metadata": {
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": UID}]
                }
            },
            f"may not change the labels or owner references of {where}",
        ),
        (
            {"metadata": {"labels": {"resource.nvidia.com/computeDomain": "another"}}},
            f"may not change the labels or owner references of {where}",
        ),
        (
            {"metadata": {"finalizers": ["gpudra.dev/controller", "example.com/hold"]}},
            f"may add or remove only its own finalizer gpudra.dev/controller on {where}",
        ),
        (
            {"metadata": {"annotations": {"example.com/note": "x"}}},
            f"may change only kopf's annotations (kopf.zalando.org/*) on {where}",
        ),
    ]
    for patch, reason in cases:
        await refused(
            controller.patch(COMPUTE_DOMAINS, "d", patch, "default"),
            422,
            "gpudra-controller-computedomains",
            reason,
        )
    noted = await controller.patch(
        COMPUTE_DOMAINS, "d", {"metadata": {"annotations": {"kopf.zalando.org/probe": "{}"}}}, "default"
    )
    assert noted["metadata"]["annotations"]["kopf.zalando.org/probe"] == "{}"


async def test_the_controller_writes_only_the_channel_slices_of_podgroup_scoped_domains(
    start_kubernetes: StartKubernetes,
) -> None:
    cluster = await start_kubernetes("l4x4:1")
    controller = await controller_client(cluster)
    domain = a_domain()
    domain.metadata.annotations = {CHANNEL_SCOPE_ANNOTATION: "PodGroup"}
    channel = shared_channel_slice(domain, DriverNames())
    name = channel["metadata"]["name"]

    # a node's slice (the agent's): neither deleted nor rewritten
    agents = [
        s for s in (await admin(cluster).list_raw(RESOURCE_SLICES))[0] if s["spec"].get("nodeName") == NODE
    ]
    assert agents
    not_ours = "may write only the ResourceSlices of ComputeDomain channels"
    node_slice = agents[0]["metadata"]["name"]
    await refused(
        controller.delete(RESOURCE_SLICES, node_slice), 422, "gpudra-controller-own-slices", not_ours
    )
    # a slice of its own that publishes a GPU, or is pinned to a node
    gpu = copy.deepcopy(channel)
    gpu["spec"]["devices"][0]["attributes"]["type"] = {"string": "gpu"}
    pinned = copy.deepcopy(channel)
    del pinned["spec"]["nodeSelector"]
    pinned["spec"]["nodeName"] = NODE
    for body in (gpu, pinned):
        await refused(controller.create(RESOURCE_SLICES, body), 422, "may hold only domain channels")
    # under another name than its domain's
    renamed = copy.deepcopy(channel)
    renamed["metadata"]["name"] = renamed["spec"]["pool"]["name"] = "computedomain-other"
    await refused(controller.create(RESOURCE_SLICES, renamed), 422, not_ours)
    # its own: made, changed, deleted
    await controller.patch(RESOURCE_SLICES, name, channel, patch_type="apply", force=True)
    await controller.patch(RESOURCE_SLICES, name, channel, patch_type="apply", force=True)
    await controller.delete(RESOURCE_SLICES, name)
