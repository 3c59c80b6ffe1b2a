"""`gpudra agent` on a node it cannot serve stops at start with one line that says why and what to look at, exit
status 2, before it offers the kubelet anything:

- the NVIDIA driver cannot be used (no libnvidia-ml in its container, the kernel module not loaded, no permission
  on the device nodes). It used to start its parts, log a warning for some, and end in an 80-line exception group
  traceback from the health watcher: what a pod of a Helm install on a node without the driver printed in a crash
  loop;
- a directory it writes in is a file, or under one, or not writable. A plugin or registry path that was a file
  stopped it half-started with ``NotADirectoryError`` or ``FileExistsError``."""

from __future__ import annotations

import asyncio
import ctypes.util
import os
import sys
from pathlib import Path

import pytest

from gpudra.agent import startdirs
from gpudra.agent.main import driver_ready
from gpudra.agent.startdirs import check_agent_directories
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.config import AgentSettings
from gpudra.errors import ConfigurationError
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig


class _NoDriver:
    """NVML's binding as a node without the kernel module answers it."""

    NVML_ERROR_DRIVER_NOT_LOADED = 9

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return "Driver Not Loaded"

    def nvmlInit(self) -> None:
        raise self.NVMLError(self.NVML_ERROR_DRIVER_NOT_LOADED)


async def agent_refusal(tmp_path: Path, server: str = "http://127.0.0.1:9", **env: str) -> list[str]:
    """``gpudra agent`` run with ``env`` over a node's usual settings, its kubeconfig a token ``t`` for ``server``;
    the lines it wrote on standard error, after checking that it exited with status 2 and offered the kubelet no
    plugin."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", Credentials(server=server, token="t"))
    settings = {
        "GPUDRA_NODE_NAME": "gpu-node-3",
        "GPUDRA_KUBECONFIG": str(kubeconfig),
        "GPUDRA_PLUGIN_DIR": str(tmp_path / "plugins"),
        "GPUDRA_REGISTRY_DIR": str(tmp_path / "registry"),
        "GPUDRA_CDI_DIR": str(tmp_path / "cdi"),
        "GPUDRA_COMPUTE_DOMAIN_PLUGIN_DIR": str(tmp_path / "cd"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "agent",
        env={**os.environ, **settings, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2, err.decode()
    registry = tmp_path / "registry"
    assert not registry.is_dir() or not list(registry.glob("*.sock"))
    return err.decode().strip().splitlines()


def test_a_driver_that_is_not_loaded_is_said_with_what_to_look_at() -> None:
    with pytest.raises(ConfigurationError) as caught:
        driver_ready(NvmlBackend("gpu-node-3", nvml=_NoDriver()))
    assert str(caught.value) == (
        "initialise NVML of node gpu-node-3: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED): the NVIDIA kernel "
        "module is not loaded on this node (nvidia-smi on the node says the same); under the GPU Operator, its "
        "driver pod installs it"
    )


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVIDIA's driver"
)
async def test_the_agent_without_libnvidia_ml_stops_with_one_line(tmp_path: Path) -> None:
    assert await agent_refusal(tmp_path, GPUDRA_BACKEND="nvml") == [
        "gpudra agent: initialise NVML of node gpu-node-3: NVML Shared Library Not Found "
        "(NVML_ERROR_LIBRARY_NOT_FOUND): the NVIDIA driver's libnvidia-ml.so.1 is not in the agent's container: "
        "is the driver installed on this node, and does the NVIDIA container toolkit inject it (the agent asks "
        "for it with NVIDIA_VISIBLE_DEVICES=all)? The agent belongs on GPU nodes only (the chart's "
        "agent.nodeSelector)"
    ]


async def test_the_agent_whose_directories_are_files_stops_naming_each(tmp_path: Path) -> None:
    (tmp_path / "in-the-way").write_text("")
    lines = await agent_refusal(
        tmp_path,
        GPUDRA_BACKEND="simulated",
        GPUDRA_SIMULATED_PROFILE="l4x4",
        GPUDRA_PLUGIN_DIR=str(tmp_path / "in-the-way"),
        GPUDRA_REGISTRY_DIR=str(tmp_path / "in-the-way" / "registry"),
    )
    assert lines == [
        f"gpudra agent: GPUDRA_PLUGIN_DIR: {tmp_path}/in-the-way is not a directory; "
        f"GPUDRA_REGISTRY_DIR: {tmp_path}/in-the-way, on its path, is a file"
    ]


def test_a_directory_the_agent_may_not_write_in_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only mount (os.access says so for root too; chmod would not stop root, so it is asked here)."""
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != cdi)
    settings = AgentSettings(
        node_name="n", plugin_dir=tmp_path / "p", registry_dir=tmp_path / "r", cdi_dir=cdi / "specs"
    )
    with pytest.raises(ConfigurationError) as caught:
        check_agent_directories(settings)
    assert str(caught.value) == (
        f"GPUDRA_CDI_DIR: {cdi} is not writable (to make {cdi}/specs in it): a read-only mount, or "
        "another owner"
    )


def test_a_state_directory_that_is_the_plugin_directory_is_named_once(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    settings = AgentSettings(node_name="n", plugin_dir=tmp_path / "file", registry_dir=tmp_path / "r")
    names = [name for name, _ in startdirs.agent_directories(settings)]
    assert "GPUDRA_STATE_DIR" not in names and names[0] == "GPUDRA_PLUGIN_DIR"
    with pytest.raises(ConfigurationError, match=r"^GPUDRA_PLUGIN_DIR: .*/file is not a directory$"):
        check_agent_directories(settings)


async def test_the_agent_whose_credentials_the_api_server_refuses_stops_with_one_line(
    tmp_path: Path, apiserver: EmbeddedAPIServer
) -> None:
    """Its parts fail together (an exception group): each error of gpudra's own is said in one line, where the
    group's traceback was."""
    lines = await agent_refusal(
        tmp_path, apiserver.url, GPUDRA_BACKEND="simulated", GPUDRA_SIMULATED_PROFILE="l4x4"
    )
    assert lines[-1] == "gpudra agent: get nodes/gpu-node-3: 401 Unauthorized: Unauthorized", lines
    assert not any("Traceback" in line for line in lines), lines


async def test_the_controller_whose_credentials_the_api_server_refuses_stops_with_one_line(
    tmp_path: Path, apiserver: EmbeddedAPIServer
) -> None:
    """kopf gave up with "Ran out of valid credentials. Consider installing an API client library" and its
    traceback."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", Credentials(server=apiserver.url, token="t"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "controller", "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 2, err.decode()[-3000:]
    assert lines[-1] == (
        "gpudra controller: the API server refused the controller's credentials (401 Unauthorized): the token of "
        "its ServiceAccount, or the kubeconfig's user, is not valid for this cluster"
    )
