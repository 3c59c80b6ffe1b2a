"""The device nodes of a real node's simulated GPUs.

A container runtime injects a CDI device node by reading it on the host (``hostPath``, under the agent's driver
root) and creating it in the container at ``path``. A real GPU node has them from the NVIDIA driver; a simulated
one gets them here, before its agent starts: under the node's driver root (``/run/nvidia/driver`` in the node,
``GPUDRA_DRIVER_ROOT``), one character device for every path the agent's CDI specs may name: the control nodes,
each GPU's ``/dev/nvidia<minor>``, and every MIG access capability of each GPU (``/dev/nvidia-caps/nvidia-cap<N>``).
They carry the numbers of ``/dev/null`` (1, 3): a container that opens one reads nothing and writes nowhere, and no
real device of the machine is ever named.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from gpudra.agent.cdi import CONTROL_DEVICE_NODES
from gpudra.agent.prepareplan import gpu_cap_minors

NULL_DEVICE = os.makedev(1, 3)


def simulated_device_paths(gpu_minors: Iterable[int]) -> list[str]:
    """Every /dev path the CDI specs of GPUs with these minors may name."""
    paths = [node.path for node in CONTROL_DEVICE_NODES]
    for minor in sorted(gpu_minors):
        paths.append(f"/dev/nvidia{minor}")
        paths += [f"/dev/nvidia-caps/nvidia-cap{cap}" for cap in gpu_cap_minors(minor)]
    return paths


def create_device_nodes(driver_root: Path, paths: Iterable[str]) -> int:
    """Character devices (1, 3), mode 0666 as the NVIDIA driver's, at ``driver_root`` + each path; how many were
    created (existing ones are kept)."""
    created = 0
    for path in paths:
        node = driver_root / path.lstrip("/")
        if node.exists():
            continue
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, stat.S_IFCHR | 0o666, NULL_DEVICE)
        os.chmod(node, 0o666)  # mknod's mode passes through the umask
        created += 1
    return created
