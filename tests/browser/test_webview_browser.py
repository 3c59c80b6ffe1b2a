"""The web view in a real browser (Debian's chromium through Playwright): the fleet and its MIG slices on load,
then a pending claim's reason and a MIG layout's slots appearing as the cluster changes, without a reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from browserkit import Browser
from clusterkit import StartCluster, gpu_claim, mig_layout
from gpudra.allocator.diagnosis import NodesFailure
from gpudra.api.dra import ResourceClaim
from gpudra.cluster.up import EmbeddedCluster
from gpudra.controller.explaining import explain, explanation, load_view
from gpudra.controller.miglayouts import MIGLAYOUTS
from gpudra.kube.resources import RESOURCE_CLAIMS

pytestmark = pytest.mark.slow

NINE_GPUS = gpu_claim("nine", 9)
H100_BALANCED = mig_layout("balanced", "dgx-h100-0")
NODE = '[data-frag="node/{}"]'


@pytest.fixture
async def cluster(start_cluster: StartCluster) -> EmbeddedCluster:
    return await start_cluster("dgx-h100:1,dgx-a100:1", web_port=0)


async def test_fleet_and_mig_slices_show_on_load(cluster: EmbeddedCluster, browser: Browser) -> None:
    await browser.send("open", url=cluster.web_url)
    await browser.wait("#live.on")
    a100 = NODE.format("dgx-a100-0")
    assert await browser.count(f"{a100} .mig") == 8  # all-balanced: every GPU drawn with its instances
    assert await browser.count(f'{a100} .mig[data-gpu="gpu-0"] .slots .inst') == 4
    block = f'{a100} .mig[data-gpu="gpu-0"] .slots .inst[data-profile="3g.20gb"]'
    three = await browser.evaluate(
        f"""(() => {{ const b = document.querySelector('{block}');
        const row = b.parentElement.getBoundingClientRect(), r = b.getBoundingClientRect();
        return [Math.round(8 * (r.left - row.left) / row.width), Math.round(8 * r.width / row.width)]; }})()"""
    )
    assert three == [4, 4]  # drawn over memory slices 4-7, to scale
    assert await browser.count(f"{NODE.format('dgx-h100-0')} .gpu.free") == 8


async def test_pending_reason_and_layout_slots_appear_without_a_reload(
    cluster: EmbeddedCluster, browser: Browser, tmp_path: Path
) -> None:
    assert cluster.client is not None
    await browser.send("open", url=cluster.web_url)
    await browser.wait("#live.on")
    assert await browser.count('[data-frag^="pending/"]') == 0
    await cluster.client.create(RESOURCE_CLAIMS, NINE_GPUS, "default")
    view = await load_view(cluster.client)
    claim = ResourceClaim.model_validate(NINE_GPUS)
    outcome = explain(view, claim)
    assert isinstance(outcome, NodesFailure)
    expected = explanation(view, claim, outcome, None)  # what `gpudra explain claim nine` and its Event say
    reason = await browser.wait('[data-frag="pending/default/nine"] .reason', expected.reason)
    assert reason == expected.reason
    headline = await browser.wait('[data-frag="pending/default/nine"] .headline')
    assert headline == expected.headline
    rows = await browser.evaluate(
        """Array.from(document.querySelectorAll('[data-frag="pending/default/nine"] table.why tr'))
            .slice(1).map(r => r.cells[0].textContent)"""
    )
    assert rows == [n.node for n in expected.nodes]  # node by node, nearest first

    h100 = NODE.format("dgx-h100-0")
    await cluster.client.create(MIGLAYOUTS, H100_BALANCED)
    await browser.wait(f'{h100} .mig[data-gpu="gpu-7"] .slots .inst[data-profile="3g.40gb"]', timeout=60)
    slots = await browser.evaluate(
        f"""Array.from(document.querySelectorAll('{h100} .mig[data-gpu="gpu-0"] .slots .inst'))
            .map(e => [e.dataset.profile, +e.dataset.start, +e.dataset.size])"""
    )
    assert sorted(slots) == [["1g.10gb", 2, 1], ["1g.10gb", 3, 1], ["2g.20gb", 0, 2], ["3g.40gb", 4, 4]]
    await browser.wait('[data-frag="layout/balanced"] .lstate', "success", timeout=60)
    assert (await browser.send("navigations"))["value"] == 0  # the page never reloaded
    await browser.send("screenshot", path=str(tmp_path / "webview.png"), fullPage=True)
    assert (tmp_path / "webview.png").stat().st_size > 10_000
