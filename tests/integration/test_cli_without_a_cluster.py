"""The CLI's commands that read a cluster, without one: no kubeconfig, a kubeconfig of a cluster that is down; and
every command given a name that does not exist (a claim, a namespace, a node, a device, a profile, a file). Each
says what is wrong in a line or two and exits 2, never a traceback (#39: a new user without KUBECONFIG got 36 lines
ending in "ConfigException: Invalid kube-config file")."""

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
        f"no usable kubeconfig at {tmp_path / 'missing'} (no such file)" in out
        and "set KUBECONFIG or --kubeconfig" in out
    )
    assert len(out.splitlines()) == 1, out  # not kubernetes_asyncio's own warning first


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_cluster_that_is_down_is_a_sentence(args: list[str], tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", Credentials(server=f"http://127.0.0.1:{free_port()}")
    )
    code, out = gpudra(args, kubeconfig, tmp_path)
    assert code == 2, out
    assert "Traceback" not in out and "connection failed" in out


WRONG_NAMES = [
    (["explain", "claim", "nope", "-n", "default"], "no ResourceClaim 'nope' in namespace 'default'"),
    (["explain", "claim", "nope", "-n", "nowhere"], "kubectl get resourceclaims -n nowhere"),
    (["explain", "--file", "/nowhere/claim.yaml"], "cannot read /nowhere/claim.yaml"),
    (["explain", "pod", "nope", "-n", "default"], "no Pod 'nope' in namespace 'default'"),
    (
        ["status", "--driver-name", "gpu.nvidai.com"],
        "no ResourceSlice is published by driver 'gpu.nvidai.com'",
    ),
    (
        ["sim", "fault", "dgx-h100-9", "gpu-0", "xid", "79"],
        "no simulated node 'dgx-h100-9' (nodes: dgx-h100-0)",
    ),
    (["sim", "fault", "dgx-h100-0", "gpu-9", "recover"], "dgx-h100-0 has no GPU gpu-9"),
    (["hardware", "record", "--simulated-profile", "dgx-h999"], "unknown node profile 'dgx-h999'"),
    (["up", "--once", "--nodes", "dgx-h999:1"], "unknown node profile 'dgx-h999'"),
    (["up", "--once", "--fleet", "/nowhere/fleet.yaml"], "cannot read the fleet file /nowhere/fleet.yaml"),
    (
        ["up", "--once", "--from-cluster", "/nowhere/kubeconfig"],
        "no usable kubeconfig at /nowhere/kubeconfig",
    ),
]


async def test_a_wrong_name_is_a_sentence_or_two(start_cluster: StartCluster, tmp_path: Path) -> None:
    cluster = await start_cluster("dgx-h100:1")
    invalid = tmp_path / "invalid-claim.yaml"  # a manifest that is a ResourceClaim in name only
    invalid.write_text("kind: ResourceClaim\nspec: {devices: {requests: [{name: 7}, {exactly: 3}]}}\n")
    wrong_names = [
        *WRONG_NAMES,
        (["explain", "--file", str(invalid)], "is not a valid ResourceClaim: spec.devices"),
    ]
    for args, said in wrong_names:
        if args[0] == "up":
            args = [*args, "--kubeconfig", str(tmp_path / "other" / "kubeconfig")]
        code, out = await asyncio.to_thread(gpudra, args, cluster.options.kubeconfig, tmp_path)
        assert code == 2 and "Traceback" not in out and said in out, (args, out)
        assert len(out.splitlines()) <= 2, (args, out)
