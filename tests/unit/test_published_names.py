"""Every attribute and capacity name gpudra publishes passes the rules Kubernetes 1.38 adds, as well as those every
supported API server applies.

1.38 (k8s.io/dynamic-resource-allocation v0.38.0-beta.0, resourceslice/validation.go, kubernetes#142218): the
kubelet-plugin helper refuses to publish a name qualified with the driver's own domain (``gpu.nvidia.com/uuid``:
"use unqualified "uuid", the driver name is added implicitly"), because kube-scheduler and CEL would then see two
names for one attribute. kube-apiserver 1.38.0-beta.0 (pkg/apis/resource/validation, kubernetes#141644) refuses a
name with more than one '/' ("must not contain more than one slash"), which 1.34 to 1.37 accepted unchecked.

The names are collected from what the agents publish: every GPU model of the simulated catalog as whole GPUs (with
time-slicing, passthrough and NVLink peers on), every built-in node profile (static MIG layouts, a GB200 clique),
every MIG-capable model with dynamic MIG, and the ComputeDomain driver's channel and daemon devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache

import pytest

from gpudra.agent.computedomain.driver import published_devices
from gpudra.api.dra import Device
from gpudra.cluster.apiserver.validation.resourceclaims import qualified
from gpudra.computedomain.clique import NodeClique
from gpudra.config import AgentSettings
from gpudra.devices.offer import NodeState, OfferSettings, node_offer
from gpudra.hardware.gpus.catalog import load_catalog
from gpudra.hardware.simulated import empty_mig, simulated_backend
from gpudra.hardware.simulated.profiles import NODE_PROFILES, NodeProfile, node_profile

GPU_DRIVER = str(AgentSettings.model_fields["driver_name"].default)
DOMAIN_DRIVER = str(AgentSettings.model_fields["compute_domain_driver_name"].default)

NVIDIA_NAMES = {
    # kubernetes-sigs/dra-driver-nvidia-gpu's ResourceSlices (GPU, MIG, VFIO): the names gpudra keeps as they are
    "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion",
    "cudaDriverVersion", "addressingMode", "parentUUID", "profile", "deviceID", "vendorID", "iommuFDEnabled",
    "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode",
    "memory", "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines",
    "addressableMemory", "id", "cliqueID",
}  # fmt: skip


def rule_138_problems(driver: str, name: str) -> list[str]:
    """Why Kubernetes 1.38 refuses ``name`` on a device of ``driver``: the helper's own-domain rule and the API
    server's one-slash rule."""
    problems = []
    domain, slash, identifier = name.partition("/")
    if slash and domain == driver:
        problems.append(f'use unqualified "{identifier}", the driver name is added implicitly')
    if name.count("/") > 1:
        problems.append("must not contain more than one slash")
    return problems


def model_profiles() -> Iterator[NodeProfile]:
    """One node of whole GPUs per catalog model (NVSwitch, so NVLink peers are published), then every built-in
    node profile as it is."""
    base = node_profile("dgx-h100")
    for model_id in sorted(load_catalog().models):
        yield dataclasses.replace(base, name=f"names-{model_id.lower()}", model_id=model_id)
    yield from NODE_PROFILES.values()


@cache
def published() -> dict[tuple[str, str], set[str]]:
    """(driver, name) -> where it is published ("<profile>/<device>" of its first device)."""
    found: dict[tuple[str, str], set[str]] = {}

    def note(driver: str, where: str, devices: list[Device]) -> None:
        for device in devices:
            for name in [*(device.attributes or {}), *(device.capacity or {})]:
                found.setdefault((driver, name), set()).add(f"{where}/{device.name}")

    every = OfferSettings(shared_gpu_replicas=2, nvlink_peers=True)
    for profile in model_profiles():
        backend = simulated_backend(profile, "n1").backend
        offered = node_offer(backend.read_inventory(), NodeState(pci_gpus=backend.pci_gpus()), every)
        note(GPU_DRIVER, profile.name, offered.devices)
        inventory = backend.read_inventory()
        if any(gpu.mig_capable for gpu in inventory.gpus):
            empty_mig(backend)
            inventory = backend.read_inventory()
            dynamic = {gpu.uuid: backend.mig_profiles(gpu.index) for gpu in inventory.gpus if gpu.mig_capable}
            note(
                GPU_DRIVER,
                f"{profile.name}+dynamic-mig",
                node_offer(inventory, NodeState(dynamic), every).devices,
            )
    note(
        DOMAIN_DRIVER,
        "computedomain",
        published_devices(NodeClique("8a1f3c52-0c5d-4f8e-9a57-3f9e4c2d1b6a.1")),
    )
    return found


def test_the_collection_reaches_every_kind_of_device_gpudra_publishes() -> None:
    names = {name for _, name in published()}
    # whole GPUs, MIG (static: memory slices), passthrough, time-slicing, NVLink, a GB200 clique, ComputeDomains
    for name in (
        "uuid",
        "profile",
        "memorySlice0",
        "iommuFDEnabled",
        "gpudra.dev/shares",
        "gpudra.dev/nvlinkPeers",
    ):
        assert name in names
    assert (GPU_DRIVER, "gpudra.dev/cliqueID") in published()
    assert (DOMAIN_DRIVER, "cliqueID") in published()
    dynamic_only = {n for (_, n), where in published().items() if all("+dynamic-mig" in w for w in where)}
    assert dynamic_only <= {n for n in names if n.startswith("memorySlice")}  # dynamic MIG adds nothing new


def test_no_published_name_breaks_a_rule_of_kubernetes_1_38() -> None:
    broken = {
        f"{driver} {name} ({sorted(where)[0]}): {'; '.join(problems)}"
        for (driver, name), where in published().items()
        if (problems := rule_138_problems(driver, name))
    }
    assert not broken


def test_every_published_name_is_one_kube_apiserver_accepts() -> None:
    refused = {
        f"{name}: {[str(e) for e in errors]}"
        for _, name in published()
        if (errors := qualified(name, "spec.devices[0].attributes"))
    }
    assert not refused


def test_nvidia_named_attributes_keep_nvidias_names_and_gpudras_own_stay_in_their_domain() -> None:
    names = {name for _, name in published()}
    ours = {n for n in names if n not in NVIDIA_NAMES and not n.startswith("memorySlice")}
    assert ours and all(n.startswith("gpudra.dev/") for n in ours)
    assert "resource.kubernetes.io/numaNode" in names  # the standard name (GA in 1.37), not numa or numaNode


@pytest.mark.parametrize(
    ("driver", "name", "refused"),
    [
        ("gpu.nvidia.com", "gpu.nvidia.com/uuid", True),
        ("gpu.nvidia.com", "uuid", False),
        ("gpu.nvidia.com", "gpudra.dev/nvlinkCount", False),
        ("gpudra.dev", "gpudra.dev/nvlinkCount", True),  # a driver renamed to gpudra's extension domain
        ("gpu.nvidia.com", "gpudra.dev/a/b", True),
        ("compute-domain.nvidia.com", "compute-domain.nvidia.com/cliqueID", True),
    ],
)
def test_the_1_38_rules_as_kubernetes_words_them(driver: str, name: str, refused: bool) -> None:
    assert bool(rule_138_problems(driver, name)) is refused
