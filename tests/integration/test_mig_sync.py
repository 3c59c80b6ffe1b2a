"""The agent's MIG loop against the embedded API server: it follows its Node's desired-state annotation, reports on
the Node as mig-manager does, and a restarted agent carries on without rewriting an unchanged report."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from clusterkit import eventually
from gpudra.agent.miglayout.applier import MigApplier
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.agent.miglayout.loop import MigSync
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES
from gpudra.mig.desired import (
    CONFIG_STATE_LABEL,
    DESIRED_ANNOTATION,
    STATE_ANNOTATION,
    DesiredState,
    NodeReport,
)

NODE = "gpu-node"


class RecordingSync(MigSync):
    """Counts the Node patches it makes and signals each finished pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.patches = 0
        self.passes = asyncio.Event()

    async def _write(self, report: NodeReport, with_label: bool) -> None:
        before = self._written
        await super()._write(report, with_label)
        self.patches += self._written != before
        self.passes.set()


async def run_sync(
    client: KubeClient, backend: NvmlBackend, state: Path
) -> tuple[RecordingSync, asyncio.Task[None]]:
    applier = MigApplier(backend, PlanJournal(state / "mig-plan.json", node=NODE), node=NODE)
    sync = RecordingSync(client, applier, node=NODE, poke=lambda: None, retry_seconds=0.1)
    return sync, asyncio.create_task(sync.run())


async def test_the_agent_follows_its_node_and_resumes_quietly(
    apiserver: EmbeddedAPIServer, tmp_path: Path
) -> None:
    client = KubeClient.for_url(apiserver.url, token=apiserver.token())
    backend = NvmlBackend(NODE, nvml=FakeNvml.from_profile("dgx-h100", node_name=NODE))
    desired = DesiredState(
        source="Label",
        name="all-1g.10gb",
        entries=({"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},),
    )
    await client.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "annotations": {DESIRED_ANNOTATION: desired.to_json()}},
        },
    )
    _, task = await run_sync(client, backend, tmp_path)
    try:

        async def success() -> NodeReport | None:
            meta = (await client.get_raw(NODES, NODE))["metadata"]
            report = NodeReport.from_json((meta.get("annotations") or {}).get(STATE_ANNOTATION, ""))
            ok = (
                report is not None
                and report.state == "success"
                and meta["labels"][CONFIG_STATE_LABEL] == "success"
            )
            return report if ok else None

        report = await eventually(success)
        assert report.key == "Label/all-1g.10gb@0" and len(report.gpus) == 8
        assert len(backend.read_inventory().gpus[0].mig_devices) == 7
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    restarted, task = await run_sync(client, backend, tmp_path)
    try:
        await asyncio.wait_for(restarted.passes.wait(), timeout=15)
        assert restarted.patches == 0, "an unchanged report is not rewritten after a restart"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
