"""The CLI's commands that read a cluster, without one: no kubeconfig, a kubeconfig of a cluster that is down, a
claim that does not exist. Each says what is wrong in a line and exits 2, never a traceback (#39: a new user without
KUBECONFIG got 36 lines ending in "ConfigException: Invalid kube-config file")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import StartCluster
from gpudra.cluster.processes import free_port
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig

COMMANDS = [["status"], ["explain", "claim", "nope"]]


def gpudra(args: list[str], kubeconfig: Path, home: Path) -> tuple[int, str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "gpudra", *args], env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_no_kubeconfig_is_a_sentence(args: list[str], tmp_path: Path) -> None:
    code, out = gpudra(args, tmp_path / "missing", tmp_path)
    assert code == 2, out
    assert "Traceback" not in out
    assert (
        f"no usable kubeconfig at {tmp_path / 'missing'}" in out and "set KUBECONFIG or --kubeconfig" in out
    )


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_cluster_that_is_down_is_a_sentence(args: list[str], tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=f"http://127.0.0.1:{free_port()}")
    )
    code, out = gpudra(args, kubeconfig, tmp_path)
    assert code == 2, out
    assert "Traceback" not in out and "connection failed" in out


async def test_a_claim_that_does_not_exist_is_a_sentence(start_cluster: StartCluster, tmp_path: Path) -> None:
    cluster = await start_cluster("dgx-h100:1")
    code, out = await asyncio.to_thread(
        gpudra, ["explain", "claim", "nope", "-n", "default"], cluster.options.kubeconfig, tmp_path
    )
    assert code == 2 and "Traceback" not in out and "nope" in out, out
