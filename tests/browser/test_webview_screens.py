"""The web view on a phone (390 px), a tablet (768 px) and a desktop (1440 px), in a real browser: no page scroll
sideways, the fleet first with the pending claims folded above it, a GPU that is held and faulted drawn apart from a
free faulted one, the pods that hold GPUs named without hovering, the summary counting what the tiles show, an icon,
and stale data greyed out while the page reconnects."""

from __future__ import annotations

from typing import Any

import pytest

from browserkit import Browser
from clusterkit import StartCluster, gpu_claim, kubectl
from gpudra.cluster.sim.faults import inject, parse_fault
from gpudra.cluster.up import EmbeddedCluster
from gpudra.kube.resources import RESOURCE_CLAIMS
from upgradekit import all_running, gpu_pod

pytestmark = pytest.mark.slow

WIDTHS = (390, 768, 1440)
NODE = '[data-frag="node/{}"]'

LAYOUT = """(() => {
  const width = window.innerWidth, header = document.querySelector('header').getBoundingClientRect();
  const live = document.getElementById('live').getBoundingClientRect();
  const top = (id) => document.getElementById(id).getBoundingClientRect().top;
  return {
    pageWidth: document.documentElement.scrollWidth, width,
    liveInside: live.right <= width && live.left >= 0 && live.bottom <= header.bottom,
    narrowestNode: Math.min(...Array.from(document.querySelectorAll('.node'), n => n.getBoundingClientRect().width)),
    pendingAboveNodes: top('s-pending') < top('s-nodes'),
    pendingHeight: document.getElementById('s-pending').getBoundingClientRect().height,
  };
})()"""


async def held_and_faulted(cluster: EmbeddedCluster) -> str:
    """Two pods on dgx-h100-0, one claim that cannot fit, and an XID on the first pod's GPU: its device name."""
    assert cluster.client is not None
    await kubectl(cluster, "apply", "-f", "-", stdin=gpu_pod("train") + "---" + gpu_pod("infer"))
    await all_running(cluster, ["train", "infer"])
    await cluster.client.create(RESOURCE_CLAIMS, gpu_claim("nine", 9), "default")
    claim = await cluster.client.get_raw(RESOURCE_CLAIMS, "train", "default")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    fault = {"nodeName": result["pool"], "device": result["device"], "fault": "Xid", "xid": 79}
    assert inject(cluster.simulated, parse_fault(fault)).heard
    return str(result["device"])


async def layout(browser: Browser, width: int) -> dict[str, Any]:
    await browser.send("viewport", width=width, height=900)
    return dict(await browser.evaluate(LAYOUT))


async def test_the_page_fits_every_screen_and_says_what_it_shows(
    start_cluster: StartCluster, browser: Browser
) -> None:
    cluster = await start_cluster("dgx-h100:2", web_port=0, hardware_poll_seconds=0.1)
    faulted = await held_and_faulted(cluster)
    await browser.send("open", url=cluster.web_url, width=WIDTHS[0], height=900)
    await browser.wait("#live.on")
    await browser.wait(f'{NODE.format("dgx-h100-0")} .gpu.unhealthy.held[data-gpu="{faulted}"]', timeout=60)
    await browser.wait('[data-frag="pending/default/nine"] .reason')

    for width in WIDTHS:
        seen = await layout(browser, width)
        assert seen["pageWidth"] <= seen["width"], (width, seen)  # no page scroll sideways
        assert seen["liveInside"], (width, seen)
        assert seen["narrowestNode"] >= min(300, width - 40), (width, seen)  # cards wrap, never crushed
        assert seen["pendingAboveNodes"] and seen["pendingHeight"] < 120, (width, seen)  # folded to its line

    # held and faulted is not drawn as free and faulted
    backgrounds = await browser.evaluate(
        """['.gpu.unhealthy.held', '.gpu.free'].map(s => getComputedStyle(document.querySelector(s)).backgroundImage)"""
    )
    assert backgrounds[0] != "none" and backgrounds[0] != backgrounds[1]
    # who holds what, without hovering: the pods by name, under their GPUs
    users = await browser.evaluate(f"document.querySelector('{NODE.format('dgx-h100-0')} .users').innerText")
    assert "train" in users and "infer" in users
    # the summary counts what the tiles show
    tiles = await browser.evaluate(
        """({held: document.querySelectorAll('.gpu.allocated, .gpu.unhealthy.held').length,
            unhealthy: document.querySelectorAll('.gpu.unhealthy').length,
            free: document.querySelectorAll('.gpu.free').length})"""
    )
    stats = await browser.evaluate(
        """Object.fromEntries(Array.from(document.querySelectorAll('.stat'))
            .map(s => [s.dataset.stat, +s.querySelector('b').textContent]))"""
    )
    assert (stats["held"], stats["unhealthy"], stats["free"]) == (
        tiles["held"],
        tiles["unhealthy"],
        tiles["free"],
    )
    assert (stats["held"], stats["unhealthy"]) == (2, 1)
    assert await browser.evaluate(
        "document.querySelector('link[rel=icon]').href.startsWith('data:image/svg')"
    )

    # the stream breaks: what the page shows is greyed out until it is back
    await browser.evaluate("window.__eventSources[0].dispatchEvent(new Event('error'))")
    assert await browser.evaluate(
        "document.body.classList.contains('stale') && getComputedStyle(document.querySelector('main')).opacity < 1"
    )
    await browser.evaluate("window.__eventSources[0].dispatchEvent(new Event('open'))")
    assert not await browser.evaluate("document.body.classList.contains('stale')")
