"""The agent's MIG loop: follow this node's desired state (Node annotation ``gpudra.dev/mig-desired``), run the
applier, report back on the Node.

The agent watches only its own Node (field selector). A pass runs when the desired state changes and, until the
node reaches it, every ``mig_retry_seconds`` (a blocked node proceeds by itself once the claims in its way are
released; a pending GPU reset is noticed when the hardware shows it). A failed pass is retried with backoff; an
invalid layout waits for a new desired state. The report goes to the annotation ``gpudra.dev/mig-state`` and
the label ``nvidia.com/mig.config.state`` (pending | success | failed, as NVIDIA's mig-manager sets it),
written only when they change. After a pass that changed the hardware the slices are republished at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal

from gpudra.agent.miglayout.applier import MigApplier
from gpudra.api.core import Node
from gpudra.api.meta import ObjectMeta
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import NODES
from gpudra.mig import (
    CONFIG_STATE_LABEL,
    DESIRED_ANNOTATION,
    LABEL_STATE,
    STATE_ANNOTATION,
    DesiredState,
    NodeReport,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)
_SETTLED = frozenset({"success", "invalid"})
_EVENT_REASONS = {
    "success": "MigLayoutApplied",
    "blocked": "MigLayoutBlocked",
    "failed": "MigLayoutFailed",
    "invalid": "MigLayoutInvalid",
}


class MigSync:
    def __init__(
        self,
        client: KubeClient,
        applier: MigApplier,
        *,
        node: str,
        poke: Callable[[], None],
        retry_seconds: float,
        events: EventRecorder | None = None,
    ) -> None:
        self._client = client
        self._applier = applier
        self._node = node
        self._poke = poke
        self._retry = retry_seconds
        self._events = events
        self._node_object: Node | None = None  # for Events; set from the first watch event
        self._wake = asyncio.Event()
        self._desired_text: str | None = None
        self._written: tuple[str, str | None] | None = None
        self.report: NodeReport | None = None

    async def _on_node(self, kind: str, body: dict[str, Any]) -> None:
        node = Node.model_validate(body)  # the informer hands over only Nodes that parse
        self._node_object = node
        if self.report is None and self._written is None:
            self._resume(node.metadata)
        text = None if kind == "DELETED" else (node.metadata.annotations or {}).get(DESIRED_ANNOTATION)
        if text != self._desired_text:
            self._desired_text = text
            self._wake.set()

    def _resume(self, meta: ObjectMeta) -> None:
        """After a restart, carry on from the report on the Node (no needless applying/success flap)."""
        text = (meta.annotations or {}).get(STATE_ANNOTATION) or ""
        self.report = NodeReport.from_json(text) if text else None
        if self.report is not None:
            label = (meta.labels or {}).get(CONFIG_STATE_LABEL) if self.report.key else None
            self._written = (text, label)

    async def run(self) -> None:
        informer = Informer(
            self._client,
            NODES,
            self._on_node,
            field_selector=f"metadata.name={self._node}",
            parse=Node.model_validate,
        )
        watch = asyncio.create_task(informer.run(), name=f"mig-watch-{self._node}")
        try:
            await informer.synced.wait()  # the first pass sees the desired state, not an empty one
            await self._loop()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _loop(self) -> None:
        applied: object = object()  # the desired text of the last pass
        delay = self._retry
        while True:
            text = self._desired_text
            settled = self.report is not None and self.report.state in _SETTLED
            if text != applied or (text is not None and not settled):
                try:
                    report = await self._pass(text)
                    delay = self._retry if report.state != "failed" else min(delay * 2, 60.0)
                    await self._write(report, text is not None)
                    applied = text
                except GpudraError as exc:
                    log.error("MIG pass failed; will retry", node=self._node, error=str(exc))
                    delay = min(delay * 2, 60.0)
            with contextlib.suppress(TimeoutError):  # not wait_for: on 3.11 it can swallow a cancellation
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            self._wake.clear()

    async def _pass(self, text: str | None) -> NodeReport:
        if text is None:
            self.report = await self._applier.report_gpus()
            return self.report
        try:
            desired = DesiredState.from_json(text)
        except GpudraError as exc:
            found = await self._applier.report_gpus()
            self.report = found.model_copy(
                update={"key": "unreadable", "state": "invalid", "message": str(exc)}
            )
            return self.report
        if self.report is None or self.report.key != desired.key:  # a new desired state: say so first
            before = self.report or NodeReport()
            applying = NodeReport(
                key=desired.key, state="applying", message="applying", gpus=before.gpus, models=before.models
            )
            await self._write(applying, True)
        report, changed = await self._applier.apply(desired)
        if changed:
            self._poke()
        if self.report is None or (report.state, report.message) != (self.report.state, self.report.message):
            log.info("MIG layout state", node=self._node, layout=desired.key, state=report.state,
                     message=report.message)  # fmt: skip
            await self._announce(report)
        self.report = report
        return report

    async def _announce(self, report: NodeReport) -> None:
        """A Node Event when the node reaches its layout or cannot (label users see them in kubectl describe)."""
        reason = _EVENT_REASONS.get(report.state)
        if self._events is None or reason is None or self._node_object is None:
            return
        kind: Literal["Normal", "Warning"] = "Normal" if report.state == "success" else "Warning"
        await self._events.post(self._node_object, kind, reason, f"{report.key}: {report.message}")

    async def _write(self, report: NodeReport, with_label: bool) -> None:
        text = report.to_json()
        label = LABEL_STATE[report.state] if with_label else None
        if self._written == (text, label):
            return
        patch: dict[str, Any] = {"metadata": {"annotations": {STATE_ANNOTATION: text}}}
        if label is not None:
            patch["metadata"]["labels"] = {CONFIG_STATE_LABEL: label}
        await self._client.patch(NODES, self._node, patch)
        self._written = (text, label)
