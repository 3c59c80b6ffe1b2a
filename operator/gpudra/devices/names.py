"""Device names as NVIDIA's driver publishes them, and the order devices are listed in.

Names are part of the compatibility contract: users pin devices by name in claims and scripts, and the
checkpoint of a prepared claim records them. ``gpu-<minor>`` for a full GPU; ``gpu-vfio-<i>`` for a GPU offered
for passthrough, ``<i>`` its position among the node's GPUs in PCI address order;
``gpu-<parentMinor>-mig-<profile>-<giProfileId>-<placementStart>`` for a MIG device, where the profile is
lower-cased, loses its dots, and has every other character that is not a letter, digit or dash replaced by a
dash (so "1g.10gb+me" becomes "1g10gb-me").
"""

from __future__ import annotations

import re

_NOT_DNS = re.compile(r"[^a-z0-9-]")
_DIGITS = re.compile(r"(\d+)")
_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


def gpu_device_name(minor: int) -> str:
    """The name of a full GPU: ``gpu-<minor>`` (the /dev/nvidia<minor> number, not the NVML index)."""
    return f"gpu-{minor}"


def vfio_device_name(pci_index: int) -> str:
    """The name of a passthrough device: ``gpu-vfio-<i>``, the GPU's position in PCI address order (NVIDIA's
    name: the minor is unknown while vfio-pci holds the GPU)."""
    return f"gpu-vfio-{pci_index}"


def mig_profile_slug(profile: str) -> str:
    """The profile as it appears inside a device name: "1g.5gb" -> "1g5gb", "1g.10gb+me" -> "1g10gb-me"."""
    slug = _NOT_DNS.sub("-", profile.lower().replace(".", ""))
    return slug.strip("-")


def mig_device_name(parent_minor: int, profile: str, gi_profile_id: int, placement_start: int) -> str:
    """The name of a MIG device, e.g. ``gpu-0-mig-1g5gb-19-0``.

    ``gi_profile_id`` is the GPU-instance profile id nvidia-smi prints (19 for 1g on A100/H100), not the NVML
    constant; ``placement_start`` is the first memory slice the instance occupies.
    """
    return f"gpu-{parent_minor}-mig-{mig_profile_slug(profile)}-{gi_profile_id}-{placement_start}"


def parse_mig_device_name(name: str) -> tuple[int, int, int] | None:
    """(parent minor, GI profile id, placement start) of a MIG device name, or None for any other name."""
    match = _MIG_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(3)), int(match.group(4))


def device_sort_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: numbers compare as numbers, so gpu-2 comes before gpu-10 and, on one GPU, smaller MIG
    profiles (1g...) come before larger ones. The scheduler takes the first device that fits, so this order
    also makes it prefer small devices and low GPU numbers."""
    parts = _DIGITS.split(name)
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in parts if part)
