"""The compute-domain plugin's devices, channel injection Single vs All, and the daemon readiness rule."""

from __future__ import annotations

import pytest

from gpudra.api.computedomain import ComputeDomainDaemonInfo
from gpudra.api.dra import ResourcePool, ResourceSlice, ResourceSliceSpec
from gpudra.api.nvidia import ComputeDomainChannelConfig
from gpudra.computedomain.channels import channel_injection, check_daemon_ready, compute_domain_devices
from gpudra.computedomain.index import ChannelLease
from gpudra.errors import DaemonNotReadyError, InvalidInputError

MAJOR = 498


def config(mode: str | None) -> ComputeDomainChannelConfig:
    return ComputeDomainChannelConfig.model_validate({"domainID": "uid-a", "allocationMode": mode})


def test_devices_match_nvidia_names_and_attributes() -> None:
    devices = compute_domain_devices()
    slice_ = ResourceSlice(
        spec=ResourceSliceSpec(
            driver="compute-domain.nvidia.com",
            pool=ResourcePool(name="node-1", generation=1, resource_slice_count=1),
            node_name="node-1",
            devices=devices,
        )
    )
    wire = slice_.to_wire()["spec"]["devices"]
    assert wire == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    assert compute_domain_devices(shared_channel=True)[0].allow_multiple_allocations is True


@pytest.mark.parametrize(
    ("mode", "lease", "expected"),
    [
        (None, None, [0]),  # Single is the default
        ("Single", None, [0]),
        ("Single", ChannelLease(5), [5]),  # host-managed: the domain's leased channel
        ("All", None, list(range(2048))),
        ("All", ChannelLease(0, 2048), list(range(2048))),
    ],
)
def test_injection_single_vs_all(mode: str | None, lease: ChannelLease | None, expected: list[int]) -> None:
    injection = channel_injection(config(mode), major=MAJOR, lease=lease)
    assert list(injection.channels) == expected
    nodes = injection.to_json()["deviceNodes"]
    assert len(nodes) == len(expected)
    assert nodes[0] == {
        "path": f"/dev/nvidia-caps-imex-channels/channel{expected[0]}",
        "type": "c",
        "major": MAJOR,
        "minor": expected[0],
    }
    assert injection.domain_id == "uid-a"


def test_injection_rejects_channels_outside_the_node_range() -> None:
    with pytest.raises(InvalidInputError, match="outside"):
        channel_injection(config("Single"), major=MAJOR, lease=ChannelLease(4), channel_count=4)


def daemon(node: str, status: str) -> ComputeDomainDaemonInfo:
    return ComputeDomainDaemonInfo.model_validate(
        {"nodeName": node, "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 2, "status": status}
    )


@pytest.mark.parametrize(
    ("daemons", "needle"),
    [
        ([], "has not registered yet"),
        ([daemon("node-2", "Ready")], "has not registered yet"),
        ([daemon("node-1", "NotReady")], "index 2 but not Ready"),
    ],
)
def test_prepare_waits_for_the_node_daemon(daemons: list[ComputeDomainDaemonInfo], needle: str) -> None:
    with pytest.raises(DaemonNotReadyError, match=needle) as caught:
        check_daemon_ready("uid-a", "node-1", daemons)
    assert caught.value.retryable
    assert "node-1" in str(caught.value) and "uid-a" in str(caught.value)


def test_ready_daemon_lets_prepare_go_on() -> None:
    assert check_daemon_ready("uid-a", "node-1", [daemon("node-1", "Ready")]).node_name == "node-1"
