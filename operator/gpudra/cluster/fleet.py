"""The simulated fleet of ``gpudra up``: which nodes, of which profile, with which names, and their Node objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.errors import ConfigurationError
from gpudra.reports import PROFILE_LABEL

DEFAULT_FLEET = "dgx-h100:2,dgx-a100:1,l4x4:1"


@dataclass(frozen=True)
class FleetNode:
    name: str
    profile: str
    fleet_index: int  # position among nodes of the same profile (e.g. the tray number in a GB200 rack)


def parse_fleet(spec: str, known_profiles: set[str]) -> list[FleetNode]:
    """Parse ``PROFILE:COUNT[,PROFILE:COUNT...]``; node names are ``<profile>-<i>``."""
    nodes: list[FleetNode] = []
    seen: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        profile, sep, count_text = part.partition(":")
        profile = profile.strip()
        if profile not in known_profiles:
            raise ConfigurationError(
                f"--nodes: unknown node profile {profile!r}; known: {', '.join(sorted(known_profiles))}"
            )
        if profile in seen:
            raise ConfigurationError(
                f"--nodes: profile {profile!r} is listed twice; give one count per profile"
            )
        seen.add(profile)
        try:
            count = int(count_text) if sep else 1
        except ValueError:
            raise ConfigurationError(f"--nodes: {part!r}: the count after ':' must be a number") from None
        if not 1 <= count <= 10_000:
            raise ConfigurationError(f"--nodes: {part!r}: count must be between 1 and 10000")
        nodes.extend(FleetNode(f"{profile}-{i}", profile, i) for i in range(count))
    if not nodes:
        raise ConfigurationError("--nodes: no nodes given (example: --nodes dgx-h100:2,l4x4:1)")
    return nodes


def node_object(node: FleetNode, *, kubelet_version: str = "v1.34.0-gpudra") -> dict[str, Any]:
    """A Ready Node as a kubelet would register it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                PROFILE_LABEL: node.profile,
            },
        },
        "spec": {},
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
            },
        },
    }
