"""The children of a ComputeDomain: names, classes, opaque configs, owner references, labels, daemon modes."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.api.computedomain import ComputeDomain
from gpudra.api.nvidia import decode_opaque
from gpudra.computedomain.children import Children, DaemonPodSettings, child_selector, desired_children
from gpudra.computedomain.names import CHANNEL_SCOPE_ANNOTATION, DaemonMode, DriverNames
from gpudra.config import ControllerSettings
from gpudra.controller.domainchildren import daemon_env
from gpudra.errors import InvalidInputError

UID_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UID_B = "11111111-2222-3333-4444-555555555555"


def domain(
    uid: str = UID_A, *, name: str = "train", namespace: str = "team", mode: str = "Single"
) -> ComputeDomain:
    return ComputeDomain.from_wire(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1},
            "spec": {
                "numNodes": 0,
                "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": mode},
            },
        }
    )


def build(cd: ComputeDomain, mode: DaemonMode = "daemonset", namespace: str = "gpudra") -> Children:
    return desired_children(
        cd, drivers=DriverNames(), driver_namespace=namespace, daemon_image="gpudra:1.0", mode=mode
    )


def opaque(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (config,) = template["spec"]["spec"]["devices"]["config"]
    return config["opaque"]["driver"], config["opaque"]["parameters"]


def test_workload_template_is_named_in_spec_and_configures_the_channel() -> None:
    children = build(domain(mode="All"))
    template = children.workload_template
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"]["name"] == "train-channel"
    assert template["metadata"]["namespace"] == "team"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"
    driver, parameters = opaque(template)
    assert driver == "compute-domain.nvidia.com"
    assert parameters == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": UID_A,
        "allocationMode": "All",
    }
    decode_opaque(parameters)  # NVIDIA's strict decoding accepts it


def test_daemon_template_and_daemon_set_live_in_the_driver_namespace() -> None:
    children = build(domain())
    daemon = children.daemon_template
    assert daemon["metadata"]["namespace"] == "gpudra"
    assert daemon["metadata"]["name"] == f"computedomain-daemon-{UID_A}"
    (request,) = daemon["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "compute-domain-daemon.nvidia.com"
    assert opaque(daemon)[1] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": UID_A,
    }
    ds = children.daemon_set
    assert ds is not None
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["name"] == f"computedomain-daemon-{UID_A}"
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {f"computedomain.gpudra.dev/{UID_A}": "true"}
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == daemon["metadata"]["name"]
    assert pod["containers"][0]["image"] == "gpudra:1.0"
    assert pod["containers"][0]["args"] == ["imex-daemon"]  # gpudra imex-daemon
    assert pod["serviceAccountName"] == "gpudra-imex-daemon"  # manifests/base/rbac-imex-daemon.yaml
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert children.node_label == (f"computedomain.gpudra.dev/{UID_A}", "true")


def test_daemon_pods_get_the_charts_api_server_address_and_pull_secrets() -> None:
    """On a cluster without a service proxy the chart points its pods at the API server, and from a private
    registry it pulls with its secrets; the daemons it runs need the same (GPUDRA_IMEX_DAEMON_ENV and
    GPUDRA_IMEX_DAEMON_IMAGE_PULL_SECRETS)."""
    pods = DaemonPodSettings(
        env=(("KUBERNETES_SERVICE_HOST", "192.0.2.2"), ("KUBERNETES_SERVICE_PORT", "6443")),
        image_pull_secrets=("my-registry",),
    )
    children = desired_children(
        domain(), drivers=DriverNames(), driver_namespace="gpudra", daemon_image="gpudra:1.0", mode="daemonset",
        pods=pods,
    )  # fmt: skip
    assert children.daemon_set is not None
    env = children.daemon_set["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-2:] == [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "192.0.2.2"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    assert env[0]["name"] == "COMPUTE_DOMAIN_UUID"
    pod = children.daemon_set["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "my-registry"}]  # the chart's imagePullSecrets, for its image
    default = build(domain()).daemon_set
    assert default is not None
    assert "KUBERNETES_SERVICE_HOST" not in str(default["spec"]["template"]["spec"]["containers"][0]["env"])


@pytest.mark.parametrize(
    ("driver_namespace", "owned"),
    [
        # cross-namespace owner references make the garbage collector delete the child at once
        ("gpudra", {"train-channel"}),
        ("team", {"train-channel", f"computedomain-daemon-{UID_A}"}),
    ],
)
def test_owner_references_only_within_the_domain_namespace(driver_namespace: str, owned: set[str]) -> None:
    children = build(domain(), namespace=driver_namespace)
    with_owner = set()
    for obj in children.objects():
        meta = obj["metadata"]
        assert meta["labels"]["resource.nvidia.com/computeDomain"] == UID_A
        assert child_selector(UID_A).items() <= meta["labels"].items()
        if "ownerReferences" in meta:
            (ref,) = meta["ownerReferences"]
            assert ref == {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "name": "train",
                "uid": UID_A,
                "controller": True,
                "blockOwnerDeletion": True,
            }
            with_owner.add(meta["name"])
        else:
            assert meta["annotations"] == {"computedomain.gpudra.dev/domain": "team/train"}
    assert with_owner == owned


@pytest.mark.parametrize(("mode", "kinds"), [("daemonset", 3), ("host-managed", 2)])
def test_daemon_set_only_in_daemonset_mode(mode: DaemonMode, kinds: int) -> None:
    children = build(domain(), mode=mode)
    assert len(children.objects()) == kinds
    assert (children.daemon_set is not None) == (mode == "daemonset")


def test_claims_from_templates_name_the_domain_but_are_not_children() -> None:
    for template in (build(domain()).workload_template, build(domain()).daemon_template):
        labels = template["spec"]["metadata"]["labels"]
        assert labels["resource.nvidia.com/computeDomain"] == UID_A
        assert not child_selector(UID_A).items() <= labels.items()


def test_children_are_deterministic() -> None:
    assert build(domain()) == build(domain())


def test_two_domains_on_the_same_nodes_get_disjoint_children_and_labels() -> None:
    a, b = build(domain(UID_A)), build(domain(UID_B, name="eval"))
    assert a.node_label[0] != b.node_label[0]  # both labels fit on one node
    names_a = {(o["kind"], o["metadata"]["name"]) for o in a.objects()}
    names_b = {(o["kind"], o["metadata"]["name"]) for o in b.objects()}
    assert not names_a & names_b
    for children, uid in ((a, UID_A), (b, UID_B)):
        assert children.daemon_set is not None
        pod = children.daemon_set["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {f"computedomain.gpudra.dev/{uid}": "true"}
        # NVIDIA's single-valued node label is not used: it would let one domain evict the other's daemon
        assert "resource.nvidia.com/computeDomain" not in pod["nodeSelector"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"uid": None}, "metadata.uid"),
        ({"namespace": None}, "metadata.namespace"),
    ],
)
def test_incomplete_domain_is_a_clear_error(change: dict[str, Any], needle: str) -> None:
    cd = domain()
    cd = cd.model_copy(update={"metadata": cd.metadata.model_copy(update=change)})
    with pytest.raises(InvalidInputError, match=needle):
        build(cd)


def test_unknown_mode_and_missing_image_are_clear_errors() -> None:
    with pytest.raises(InvalidInputError, match="daemon mode"):
        desired_children(
            domain(),
            drivers=DriverNames(),
            driver_namespace="x",
            daemon_image="i",
            # the ignore below: not a mode, on purpose: it must be refused
            mode="sidecar",  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidInputError, match="image"):
        desired_children(
            domain(), drivers=DriverNames(), driver_namespace="x", daemon_image="", mode="daemonset"
        )


def test_custom_driver_name_is_used_in_configs() -> None:
    children = desired_children(
        domain(),
        drivers=DriverNames(compute_domain="cd.example.com"),
        driver_namespace="gpudra",
        daemon_image="i",
        mode="host-managed",
    )
    assert opaque(children.workload_template)[0] == "cd.example.com"
    assert opaque(children.daemon_template)[0] == "cd.example.com"


def scoped(value: str, uid: str = UID_A) -> ComputeDomain:
    cd = domain(uid)
    return cd.model_copy(
        update={"metadata": cd.metadata.model_copy(update={"annotations": {CHANNEL_SCOPE_ANNOTATION: value}})}
    )


def test_a_podgroup_scoped_domain_publishes_its_channel_for_every_clique_node_and_its_template_asks_for_it() -> (
    None
):
    children = build(scoped("PodGroup"))
    assert children.shared_channel is not None and children.shared_channel in children.objects()
    spec = children.shared_channel["spec"]
    assert children.shared_channel["metadata"]["name"] == spec["pool"]["name"] == f"computedomain-{UID_A}"
    assert "nodeName" not in spec
    assert spec["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.clique", "operator": "Exists"}]}]
    }
    (device,) = spec["devices"]
    assert device["attributes"]["type"] == {"string": "domain-channel"}
    assert device["attributes"]["domainID"] == {"string": UID_A}
    (request,) = children.workload_template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "compute-domain-shared-channel.gpudra.dev"
    assert request["exactly"]["selectors"] == [
        {"cel": {"expression": f"device.attributes['compute-domain.nvidia.com'].domainID == '{UID_A}'"}}
    ]
    # the channel's config is the same as a Pod-scoped domain's
    assert opaque(children.workload_template) == opaque(build(domain()).workload_template)


def test_a_pod_scoped_domain_publishes_no_channel_of_its_own() -> None:
    for cd in (domain(), scoped("Pod")):
        children = build(cd)
        assert children.shared_channel is None
        (request,) = children.workload_template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"] == {"deviceClassName": "compute-domain-default-channel.nvidia.com"}


def test_an_unknown_channel_scope_is_refused_naming_the_annotation_and_the_values() -> None:
    with pytest.raises(InvalidInputError) as info:
        build(scoped("podgroup"))
    assert str(info.value) == (
        f"metadata.annotations[{CHANNEL_SCOPE_ANNOTATION}]: Unsupported value: 'podgroup': supported values: "
        '"Pod", "PodGroup"'
    )


def test_daemon_pods_log_as_the_controller_does() -> None:
    """The chart's ``logFormat`` and ``logLevel`` reach the IMEX daemons through the controller; the daemon env
    the chart or the user sets (GPUDRA_IMEX_DAEMON_ENV) may still say otherwise."""

    def daemon_env_of(settings: ControllerSettings) -> dict[str, str]:
        children = desired_children(
            domain(), drivers=DriverNames(), driver_namespace="gpudra", daemon_image="gpudra:1.0",
            mode="daemonset", pods=DaemonPodSettings(env=daemon_env(settings)),
        )  # fmt: skip
        assert children.daemon_set is not None
        env = children.daemon_set["spec"]["template"]["spec"]["containers"][0]["env"]
        return {e["name"]: e["value"] for e in env if e["name"].startswith("GPUDRA_LOG")}

    assert daemon_env_of(ControllerSettings(log_format="json", log_level="DEBUG")) == {
        "GPUDRA_LOG_FORMAT": "json",
        "GPUDRA_LOG_LEVEL": "DEBUG",
    }
    assert daemon_env_of(ControllerSettings()) == {}  # the defaults: the daemon's own are the same
    own = ControllerSettings(log_format="json", imex_daemon_env={"GPUDRA_LOG_FORMAT": "console"})
    assert daemon_env_of(own) == {"GPUDRA_LOG_FORMAT": "console"}
