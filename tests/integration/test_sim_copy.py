"""`gpudra up --from-cluster`: a second embedded cluster stands in as the real one. The copy reads it with GET
requests only (a recording proxy sits between them), has its GPU nodes with the same names, labels, GPUs, UUIDs and
MIG instances, its DeviceClasses, and (with claims) its allocated claims prepared on the same devices and its pending
claims still pending. Then "what if": a MigLayout applied to the copy is Blocked by the claim in use, and with
allowPartial it makes room for the pending claim, while the real cluster is untouched."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from clusterkit import StartCluster, client_of, eventually
from gpudra.cluster.sim.clustercopy import read_cluster, seed
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

MIG_LAYOUTS = Resource("gpudra.dev", "v1alpha1", "miglayouts", "MigLayout", namespaced=False)


def claim(name: str, device_class: str, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
    }  # fmt: skip


def pod(name: str, claim_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"resourceClaims": [{"name": "r", "resourceClaimName": claim_name}],
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "r"}]}}]},
    }  # fmt: skip


async def gpudra(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpudra", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=180)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def phase(client: KubeClient, name: str) -> str | None:
    phase: str | None = (await client.get_raw(PODS, name, "default")).get("status", {}).get("phase")
    return phase


async def allocation(client: KubeClient, name: str) -> list[dict[str, Any]]:
    status = (await client.get_raw(RESOURCE_CLAIMS, name, "default")).get("status") or {}
    return list(((status.get("allocation") or {}).get("devices") or {}).get("results") or [])


@pytest.fixture
async def real(start_cluster: StartCluster) -> EmbeddedCluster:
    """The "real" cluster: a MIG node with a 1g.5gb claim in use and a pending 4g.20gb claim, and an L4 node."""
    cluster = await start_cluster("dgx-a100:1,l4x4:1")
    client = client_of(cluster)
    small = 'device.attributes["gpu.nvidia.com"].profile == "1g.5gb"'
    large = 'device.attributes["gpu.nvidia.com"].profile == "4g.20gb"'
    await client.create(RESOURCE_CLAIMS, claim("small", "mig.nvidia.com", small), "default")
    await client.create(PODS, pod("small", "small"), "default")
    await client.create(RESOURCE_CLAIMS, claim("large", "mig.nvidia.com", large), "default")
    await client.create(PODS, pod("large", "large"), "default")
    await eventually(lambda: _running(client, "small"))
    return cluster


async def _running(client: KubeClient, name: str) -> bool:
    return await phase(client, name) == "Running"


@pytest.fixture
async def proxy(real: EmbeddedCluster, tmp_path: Path) -> AsyncIterator[tuple[Path, list[str]]]:
    """A kubeconfig of a proxy in front of the real cluster, and the methods of the requests it passed."""
    methods: list[str] = []
    assert real.serving_tls is not None
    upstream_tls = ssl.create_default_context(cafile=real.serving_tls.ca)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=upstream_tls))

    async def forward(request: web.Request) -> web.StreamResponse:
        methods.append(request.method)
        async with session.request(
            request.method, real.url + request.path_qs, data=await request.read(), headers=request.headers
        ) as upstream:
            return web.Response(body=await upstream.read(), status=upstream.status,
                                content_type=upstream.content_type)  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "real-kubeconfig"
    config = yaml.safe_load(real.options.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    kubeconfig.write_text(yaml.safe_dump(config))
    try:
        yield kubeconfig, methods
    finally:
        await runner.cleanup()
        await session.close()


async def test_the_copy_only_reads_and_has_the_same_fleet(
    real: EmbeddedCluster, proxy: tuple[Path, list[str]], start_cluster: StartCluster
) -> None:
    kubeconfig, methods = proxy
    copy = await read_cluster(kubeconfig, with_claims=False)
    assert methods and set(methods) == {"GET"}
    assert [n.name for n in copy.nodes] == ["dgx-a100-0", "l4x4-0"]
    copied = await start_cluster(copy.nodes, seed=lambda client: seed(client, copy))

    async def devices(cluster: EmbeddedCluster) -> dict[tuple[str, str], Any]:
        slices, _ = await client_of(cluster).list_raw(RESOURCE_SLICES)
        return {(s["spec"]["nodeName"], d["name"]): d for s in slices for d in s["spec"].get("devices") or []}

    assert await devices(copied) == await devices(real)
    real_node = await client_of(real).get_raw(NODES, "dgx-a100-0")
    copy_node = await client_of(copied).get_raw(NODES, "dgx-a100-0")
    assert copy_node["metadata"]["labels"] == real_node["metadata"]["labels"]
    names = {c["metadata"]["name"] for c in (await client_of(copied).list_raw(DEVICE_CLASSES))[0]}
    assert names >= {c["metadata"]["name"] for c in (await client_of(real).list_raw(DEVICE_CLASSES))[0]}


async def test_what_if_a_mig_layout_on_the_copy(
    real: EmbeddedCluster, proxy: tuple[Path, list[str]], start_cluster: StartCluster
) -> None:
    kubeconfig, methods = proxy
    copy = await read_cluster(kubeconfig, with_claims=True)
    assert set(methods) == {"GET"}
    assert {c["metadata"]["name"] for c in copy.claims} == {"small", "large"}
    copied = await start_cluster(
        copy.nodes, seed=lambda client: seed(client, copy), hardware_poll_seconds=0.1, web_port=0
    )
    client = client_of(copied)
    await eventually(lambda: _running(client, "small"), timeout=30)

    async def web_card() -> str:
        """The web view's card of the pending claim, '' once it is gone."""
        async with aiohttp.ClientSession() as session, session.get(copied.web_url) as response:
            page = await response.text()
        found = re.search(r'data-frag="pending/default/large".*?(?=data-frag=|$)', page, re.S)
        return found.group(0) if found else ""

    async def web_explained() -> str:
        card = await web_card()
        return "" if "being explained" in card else card

    card = await eventually(
        web_explained, timeout=30
    )  # the web view of the copy answers "what if" as explain does
    assert "would fit on dgx-a100-0 if its MIG layout had a 4g.20gb free (the MIG planner can do this" in card
    assert await allocation(client, "small") == await allocation(client_of(real), "small")
    assert not await allocation(client, "large")  # pending in the copy as in the real cluster

    code, explained = await gpudra(
        "explain", "claim", "large", "-o", "wide", "--kubeconfig", str(copied.options.kubeconfig)
    )
    assert code == 1, explained  # it cannot fit now
    assert "MIG repartition that would satisfy this claim" in explained and "4g.20gb" in explained

    layout = {
        "apiVersion": "gpudra.dev/v1alpha1", "kind": "MigLayout", "metadata": {"name": "bigger"},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "dgx-a100-0"}},
                 "layout": {"entries": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.20gb": 1}}]}},
    }  # fmt: skip
    await client.create(MIG_LAYOUTS, layout)

    async def blocked() -> list[str] | None:
        nodes = ((await client.get_raw(MIG_LAYOUTS, "bigger")).get("status") or {}).get("nodes") or []
        return next((n.get("blockedBy") for n in nodes if n.get("state") == "blocked"), None)

    assert await eventually(blocked, timeout=30) == ["default/small"]  # what it would block
    await client.patch(MIG_LAYOUTS, "bigger", {"spec": {"allowPartial": True}})
    (result,) = await eventually(lambda: allocation(client, "large"), timeout=60)  # what would then fit
    assert result["pool"] == "dgx-a100-0"

    async def web_card_gone() -> bool:
        return await web_card() == ""

    await eventually(web_card_gone, timeout=30)
    assert not await allocation(client_of(real), "large")
    assert set(methods) == {"GET"}


@pytest.mark.slow
async def test_gpudra_up_from_cluster_says_it_only_reads(
    real: EmbeddedCluster, proxy: tuple[Path, list[str]], tmp_path: Path
) -> None:
    kubeconfig, methods = proxy
    code, out = await gpudra(
        "up",
        "--from-cluster",
        str(kubeconfig),
        "--with-claims",
        "--once",
        "--kubeconfig",
        str(tmp_path / "copy" / "kc"),
    )
    assert code == 0, out[-3000:]
    assert "with get and list only; nothing is written to that cluster" in out
    classes = len((await client_of(real).list_raw(DEVICE_CLASSES))[0])
    assert (
        f"copied 2 GPU nodes (12 GPUs) and {classes} DeviceClasses, 2 ResourceClaims (1 allocated) and 2 pods"
        in out
    )
    assert set(methods) == {"GET"}
