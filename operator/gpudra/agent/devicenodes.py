"""Where the container runtime finds the NVIDIA device nodes the agent's CDI specs name, and whether they are there.

MIG devices' access capabilities (``/dev/nvidia-caps/nvidia-cap<minor>``) are named by number, with the kernel's
``nvidia-caps`` major (:func:`mig_caps_major`): the runtime makes them in the container, as NVIDIA's driver has them.

The device root is the driver root (``driverRoot``) when it holds a ``dev`` directory, and ``/`` when it does not:
NVIDIA's driver chooses it so, and a node whose driver root has no ``dev`` of its own (a driver container that
shares the host's ``/dev``) then works with either driver. The agent sees the host's driver root where its pod
mounts it (``GPUDRA_DRIVER_ROOT_MOUNT``; the chart mounts it at ``/driver-root``), or, run on the host, at the root
itself.

Before the agent offers the kubelet anything it waits until ``nvidiactl`` and each GPU's ``nvidia<minor>`` are there:
a CDI spec that names a node the host lacks stops every container given that GPU at its creation, with an error of
containerd's that names neither gpudra nor ``driverRoot``. It says what is missing in its log and in a Warning Event
``DeviceNodesMissing`` on its Node. The UVM nodes are only warned about: the NVIDIA container
toolkit makes them when it starts a GPU container (the agent's own), and a node that has none yet is not stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudra.agent.cdi import CONTROL_DEVICE_NODES
from gpudra.config import AgentSettings
from gpudra.telemetry import get_logger

log = get_logger(__name__)
HOST_ROOT = Path("/")
PROC_DEVICES = Path("/proc/devices")
CAPS_DEVICES = "nvidia-caps"
"""The /proc/devices name of the NVIDIA capability devices (/dev/nvidia-caps/nvidia-cap<minor>)."""
UVM_NODES = tuple(n.path for n in CONTROL_DEVICE_NODES if n.path.startswith("/dev/nvidia-uvm"))
CHECK_SECONDS = 5.0
"""How often the agent looks again while device nodes are missing."""
REPEAT_SECONDS = 60.0
"""How often it says again that it still waits (the first time at once)."""


@dataclass(frozen=True)
class DeviceRoot:
    """``host``: the root the CDI specs name the device nodes under, on the host; ``seen_at``: where this process
    sees that root."""

    host: Path
    seen_at: Path

    def missing(self, paths: Iterable[str]) -> list[str]:
        """The host's paths of those of ``paths`` (``/dev/...``) that are not there."""
        return [str(self.host / p.lstrip("/")) for p in paths if not (self.seen_at / p.lstrip("/")).exists()]


def device_root(driver_root: Path, mount: Path | None) -> DeviceRoot:
    """The driver root when it holds a ``dev`` directory, as seen at ``mount`` (``None``: at the root itself),
    else the host's ``/`` (seen at this process's own ``/``: a privileged container has the host's devices)."""
    seen = mount if mount is not None else driver_root
    if (seen / "dev").is_dir():
        return DeviceRoot(driver_root, seen)
    return DeviceRoot(HOST_ROOT, HOST_ROOT)


def character_major(name: str, proc_devices: Path = PROC_DEVICES) -> int | None:
    """The major the kernel gave the character devices ``name`` (their line in /proc/devices); None when it has
    none (no such driver loaded, or a simulated node) or the file cannot be read."""
    try:
        lines = proc_devices.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1] == name and parts[0].isdigit():
            return int(parts[0])
    return None


def mig_caps_major(settings: AgentSettings, proc_devices: Path = PROC_DEVICES) -> int | None:
    """The major MIG capability nodes are named with in CDI specs: the setting, else the kernel's with NVML;
    None (named by host path) with simulated GPUs, or where the kernel has no ``nvidia-caps`` (said once)."""
    if settings.mig_caps_major is not None or settings.backend == "simulated":
        return settings.mig_caps_major
    major = character_major(CAPS_DEVICES, proc_devices)
    if major is None:
        log.warning(
            "no nvidia-caps devices",
            problem=f"{proc_devices} has no {CAPS_DEVICES} line: CDI specs name MIG devices' capability nodes by "
            "their path on the host, which must have them (nvidia-modprobe -f makes them)",
        )
    return major


def required_nodes(minors: Iterable[int]) -> list[str]:
    """The device nodes every container given one of these GPUs has: the control node and the GPUs' own."""
    return ["/dev/nvidiactl", *(f"/dev/nvidia{m}" for m in sorted(set(minors)))]


def missing_message(root: DeviceRoot, driver_root: Path, missing: Sequence[str]) -> str:
    where = "" if root.seen_at == root.host else f", looked for at {root.seen_at} in the agent's container"
    return (
        f"the node has no {', '.join(missing)}{where}: a container given these GPUs could not start, so the agent "
        f"offers the kubelet nothing until they are there (driverRoot {driver_root}: / for a driver installed on "
        "the host, /run/nvidia/driver under the GPU Operator's driver container)"
    )


async def wait_for_device_nodes(
    root: DeviceRoot,
    driver_root: Path,
    minors: Sequence[int],
    *,
    report: Callable[[str], Awaitable[None]] | None = None,
    check_seconds: float = CHECK_SECONDS,
) -> None:
    """Return once the GPUs' device nodes are there, saying what is missing meanwhile (at once, then every
    ``REPEAT_SECONDS``: in the log, and to ``report``, the Node's Event); then warn once about missing UVM nodes."""
    said = float("-inf")
    while missing := root.missing(required_nodes(minors)):
        if time.monotonic() - said >= REPEAT_SECONDS:
            problem = missing_message(root, driver_root, missing)
            log.warning("waiting for the GPUs' device nodes", problem=problem)
            if report is not None:
                await report(problem)
            said = time.monotonic()
        await asyncio.sleep(check_seconds)
    if said > float("-inf"):
        log.info("the GPUs' device nodes are there", device_root=str(root.host))
    if uvm := root.missing(UVM_NODES):
        log.warning(
            "UVM device nodes missing",
            problem=f"the node has no {', '.join(uvm)}: a container given a GPU starts once they are there "
            "(the NVIDIA container toolkit, or nvidia-modprobe -u -c=0 on the node, makes them)",
        )
