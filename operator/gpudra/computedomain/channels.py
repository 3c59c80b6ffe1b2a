"""What the compute-domain kubelet plugin publishes, and what it injects for a prepared channel claim.

Devices (driver compute-domain.nvidia.com, NVIDIA's names): ``channel-0`` {type: "channel", id: 0}, the
device the domain's workload claims allocate (class compute-domain-default-channel.nvidia.com selects
type 'channel' and id 0), and ``daemon-0`` {type: "daemon", id: 0} for the daemon pods' claims. Attribute
keys are bare, like every driver-own attribute. The device is a ticket into the domain, not the channel
number: which channel(s) a claim receives is decided at prepare from the domain's channel lease (see
``index``): channel 0 in daemonset mode, the domain's leased channel in host-managed mode.

Injection (CDI container edits, as plain data for the CDI writer): Single mode one device node
``/dev/nvidia-caps-imex-channels/channel<N>``; All mode every channel of the lease (2048 by default). The
character device's major comes from the node's /proc/devices line ``nvidia-caps-imex-channels`` (it differs
between nodes, so the caller reads it); the minor is the channel number.

Readiness: a channel is useless until the node's IMEX daemon for the domain is Ready (CUDA's import calls
fail otherwise), so ``check_daemon_ready`` raises a retryable DaemonNotReadyError naming the node, the
domain and what the daemon said; the kubelet retries the prepare, and the pod starts once it is Ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpudra.api.computedomain import ComputeDomainDaemonInfo
from gpudra.api.dra import Device, DeviceAttribute
from gpudra.api.nvidia import ComputeDomainChannelConfig
from gpudra.computedomain.index import IMEX_CHANNEL_COUNT, ChannelLease
from gpudra.errors import DaemonNotReadyError, InvalidInputError

CHANNEL_DEVICE: Final = "channel-0"
DAEMON_DEVICE: Final = "daemon-0"
CHANNEL_DIR: Final = "/dev/nvidia-caps-imex-channels"
PROC_DEVICES_NAME: Final = "nvidia-caps-imex-channels"
"""The /proc/devices entry whose number is the channels' character-device major."""


def compute_domain_devices(*, shared_channel: bool = False) -> list[Device]:
    """The devices of a node's compute-domain ResourceSlice, in publishing order.

    ``shared_channel``: mark ``channel-0`` allowMultipleAllocations, so that several pods of one domain on
    one node each get their claim (Kubernetes 1.34+ with DRAConsumableCapacity; without the gate the API
    server drops the field and one claim per node can hold the channel, as with NVIDIA's driver).
    """
    channel = Device(
        name=CHANNEL_DEVICE,
        attributes={"type": DeviceAttribute(string="channel"), "id": DeviceAttribute(int_=0)},
        allow_multiple_allocations=True if shared_channel else None,
    )
    daemon = Device(
        name=DAEMON_DEVICE,
        attributes={"type": DeviceAttribute(string="daemon"), "id": DeviceAttribute(int_=0)},
    )
    return [channel, daemon]


@dataclass(frozen=True, slots=True)
class ChannelNode:
    """One IMEX channel device node for a container."""

    path: str
    major: int
    minor: int

    def to_json(self) -> dict[str, Any]:
        """CDI ``deviceNodes[]`` form."""
        return {"path": self.path, "type": "c", "major": self.major, "minor": self.minor}


@dataclass(frozen=True, slots=True)
class ChannelInjection:
    """The container edits of one prepared channel claim."""

    domain_id: str
    channels: tuple[int, ...]
    device_nodes: tuple[ChannelNode, ...]

    def to_json(self) -> dict[str, Any]:
        """CDI ``containerEdits`` form."""
        return {"deviceNodes": [node.to_json() for node in self.device_nodes]}


def channel_path(channel: int) -> str:
    return f"{CHANNEL_DIR}/channel{channel}"


def channel_injection(
    config: ComputeDomainChannelConfig,
    *,
    major: int,
    lease: ChannelLease | None = None,
    channel_count: int = IMEX_CHANNEL_COUNT,
) -> ChannelInjection:
    """The device nodes a channel claim gets: Single one channel (the lease's, 0 by default), All every
    channel (the lease's, all ``channel_count`` by default)."""
    if major < 0:
        raise InvalidInputError(f"the IMEX channel device major must not be negative, got {major}")
    mode = config.normalized().allocation_mode
    if mode == "All":
        ids = tuple(lease.ids) if lease is not None and lease.count > 1 else tuple(range(channel_count))
    else:
        ids = (lease.first if lease is not None else 0,)
    if any(not 0 <= i < channel_count for i in ids):
        raise InvalidInputError(
            f"IMEX channel(s) {[i for i in ids if not 0 <= i < channel_count]} are outside 0..{channel_count - 1}"
        )
    nodes = tuple(ChannelNode(path=channel_path(i), major=major, minor=i) for i in ids)
    return ChannelInjection(domain_id=config.domain_id, channels=ids, device_nodes=nodes)


def check_daemon_ready(
    domain_id: str, node_name: str, daemons: Sequence[ComputeDomainDaemonInfo], *, detail: str = ""
) -> ComputeDomainDaemonInfo:
    """The Ready daemon of ``domain_id`` on ``node_name`` among the domain's registered daemons; raise a
    retryable DaemonNotReadyError (saying what is awaited) while there is none."""
    mine = [d for d in daemons if d.node_name == node_name]
    ready = [d for d in mine if d.status == "Ready"]
    if ready:
        return ready[0]
    said = f" ({detail})" if detail else ""
    if not mine:
        raise DaemonNotReadyError(
            f"waiting for the IMEX daemon of ComputeDomain {domain_id} on node {node_name}: it has not "
            f"registered yet{said}; the channel is prepared once it is Ready"
        )
    index = "before its index is written" if mine[0].index is None else f"with index {mine[0].index}"
    raise DaemonNotReadyError(
        f"waiting for the IMEX daemon of ComputeDomain {domain_id} on node {node_name}: registered in clique "
        f"{mine[0].clique_id or '(none)'} {index} but not Ready{said}; the channel is prepared once it is Ready"
    )
