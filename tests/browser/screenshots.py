"""The web view's screenshots in docs/: `make screenshots` (or `python tests/browser/screenshots.py DIR`).

Starts an embedded cluster with the web view, applies the repository's examples (two pods on H100s, a MIG
workload on the A100, a claim no node can satisfy, a MigLayout, a ComputeDomain job on two GB200 trays), waits
until the page shows each of them, and has chromium take the pictures: the whole page, a few parts of it, and the
first screen at 390, 768 and 1440 px."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from browserkit import BROWSER_DIR, Browser, missing  # noqa: E402
from gpudra.cluster.fleet import parse_fleet  # noqa: E402
from gpudra.cluster.up import EmbeddedCluster, UpOptions  # noqa: E402
from gpudra.controller.miglayouts import MIGLAYOUTS  # noqa: E402
from gpudra.kube.client import KubeClient  # noqa: E402
from gpudra.kube.resources import (  # noqa: E402
    COMPUTE_DOMAINS,
    JOBS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    Resource,
)

FLEET = "dgx-a100:1,dgx-h100:2,l4x4:1,gb200-nvl72:2"
SCREENS = (390, 768, 1440)
EXAMPLES = [
    "examples/seeds/01-template-two-pods.yaml",
    "examples/seeds/03-two-containers-one-claim.yaml",
    "examples/seeds/06-unsatisfiable.yaml",
    "examples/computedomain/computedomain.yaml",
    "examples/computedomain/job.yaml",
]
KINDS: dict[str, Resource] = {
    r.kind: r for r in (PODS, JOBS, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES, COMPUTE_DOMAINS, MIGLAYOUTS)
}
LAYOUT = {
    "apiVersion": "gpudra.dev/v1alpha1",
    "kind": "MigLayout",
    "metadata": {"name": "h100-balanced"},
    "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "dgx-h100-1"}},
             "layout": {"config": "all-balanced"}},
}  # fmt: skip


async def apply(client: KubeClient, doc: dict[str, Any]) -> None:
    resource = KINDS[doc["kind"]]
    await client.create(
        resource, doc, doc["metadata"].get("namespace", "default") if resource.namespaced else None
    )


async def take(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        options = UpOptions(nodes=parse_fleet(FLEET, {p.split(":")[0] for p in FLEET.split(",")}),
                            kubeconfig=Path(tmp) / "kubeconfig", web_port=0)  # fmt: skip
        cluster = EmbeddedCluster(options)
        await cluster.start()
        process = await asyncio.create_subprocess_exec(
            "node", str(BROWSER_DIR / "driver.mjs"), cwd=BROWSER_DIR,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        browser = Browser(process)
        try:
            assert cluster.client is not None
            for path in EXAMPLES:
                for doc in yaml.safe_load_all((ROOT / path).read_text()):
                    if doc:
                        await apply(cluster.client, doc)
            await apply(cluster.client, LAYOUT)
            await browser.send("open", url=cluster.web_url, width=1400, height=1000)
            await browser.wait('[data-frag="layout/h100-balanced"] .lstate', "success", timeout=90)
            await browser.wait(
                '[data-frag="pending/default/b300-please"] .reason', "NoMatchingDevice", timeout=60
            )
            await browser.wait('[data-frag="domain/default/train"][data-status="Ready"]', timeout=90)
            await browser.wait('[data-frag="node/dgx-a100-0"] .inst.held', timeout=60)
            await browser.send("screenshot", path=str(out / "webview.png"), fullPage=True)
            await browser.send(
                "screenshot", path=str(out / "webview-mig.png"), selector='[data-frag="node/dgx-a100-0"]'
            )
            await browser.send("screenshot", path=str(out / "webview-mig-layout.png"),
                               selector='[data-frag="node/dgx-h100-1"]')  # fmt: skip
            await browser.send("screenshot", path=str(out / "webview-pending.png"),
                               selector='[data-frag="pending/default/b300-please"]')  # fmt: skip
            for width in SCREENS:  # the first screen on a phone, a tablet and a desktop
                await browser.evaluate("window.scrollTo(0, 0)")
                await browser.send(
                    "screenshot", path=str(out / f"webview-{width}.png"), width=width, height=900
                )
        finally:
            await browser.send("close")
            await process.wait()
            await cluster.stop()
    print(f"screenshots written to {out}")


def main() -> int:
    reason = missing()
    if reason is not None:
        print(f"screenshots: {reason}", file=sys.stderr)
        return 1
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images").resolve()
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(take(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
