"""The simulated fleet of ``gpudra up``: ``--nodes PROFILE:COUNT,...`` (a fleet file written short, see
:mod:`gpudra.cluster.sim.fleetfile`) and the Node object of each simulated node."""

from __future__ import annotations

import platform
from typing import Any

from gpudra.cluster.sim.fleetfile import FleetNode, fleet_of_groups
from gpudra.errors import ConfigurationError
from gpudra.reports import PROFILE_LABEL

DEFAULT_FLEET = "dgx-h100:2,dgx-a100:1,l4x4:1"
SIMULATED_OS_IMAGE = "gpudra simulated node"
SIMULATED_RUNTIME = "gpudra://simulated"
"""The container runtime a simulated node reports: none runs containers (``kubectl get nodes -o wide``)."""

__all__ = ["DEFAULT_FLEET", "FleetNode", "node_object", "parse_fleet"]


def parse_fleet(spec: str, known_profiles: set[str]) -> list[FleetNode]:
    """Parse ``PROFILE:COUNT[,PROFILE:COUNT...]``; node names are ``<profile>-<i>``."""
    groups: list[tuple[str, int]] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        profile, sep, count_text = part.partition(":")
        profile = profile.strip()
        if profile not in known_profiles:
            raise ConfigurationError(
                f"--nodes: unknown node profile {profile!r}; known: {', '.join(sorted(known_profiles))}"
            )
        if any(profile == seen for seen, _ in groups):
            raise ConfigurationError(
                f"--nodes: profile {profile!r} is listed twice; give one count per profile"
            )
        try:
            count = int(count_text) if sep else 1
        except ValueError:
            raise ConfigurationError(f"--nodes: {part!r}: the count after ':' must be a number") from None
        if not 1 <= count <= 10_000:
            raise ConfigurationError(f"--nodes: {part!r}: count must be between 1 and 10000")
        groups.append((profile, count))
    if not groups:
        raise ConfigurationError("--nodes: no nodes given (example: --nodes dgx-h100:2,l4x4:1)")
    return fleet_of_groups(groups)


def node_object(node: FleetNode, *, kubelet_version: str = "v1.34.0-gpudra") -> dict[str, Any]:
    """A Ready Node as a kubelet would register it, with the fleet's labels and taints."""
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [dict(t) for t in node.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                PROFILE_LABEL: node.profile,
                **node.labels,
                "kubernetes.io/hostname": node.name,
            },
        },
        "spec": spec,
        "status": {
            "capacity": {"cpu": "128", "memory": "2Ti", "pods": "110"},
            "allocatable": {"cpu": "126", "memory": "2000Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated"}
            ],
            "nodeInfo": {
                "kubeletVersion": kubelet_version,
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": SIMULATED_OS_IMAGE,
                "kernelVersion": platform.release(),  # the host's: the node's agent runs on it
                "containerRuntimeVersion": SIMULATED_RUNTIME,
            },
        },
    }
