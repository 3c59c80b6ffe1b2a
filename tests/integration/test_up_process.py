"""`gpudra up` as a user runs it: metrics of the fleet on an HTTP endpoint, clean shutdown on SIGTERM and SIGINT,
and a clear error for a bad --nodes value."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.up import EmbeddedCluster, UpOptions


async def test_metrics_endpoint_reports_devices_per_node_and_type(tmp_path: Path) -> None:
    options = UpOptions(
        nodes=parse_fleet("l4x4:1,dgx-a100:1", {"l4x4", "dgx-a100"}),
        kubeconfig=tmp_path / "kc",
        metrics_port=0,
    )
    cluster = EmbeddedCluster(options)
    await cluster.start()
    try:
        async with aiohttp.ClientSession() as session, session.get(cluster.metrics_url) as response:
            text = await response.text()
    finally:
        await cluster.stop()
    assert 'gpudra_devices_published{driver="gpu.nvidia.com",node="l4x4-0",profile="",type="gpu"} 4.0' in text
    assert (
        'gpudra_devices_published{driver="gpu.nvidia.com",node="dgx-a100-0",profile="1g.5gb",type="mig"} 16.0'
        in text
    )
    assert 'gpudra_resourceslices_published{driver="gpu.nvidia.com",node="l4x4-0"} 1.0' in text


async def start_up(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", "up", "--kubeconfig", str(tmp_path / "kc"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_shuts_down_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    proc = await start_up(tmp_path, "--nodes", "l4x4:1")
    assert proc.stdout is not None
    seen = b""
    while b"gpudra is up" not in seen:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line, "gpudra up ended before it was up"
        seen += line
    proc.send_signal(sig)
    await asyncio.wait_for(proc.wait(), timeout=30)
    assert proc.returncode == 0
    assert b"export KUBECONFIG=" in seen


async def test_unknown_profile_is_a_clear_error(tmp_path: Path) -> None:
    proc = await start_up(tmp_path, "--nodes", "dgx-h999:1", "--once")
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2
    assert "unknown node profile 'dgx-h999'" in err.decode()
    assert not (tmp_path / "kc").exists()
