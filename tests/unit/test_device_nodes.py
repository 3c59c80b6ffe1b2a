"""Where CDI specs name the NVIDIA device nodes on the host, and the agent's wait for them at start.

NVIDIA's driver names them under the driver root only when the driver root holds a ``dev`` directory, else under
``/``; gpudra named them under the driver root always, so a ``driverRoot: /run/nvidia/driver`` copied from a guide
onto a node whose driver container shares the host's ``/dev`` stopped every GPU container at its creation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.testing import capture_logs

from gpudra.agent.devicenodes import (
    DeviceRoot,
    character_major,
    device_root,
    mig_caps_major,
    required_nodes,
    wait_for_device_nodes,
)
from gpudra.config import AgentSettings
from gpudra.testing import eventually


def make_nodes(root: Path, *names: str) -> None:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / "dev" / name).touch()


def test_the_driver_root_holds_the_nodes_only_when_it_has_a_dev_directory(tmp_path: Path) -> None:
    mount = tmp_path / "driver-root"
    mount.mkdir()
    driver_root = Path("/run/nvidia/driver")
    assert device_root(driver_root, mount) == DeviceRoot(Path("/"), Path("/"))
    (mount / "dev").mkdir()
    assert device_root(driver_root, mount) == DeviceRoot(driver_root, mount)
    # run on the host, the agent sees the driver root where it is
    assert device_root(mount, None) == DeviceRoot(mount, mount)
    assert device_root(Path("/"), None) == DeviceRoot(Path("/"), Path("/"))


def test_what_is_missing_is_named_as_the_host_has_it(tmp_path: Path) -> None:
    make_nodes(tmp_path, "nvidiactl", "nvidia0")
    root = DeviceRoot(Path("/run/nvidia/driver"), tmp_path)
    assert required_nodes([3, 0, 3]) == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia3"]
    assert root.missing(required_nodes([0, 3])) == ["/run/nvidia/driver/dev/nvidia3"]


async def test_the_agent_waits_for_the_gpus_nodes_and_says_what_is_missing(tmp_path: Path) -> None:
    make_nodes(tmp_path, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0")
    root = DeviceRoot(Path("/run/nvidia/driver"), tmp_path)
    with capture_logs() as logs:
        waiting = asyncio.create_task(
            wait_for_device_nodes(root, Path("/run/nvidia/driver"), [0, 1], check_seconds=0.01)
        )
        said = await eventually(
            lambda: [e["problem"] for e in logs if e["event"] == "waiting for the GPUs' device nodes"],
            what="the agent says what it waits for",
        )
        assert not waiting.done()
        assert "the node has no /run/nvidia/driver/dev/nvidia1, looked for at " + str(tmp_path) in said[0]
        assert "driverRoot /run/nvidia/driver" in said[0]
        make_nodes(tmp_path, "nvidia1")
        await asyncio.wait_for(waiting, timeout=10)
    # said once (not at every look), then that they came; no UVM warning, as those are there
    assert [e["event"] for e in logs] == [
        "waiting for the GPUs' device nodes",
        "the GPUs' device nodes are there",
    ]


async def test_missing_uvm_nodes_are_warned_about_not_waited_for(tmp_path: Path) -> None:
    make_nodes(tmp_path, "nvidiactl", "nvidia0")
    with capture_logs() as logs:
        await asyncio.wait_for(
            wait_for_device_nodes(DeviceRoot(Path("/"), tmp_path), Path("/"), [0]), timeout=10
        )
    (warning,) = logs  # nothing waited for
    assert warning["event"] == "UVM device nodes missing"
    assert warning["problem"].startswith("the node has no /dev/nvidia-uvm, /dev/nvidia-uvm-tools:")


PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps\n508 nvidia-caps-imex-channels\n"


def test_the_kernels_major_of_a_device_name(tmp_path: Path) -> None:
    proc = tmp_path / "devices"
    proc.write_text(PROC_DEVICES)
    assert character_major("nvidia-caps", proc) == 234
    assert character_major("nvidia-caps-imex-channels", proc) == 508
    assert character_major("nvidia-uvm", proc) is None
    assert character_major("nvidia-caps", tmp_path / "absent") is None


def test_mig_capabilities_are_numbered_with_nvml_and_named_by_path_when_simulated(tmp_path: Path) -> None:
    proc = tmp_path / "devices"
    proc.write_text(PROC_DEVICES)
    assert mig_caps_major(AgentSettings(node_name="n", backend="nvml"), proc) == 234
    assert mig_caps_major(AgentSettings(node_name="n", backend="simulated"), proc) is None
    assert mig_caps_major(AgentSettings(node_name="n", backend="simulated", mig_caps_major=7), proc) == 7
    proc.write_text("Character devices:\n195 nvidia\n")
    with capture_logs() as logs:
        assert mig_caps_major(AgentSettings(node_name="n", backend="nvml"), proc) is None
    (said,) = logs
    assert said["event"] == "no nvidia-caps devices"
    assert said["problem"].startswith(f"{proc} has no nvidia-caps line")
